"""What the PostgreSQL event store costs its server: impressions and clicks written per
CPU-second of the PostgreSQL processes, and bytes per impression on its disk.

A throwaway cluster (``fsync`` on; or the server ``--postgres-dsn`` names, when the
benchmark may read its processes' CPU time: the same machine) takes, through the store's
own API and as a serving process writes them:

* ``--impressions`` impressions of 100 candidates (10 shown, six features, the demo's kind
  of values), logged from ``--threads`` threads (the store's writer batches them, as it
  does for a serving process's searches), each with its exposures counted;
* one click on every fifth of them, one ``record_click`` each (a click per request, each
  answered after its commit), from as many threads;
* the same clicks again into a second store in batches of 100 (``record_clicks``, as
  ``POST /clicks`` writes them).

Measured: the CPU time of every process of the server (``/proc/<pid>/stat``: user and
system time of the postmaster and all its children, the WAL writer and checkpointer
included) and the wall time of each part; printed as writes per PostgreSQL CPU-second,
beside the CPU-seconds this process (the client, whose store code prepares the rows) spent
on the same writes, their ratio, and the database's size per impression.

Run: python benchmarks/bench_postgres_writes.py [--impressions 20000] [--threads 8]
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

import numpy as np
from throwaway_postgres import postgres_databases

from reranker.stores.conformance import impression
from reranker.stores.postgres import PostgresStore

TICKS = os.sysconf("SC_CLK_TCK")


def server_cpu(postmaster: int) -> float:
    """CPU-seconds of the postmaster and all its children so far."""
    pids = [postmaster] + [int(p) for p in Path(f"/proc/{postmaster}/task/{postmaster}/children")
                           .read_text().split()]
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # a backend that ended meanwhile (its time is lost)
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def postmaster_pid(store: PostgresStore) -> int:
    with store._reading() as conn:
        data = store._run(conn, "SELECT setting FROM pg_settings WHERE name = "
                                "'data_directory'").fetchone()[0]
    return int((Path(data) / "postmaster.pid").read_text().split()[0])


def timed(store, postmaster, work) -> tuple[float, float, float]:
    """(server CPU-s, this process's CPU-s, wall s) of ``work()``."""
    cpu, own, wall = server_cpu(postmaster), time.process_time(), time.perf_counter()
    work()
    store.flush()
    return (server_cpu(postmaster) - cpu, time.process_time() - own,
            time.perf_counter() - wall)


def in_threads(count: int, items: list, call) -> None:
    def run(part):
        for item in part:
            call(item)

    threads = [threading.Thread(target=run, args=(items[i::count],)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impressions", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--postgres-dsn", default=os.environ.get("RERANKER_BENCH_POSTGRES_DSN"))
    args = parser.parse_args()
    with postgres_databases(args.postgres_dsn) as databases:
        one, two = PostgresStore(databases.create()), PostgresStore(databases.create())
        postmaster = postmaster_pid(one)
        rng = np.random.default_rng(0)
        rows = []

        def log(i):
            imp = impression(f"i{i}", time.time(), n=100, shown=10, arm="a",
                             query=f"query {i % 2000}")
            imp.features = np.column_stack([rng.random(100).astype(np.float32), rng.random(
                (100, 3)).astype(np.float32), rng.integers(0, 1000, 100) / 10,
                                            np.ones(100)])
            imp.feature_names = [f"f{j}" for j in range(6)]
            for store in (one, two):
                store.log_impression(imp)

        n = args.impressions

        def log_all():  # in chunks the writers keep up with (a serving process's queue
            for start in range(0, n, 2000):  # holds 10,000 before a search answers 503)
                in_threads(args.threads, list(range(start, min(start + 2000, n))), log)
                one.flush()
                two.flush()

        cost = timed(one, postmaster, log_all)
        rows.append(("impressions (logged into two stores)", 2 * n, *cost))
        clicked = [(f"i{i}", f"d{99 - i % 10}") for i in range(0, n, 5)]
        cost = timed(one, postmaster, lambda: in_threads(
            args.threads, clicked, lambda click: one.record_click(*click)))
        rows.append(("clicks, one per call (POST /click)", len(clicked), *cost))
        batches = [clicked[i:i + 100] for i in range(0, len(clicked), 100)]
        cost = timed(two, postmaster, lambda: in_threads(
            args.threads, batches, lambda batch: two.record_clicks(
                [(imp_id, doc_id, time.time()) for imp_id, doc_id in batch])))
        rows.append(("clicks, batches of 100 (POST /clicks)", len(clicked), *cost))
        with one._reading() as conn:
            size = one._run(conn, "SELECT pg_database_size(current_database())").fetchone()[0]
        print(f"PostgreSQL at {one.location}, fsync on, {args.threads} client threads")
        print(f"{'writes':40} {'count':>8} {'server CPU s':>13} {'per server CPU-s':>17} "
              f"{'client CPU s':>13} {'wall s':>8} {'per s':>8}")
        for name, count, server, client, wall in rows:
            print(f"{name:40} {count:8,} {server:13.2f} {count / server:17,.0f} "
                  f"{client:13.2f} {wall:8.2f} {count / wall:8,.0f}")
        print(f"the database: {size / 1e6:.1f} MB after {n:,} impressions and "
              f"{len(clicked):,} clicks: {size / n:,.0f} bytes per impression (with its "
              f"clicks, counts and indexes)")
        server_per_impression = rows[0][2] / rows[0][1]
        print(f"ratio: the server spends {rows[1][2] / rows[1][1] / server_per_impression:.2f} "
              f"times as much CPU on a click sent alone as on an impression, "
              f"{rows[2][2] / rows[2][1] / server_per_impression:.2f} times on a click of a "
              f"batch")
        one.close()
        two.close()


if __name__ == "__main__":
    main()

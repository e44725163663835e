"""Clicks per second through real HTTP into one `reranker serve` process, per event store, and
the clicks lost when that process is killed with SIGKILL in the middle of a stream of them.

For each store (SQLite; PostgreSQL with --postgres-dsn, or on a throwaway cluster started
with fsync on when Debian's postgresql is installed):

1. pages are logged in process (``RerankerService.search``) so that every click of the run
   is a new one (ten results per page, each clicked once);
2. ``reranker serve --no-trainer`` runs in a subprocess, serving from its own process
   (waitress) and then from one gunicorn worker process, and ``--clients`` keep-alive
   connections of this process send ``POST /click`` for ``--seconds``: clicks/s and the
   latency percentiles are printed, with this process's own CPU use (it shares the machine);
3. the same stream again, killed with SIGKILL after ``--kill-after`` seconds; the store is
   then opened anew, and every click that was answered 202 is looked for in it: the number
   missing is printed, and must be 0.

With ``--batch N`` the timed runs send ``POST /clicks`` with N clicks per request (an
application's server forwarding its users' clicks) instead of one click per ``POST /click``.

Run: python benchmarks/bench_clicks.py [--clients 32] [--seconds 5] [--batch N]
     [--postgres-dsn DSN]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

from http_load import Served, demo_queries, prepare_workdir, run_load

from reranker.core.config import load_config
from reranker.serving.service import RerankerService


def log_pages(config_path: Path, pages: int) -> list[tuple[str, str]]:
    """Log ``pages`` first pages in process; the (impression, document) pairs to click."""
    queries = demo_queries()
    service = RerankerService(load_config(config_path)).open()
    try:
        pairs = []
        for i in range(pages):
            page = service.search(queries[i % len(queries)], 10)
            pairs.extend((page["impression_id"], hit["id"]) for hit in page["hits"])
        return pairs
    finally:
        service.close()


def click_bodies(pairs: list[tuple[str, str]], clients: int):
    """``next_body`` for :func:`run_load`: thread ``i`` clicks pairs ``i``, ``i + clients``,
    ... (so no two clicks of a run are the same), None when its share is used up."""

    def next_body(index: int, n: int):
        at = index + n * clients
        if at >= len(pairs):
            return None
        return {"impression_id": pairs[at][0], "doc_id": pairs[at][1]}

    return next_body


def batch_bodies(pairs: list[tuple[str, str]], clients: int, size: int):
    """``next_body`` for :func:`run_load` with ``POST /clicks``: thread ``i`` sends batches
    ``i``, ``i + clients``, ... of ``size`` clicks each, None when its share is used up."""

    def next_body(index: int, n: int):
        at = (index + n * clients) * size
        if at + size > len(pairs):
            return None
        return {"clicks": [{"impression_id": impression_id, "doc_id": doc_id}
                           for impression_id, doc_id in pairs[at:at + size]]}

    return next_body


def stored_clicks(config_path: Path) -> set[tuple[str, str]]:
    from reranker.stores import open_event_store

    store = open_event_store(load_config(config_path))
    try:
        with store._reading() as conn:
            return {tuple(row) for row in store._run(
                conn, "SELECT impression_id, doc_id FROM clicks").fetchall()}
    finally:
        store.close()


def throughput(config_path: Path, args, workers: int) -> None:
    pairs = log_pages(config_path, args.pages)
    served = Served(config_path, "--no-trainer", "--workers", str(workers))
    batched = [0]  # clicks accepted in batches
    lock = threading.Lock()

    def count_batch(body, status, answer):
        if status == 200:
            with lock:
                batched[0] += answer["accepted"]

    try:
        if args.batch:
            result = run_load(served.url, "/clicks",
                              batch_bodies(pairs, args.clients, args.batch),
                              clients=args.clients, seconds=args.seconds,
                              on_answer=count_batch)
        else:
            result = run_load(served.url, "/click", click_bodies(pairs, args.clients),
                              clients=args.clients, seconds=args.seconds)
    finally:
        served.stop()
    accepted = batched[0] if args.batch else result.statuses.get(202, 0)
    expected = result.statuses.get(200, 0) * args.batch if args.batch else result.answered
    server = "one process (waitress)" if workers == 0 else "one gunicorn worker"
    per_second = accepted / result.seconds if result.seconds else 0.0
    print(f"  {server:<24}{per_second:>8,.0f} clicks/s   "
          f"p50 {result.percentile(50):6.1f} ms   p99 {result.percentile(99):6.1f} ms   "
          f"({accepted:,} accepted in {result.seconds:.1f} s, "
          + (f"in {result.statuses.get(200, 0):,} requests, other answers "
             f"{_others(result.statuses, 200)}; " if args.batch else
             f"other answers {_others(result.statuses)}; ")
          + f"load generator CPU {result.client_cores:.2f} cores)")
    if accepted < expected:
        sys.exit("some clicks were not accepted: the benchmark is broken")


def sigkill(config_path: Path, args) -> None:
    pairs = log_pages(config_path, args.pages)
    served = Served(config_path, "--no-trainer")
    accepted: list[tuple[str, str]] = []
    lock = threading.Lock()

    def on_answer(body, status, answer):
        if status == 202:
            with lock:
                accepted.append((body["impression_id"], body["doc_id"]))

    killer = threading.Timer(args.kill_after, lambda: os.kill(served.proc.pid, signal.SIGKILL))
    killer.start()
    try:
        result = run_load(served.url, "/click", click_bodies(pairs, args.clients),
                          clients=args.clients, seconds=args.kill_after + 5,
                          on_answer=on_answer)
    finally:
        killer.cancel()
        served.stop()
    stored = stored_clicks(config_path)
    missing = [pair for pair in accepted if pair not in stored]
    print(f"  SIGKILL after {args.kill_after:g} s: {len(accepted):,} clicks answered 202, "
          f"{len(stored):,} in the store, {result.statuses.get(0, 0)} requests unanswered; "
          f"answered 202 but missing from the store: {len(missing)}")
    if missing:
        sys.exit(f"LOST CLICKS: {missing[:5]}")


def _others(statuses: dict[int, int], ok: int = 202) -> str:
    others = {s: c for s, c in statuses.items() if s != ok}
    return ", ".join(f"{s}: {c}" for s, c in sorted(others.items())) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32, help="concurrent connections")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the timed run")
    parser.add_argument("--pages", type=int, default=4000,
                        help="pages logged per run (ten clicks each)")
    parser.add_argument("--kill-after", type=float, default=2.0,
                        help="seconds of clicks before the SIGKILL")
    parser.add_argument("--postgres-dsn", default=os.environ.get("RERANKER_BENCH_POSTGRES_DSN"),
                        help="an empty PostgreSQL database to use (default: a throwaway "
                             "cluster, when PostgreSQL is installed)")
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--batch", type=int, default=0,
                        help="clicks per POST /clicks (0: one per POST /click); the SIGKILL "
                             "part always sends single clicks")
    args = parser.parse_args()

    what = f"POST /clicks with {args.batch} clicks each" if args.batch else "POST /click"
    print(f"{what} into one `reranker serve` process, {args.clients} keep-alive "
          f"connections from one load-generating process, {os.cpu_count()} cores "
          f"(python {sys.version.split()[0]})")
    with tempfile.TemporaryDirectory(prefix="bench-clicks-") as tmp:
        root = Path(tmp)
        for store_type in args.stores.split(","):
            with store_sections(store_type, args, root) as sections:
                if sections is None:
                    print(f"{store_type}: skipped (no PostgreSQL server: pass --postgres-dsn)")
                    continue
                print(f"{store_type}:")
                for workers in (0, 1):
                    folder = root / f"{store_type}-rate-{workers}"
                    throughput(prepare_workdir(folder, sections[workers]), args, workers)
                sigkill(prepare_workdir(root / f"{store_type}-kill", sections[2]), args)


class store_sections:
    """Three fresh ``store`` sections of one type (one per part of the run)."""

    def __init__(self, store_type: str, args, root: Path):
        self.store_type, self.args, self.root = store_type, args, root
        self.cluster = self.databases = None

    def __enter__(self):
        if self.store_type == "sqlite":
            return [{"type": "sqlite", "path": "events.sqlite", "models": "models"}] * 3
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
        from postgres_server import Databases, ThrowawayCluster, server_binaries

        dsn = self.args.postgres_dsn
        if not dsn:
            binaries = server_binaries()
            if binaries is None:
                return None
            self.cluster = ThrowawayCluster(binaries, fsync=True)
            dsn = self.cluster.dsn
        self.databases = Databases(dsn)
        return [{"type": "postgresql", "dsn": self.databases.create(), "models": "models"}
                for _ in range(3)]

    def __exit__(self, *exc):
        if self.databases is not None:
            for name in list(self.databases.made):
                from psycopg.conninfo import make_conninfo

                self.databases.drop(make_conninfo(self.databases.dsn, dbname=name))
        if self.cluster is not None:
            self.cluster.stop()


if __name__ == "__main__":
    main()

"""Searches per second and latency from 1, 2 and 4 gunicorn worker processes
(`reranker serve --workers N`), beside one process with waitress (`--workers 0`) and the bare
engine (a plain top-10 search on the same embedded index, in process), in one run.

The corpus is the demo's (460 documents, 80 queries, drawn at random per request); the event
store is SQLite. The load generator is this process: ``--clients`` keep-alive connections
driven by one asyncio loop, sending the next search as soon as the last is answered. It
shares the machine with the server, so its own CPU use is printed beside every figure.

Run: python benchmarks/bench_workers.py [--clients 16] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from http_load import Served, demo_queries, prepare_workdir, run_load

from reranker.core.config import load_config
from reranker.core.plugins import backend_class, get_plugin_manager


def bare_engine(config_path: Path, queries: list[str], threads: int, seconds: float
                ) -> tuple[float, float, float]:
    """A plain top-10 search, with its ten stored documents loaded, in ``threads`` threads of
    this process: searches/s, p50 and p99 in ms."""
    backend = backend_class(get_plugin_manager(), "embedded")(load_config(config_path))
    backend.open()
    searcher = backend._current_searcher()
    latencies: list[float] = []
    lock = threading.Lock()

    def plain(query: str) -> None:
        hits = searcher.search(backend._field_query(backend.fields, backend._terms(query)),
                               10).hits
        for _, address in hits:
            searcher.doc(address)

    def run(index: int, deadline: float) -> None:
        rng = np.random.default_rng(index)
        mine = []
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            plain(queries[rng.integers(len(queries))])
            mine.append((time.perf_counter() - began) * 1000.0)
        with lock:
            latencies.extend(mine)

    for query in queries:  # warm up
        plain(query)
    began = time.perf_counter()
    workers = [threading.Thread(target=run, args=(i, began + seconds)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began
    backend.close()
    return len(latencies) / elapsed, *np.percentile(latencies, [50, 99])


def served(config_path: Path, queries: list[str], workers: int, args):
    server = Served(config_path, "--workers", str(workers))
    rng = np.random.default_rng(workers)

    def body(index: int, n: int) -> dict:
        return {"query": queries[rng.integers(len(queries))], "size": 10}

    try:
        run_load(server.url, "/search", body, clients=args.clients, seconds=2.0)  # warm up
        return run_load(server.url, "/search", body, clients=args.clients,
                        seconds=args.seconds)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16, help="concurrent connections")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    parser.add_argument("--workers", default="0,1,2,4", help="worker counts to run")
    args = parser.parse_args()
    queries = demo_queries()
    print(f"POST /search (size 10, 100 candidates reranked, impression logged), "
          f"{args.clients} keep-alive connections, {args.seconds:g} s per case, "
          f"{os.cpu_count()} cores (python {sys.version.split()[0]})")
    print(f"{'case':<42}{'searches/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'load gen CPU':>14}")
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        config_path = prepare_workdir(Path(tmp))
        for threads in (1, 2):
            rate, p50, p99 = bare_engine(config_path, queries, threads, args.seconds)
            print(f"{f'bare engine, plain top-10 search, {threads} thread(s)':<42}"
                  f"{rate:>12,.0f}{p50:>9.2f}{p99:>9.2f}{'-':>14}")
        for workers in map(int, args.workers.split(",")):
            result = served(config_path, queries, workers, args)
            label = ("reranker serve, one process (waitress)" if workers == 0
                     else f"reranker serve --workers {workers} (gunicorn)")
            if set(result.statuses) != {200}:
                sys.exit(f"{label}: answers {result.statuses}")
            print(f"{label:<42}{result.per_second:>12,.0f}{result.percentile(50):>9.2f}"
                  f"{result.percentile(99):>9.2f}{result.client_cores:>10.2f} cores")


if __name__ == "__main__":
    main()

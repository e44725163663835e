"""The slowest searches of a serving process, and two causes of them, each measured against
the way it was before in one run:

  (a) Python's cycle collector, with and without the start-up objects frozen
      (``reranker.api.app.freeze_startup_objects``, which ``reranker serve`` and every gunicorn
      worker call once their service is open): searches of repeated queries and of new ones
      (each a known query without a word or two), in alternating blocks, with the
      collector's pauses timed by ``gc.callbacks``;
  (b) the SQLite store's checkpoints of its write-ahead log, in a thread of the store's own
      (``reranker.stores.sqlite.Checkpoints``, the default) against SQLite's own, within
      the commit that takes the log past 1,000 pages: two services on one index, each with
      its own store, serving new queries in alternating blocks (the start-up objects
      frozen, as a serving process has them).

On the embedded index of Cranfield when it is beside the project (else the demo corpus),
after 1,000 searches with clicks. Printed per case: the searches' median, p99, p99.9 and
slowest, and for (a) the collector's pauses (how many, their total per search, the
longest).

Run: python benchmarks/bench_tail_latency.py [--searches N] [--rounds R] [--parts a,b]
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_search_overhead import CRANFIELD, cycle, embedded_service, load_collection, new_queries


class Pauses:
    """The collector's pauses, timed by ``gc.callbacks``."""

    def __init__(self):
        self.seconds: list[float] = []
        self._started = 0.0
        gc.callbacks.append(self._note)

    def _note(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds.append(time.perf_counter() - self._started)


def timed(service, source, n: int, out: list[int]) -> None:
    """``n`` searches of ``source()``, their nanoseconds added to ``out``, until the last
    impression is written (its writing in no other case's block)."""
    for _ in range(n):
        started = time.perf_counter_ns()
        service.search(source(), 10)
        out.append(time.perf_counter_ns() - started)
    service.events.flush()


def collector_part(folder: Path, documents, queries, searches: int, rounds: int) -> dict:
    service = embedded_service(folder, documents, queries, np.random.default_rng(0))
    try:
        unseen = iter(new_queries(queries, service.backend._terms, 2 * rounds * searches))
        sources = {"repeated": cycle(queries), "new": unseen.__next__}
        pauses = Pauses()
        results: dict[str, tuple[list, list]] = {}
        for _ in range(rounds):
            for frozen in (False, True):
                gc.collect()
                if frozen:
                    gc.freeze()
                for kind, source in sources.items():
                    times, paused = results.setdefault(
                        f"{kind} queries, {'frozen' if frozen else 'not frozen'}", ([], []))
                    pauses.seconds.clear()
                    timed(service, source, searches, times)
                    paused.extend(pauses.seconds)
                gc.unfreeze()
        return results
    finally:
        service.close()


def as_sqlite_leaves_it(service) -> None:
    """The service's SQLite store checkpointing as SQLite does by itself: within the commit
    that takes the log past 1,000 pages, and no thread of its own."""
    store = service.events
    store._checkpoints.stop()
    store.autocheckpoint_pages = 1000
    for conn in store._connections:
        conn.execute("PRAGMA wal_autocheckpoint=1000")


def checkpoint_part(folder: Path, documents, queries, searches: int, rounds: int) -> dict:
    own = embedded_service(folder / "own", documents, queries, np.random.default_rng(0))
    left = embedded_service(folder / "left", documents, queries, np.random.default_rng(0))
    try:
        as_sqlite_leaves_it(left)
        unseen = iter(new_queries(queries, own.backend._terms, 2 * rounds * searches))
        results: dict[str, tuple[list, list]] = {}
        gc.collect()
        gc.freeze()  # as a serving process is (a)
        for _ in range(rounds):
            for label, service in (("the store's thread", own), ("within a commit", left)):
                times, _ = results.setdefault(f"new queries, {label}", ([], []))
                timed(service, unseen.__next__, searches, times)
        return results
    finally:
        gc.unfreeze()
        own.close()
        left.close()


def report(title: str, results: dict, pauses: bool) -> None:
    print(f"\n{title}")
    head = f"  {'case':34s} {'median us':>10s} {'p99 us':>8s} {'p99.9 us':>9s} {'slowest ms':>11s}"
    print(head + (f" {'pauses':>7s} {'us/search':>10s} {'longest ms':>11s}" if pauses else ""))
    for label, (times, paused) in results.items():
        us = np.asarray(times) / 1000.0
        line = (f"  {label:34s} {np.median(us):10.0f} {np.percentile(us, 99):8.0f} "
                f"{np.percentile(us, 99.9):9.0f} {us.max() / 1000:11.1f}")
        if pauses:
            line += (f" {len(paused):7d} {sum(paused) / len(times) * 1e6:10.1f} "
                     f"{max(paused, default=0) * 1e3:11.2f}")
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=CRANFIELD,
                        help="folder with cran.all.1400 and cran.qry")
    parser.add_argument("--searches", type=int, default=1500, help="searches per block")
    parser.add_argument("--rounds", type=int, default=2, help="blocks per case")
    parser.add_argument("--parts", default="a,b", help="a (the collector), b (checkpoints)")
    args = parser.parse_args()
    parts = {part.strip() for part in args.parts.split(",")}
    if parts - {"a", "b"}:
        parser.error(f"--parts: unknown part {sorted(parts - {'a', 'b'})[0]!r} (a, b)")
    name, documents, queries = load_collection(args.data)
    print(f"{name}: {len(documents)} documents; {args.rounds} blocks of {args.searches} "
          f"searches per case")
    with tempfile.TemporaryDirectory() as tmp:
        if "a" in parts:
            (Path(tmp) / "a").mkdir()
            report("(a) the cycle collector, start-up objects frozen or not",
                   collector_part(Path(tmp) / "a", documents, queries, args.searches,
                                  args.rounds), pauses=True)
        if "b" in parts:
            (Path(tmp) / "b").mkdir()
            report("(b) SQLite's checkpoints of the write-ahead log",
                   checkpoint_part(Path(tmp) / "b", documents, queries, args.searches,
                                   args.rounds), pauses=False)


if __name__ == "__main__":
    main()

"""Python's cycle collector in a serving process, with and without the start-up objects
frozen (``reranker.app.freeze_startup_objects``, which ``reranker serve`` and every
gunicorn worker call once their service is open), in one run.

A service on the embedded index (Cranfield when it is beside the project, else the demo
corpus) serves searches of repeated queries and of new ones (each a known query without a
word or two), in alternating blocks, the start-up objects left in the collector's care or
frozen. Printed per case: the searches' median, p99 and p99.9, and the collector's pauses
(how many, their total per search, the longest), timed with ``gc.callbacks``.

Run: python benchmarks/bench_gc_pauses.py [--searches N] [--rounds R]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=CRANFIELD,
                        help="folder with cran.all.1400 and cran.qry")
    parser.add_argument("--searches", type=int, default=1500, help="searches per block")
    parser.add_argument("--rounds", type=int, default=2, help="blocks per case")
    args = parser.parse_args()
    name, documents, queries = load_collection(args.data)
    with tempfile.TemporaryDirectory() as tmp:
        service = embedded_service(Path(tmp), documents, queries, np.random.default_rng(0))
        try:
            unseen = iter(new_queries(queries, service.backend._terms,
                                      2 * args.rounds * args.searches))
            sources = {"repeated": cycle(queries), "new": unseen.__next__}
            pauses = Pauses()
            results: dict[tuple[str, bool], tuple[list, list]] = {}
            for _ in range(args.rounds):
                for frozen in (False, True):
                    gc.collect()
                    if frozen:
                        gc.freeze()
                    for kind, source in sources.items():
                        times, paused = results.setdefault((kind, frozen), ([], []))
                        pauses.seconds.clear()
                        for _ in range(args.searches):
                            started = time.perf_counter_ns()
                            service.search(source(), 10)
                            times.append(time.perf_counter_ns() - started)
                        service.events.flush()
                        paused.extend(pauses.seconds)
                    gc.unfreeze()
        finally:
            service.close()
    print(f"{name}: {len(documents)} documents; {args.rounds} blocks of {args.searches} "
          f"searches per case")
    print(f"  {'case':30s} {'median us':>10s} {'p99 us':>9s} {'p99.9 us':>9s} "
          f"{'pauses':>7s} {'us/search':>10s} {'longest ms':>11s}")
    for (kind, frozen), (times, paused) in results.items():
        us = np.asarray(times) / 1000.0
        label = f"{kind}, {'frozen' if frozen else 'not frozen'}"
        print(f"  {label:30s} {np.median(us):10.0f} {np.percentile(us, 99):9.0f} "
              f"{np.percentile(us, 99.9):9.0f} {len(paused):7d} "
              f"{sum(paused) / len(times) * 1e6:10.1f} {max(paused, default=0) * 1e3:11.2f}")


if __name__ == "__main__":
    main()

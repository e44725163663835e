"""The click counts under traffic of queries searched once: with retention they stay flat,
without forgetting the queries searched no more they grow with every search.

Two SQLite event stores take the same traffic, in real time, through the store's own API
(``log_impression`` of 100 candidates with 10 shown, a click on a fifth of the pages), every
page of a query never searched before; the trainer's part is done by hand: every
``--interval`` seconds the open pages are closed and ``retain`` removes what is older than
``--age`` seconds. The first store runs retention as it is (the impressions go, and the
click counts of the queries searched no more); the baseline runs the same retention with the
forgetting of click counts left out, as before it existed. Printed every few seconds: the
rows of ``click_stats`` and the file's size of each, and at the end their ratio.

Run: python benchmarks/bench_bounded_counts.py [--seconds 60] [--age 10] [--interval 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from reranker.stores import Reader
from reranker.stores.conformance import impression
from reranker.stores.sqlite import SQLiteStore


def rows(store: SQLiteStore) -> int:
    with store._reading() as conn:
        return store._run(conn, "SELECT COUNT(*) FROM click_stats").fetchone()[0]


def size(store: SQLiteStore) -> int:
    return sum(p.stat().st_size for p in store.path.parent.glob(store.path.name + "*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="of traffic")
    parser.add_argument("--age", type=float, default=10.0, help="store.retention, seconds")
    parser.add_argument("--interval", type=float, default=2.0,
                        help="store.retention_interval, seconds")
    parser.add_argument("--report", type=float, default=5.0, help="seconds between lines")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bounded-counts-"))
    stores = {"retention": SQLiteStore(folder / "retention.sqlite"),
              "baseline": SQLiteStore(folder / "baseline.sqlite")}
    stores["baseline"]._forget_queries = lambda before: 0  # retention as it was before
    rng = np.random.default_rng(0)
    features = rng.random((100, 8))
    start = last_retained = last_report = time.time()
    pages = 0
    print(f"{'seconds':>8} {'pages':>8} " + " ".join(
        f"{name + ' rows':>15} {name + ' MB':>13}" for name in stores))
    while True:
        now = time.time()
        for name, store in stores.items():
            imp = impression(f"{name}-{pages}", now, n=100, shown=10, arm="a",
                             query=f"query number {pages}")
            imp.features = features
            store.log_impression(imp)
            if pages % 5 == 0:
                store.record_click(imp.id, imp.shown_ids()[pages % 10])
        pages += 1
        if now - last_retained >= args.interval:
            for store in stores.values():
                store.close_impressions(now)
                store.retain(now - args.age, [Reader(("a",), store.last_closed_seq())])
            last_retained = now
        if now - last_report >= args.report or now - start >= args.seconds:
            for store in stores.values():
                store.flush()
            print(f"{now - start:8.0f} {pages:8,} " + " ".join(
                f"{rows(store):15,} {size(store) / 1e6:13.1f}" for store in stores.values()))
            last_report = now
            if now - start >= args.seconds:
                break
    kept, grown = rows(stores["retention"]), rows(stores["baseline"])
    print(f"after {pages:,} pages of as many queries, retention of {args.age:g} s keeps "
          f"{kept:,} click-count rows against {grown:,} without forgetting the queries "
          f"searched no more: ratio {kept / grown:.3f} (the rows of about "
          f"{args.age + args.interval:g} s of queries, and one per shown document over all "
          f"queries)")
    for store in stores.values():
        store.close()


if __name__ == "__main__":
    main()

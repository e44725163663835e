"""Bytes per impression of 100 candidates: schema 3's encoding (every candidate's features as
float64, its ids and the feature names as JSON, the ranking as int32, in every row) against
the compact one (:mod:`reranker.stores.encoding`), for the same impressions in one run.

After ``--warmup`` searches with clicks (so that the click features are those of a store
in use), searches with clicks are served in process (``RerankerService.search``: the embedded index
over six copies of the demo corpus, so that each query has 100 candidates, with the demo's
features: engine score, two field scores, the popularity field and the two click features;
Preference Perceptron, which logs each candidate's chance of being shown). The impressions
it logged are then written into a store of schema 3 and into one of schema 4 (the
real code of each), closed, and the bytes of each store's impressions rows, and of the
pages of the table and its indexes, are counted (SQLite's ``dbstat``, after ``VACUUM``).
Also printed: the compact row's candidates by part, and
the same with ids of 20 random characters (Elasticsearch's generated ids) instead of the
corpus's, and what packing and unpacking an impression costs.

Run: python benchmarks/bench_impression_bytes.py [--searches 1000] [--warmup 3000]
"""

from __future__ import annotations

import argparse
import secrets
import sqlite3
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from reranker.commands.demo import demo_config
from reranker.core.config import config_from_dict
from reranker.core.plugins import backend_class, get_plugin_manager
from reranker.offline.democorpus import generate_corpus
from reranker.serving.service import RerankerService
from reranker.stores import encoding
from reranker.stores.events import Impression
from reranker.stores.sqlite import SQLiteStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from legacy_stores import sqlite_store  # noqa: E402 -- the tests' schema-3 store

COPIES = 6  # of the demo corpus: about 100 candidates per query


def hundred_candidates(config) -> list[str]:
    """Index :data:`COPIES` copies of the demo corpus with the embedded backend of
    ``config``; the queries (about 100 candidates each)."""
    documents, queries = [], []
    for copy in range(COPIES):
        corpus = generate_corpus(7 + copy)
        documents += [{**doc, "id": f"{copy}{doc['id']}"} for doc in corpus.documents]
        queries += [query for query, _ in corpus.queries]
    backend_class(get_plugin_manager(), "embedded")(config).index_documents(
        ((doc["id"], doc) for doc in documents), recreate=True)
    return queries


def serve(folder: Path, searches: int, warmup: int) -> list[Impression]:
    """The impressions of ``searches`` pages served with a click on every other one, after
    ``warmup`` such pages (so that the click features are those of a store in use)."""
    config = config_from_dict(demo_config("preference_perceptron"), folder)
    queries = hundred_candidates(config)
    service = RerankerService(config).open()
    served: list[Impression] = []
    log = service.events.log_impression

    def log_and_keep(imp: Impression) -> None:
        served.append(imp)
        log(imp)

    rng = np.random.default_rng(0)
    try:
        for i in range(warmup + searches):
            if i == warmup:
                service.events.log_impression = log_and_keep
                start = time.perf_counter()
            page = service.search(queries[i % len(queries)], 10)
            if i % 2:
                hit = page["hits"][int(rng.integers(len(page["hits"])))]
                service.click(page["impression_id"], hit["id"])
        print(f"a search with its click, in process: "
              f"{(time.perf_counter() - start) / searches * 1e6:,.0f} µs")
        for imp in served:
            imp.clicked = service.events.get_impression(imp.id).clicked
    finally:
        service.close()
    return served


def table_bytes(path: Path) -> tuple[int, int]:
    """Bytes of the impressions table's rows, and of the pages of the table and its indexes
    (after ``VACUUM``)."""
    with sqlite3.connect(path) as conn:
        conn.execute("VACUUM")
        return conn.execute(
            "SELECT SUM(CASE WHEN name = 'impressions' THEN payload END), SUM(pgsize) FROM "
            "dbstat WHERE name = 'impressions' OR name IN (SELECT name FROM sqlite_schema "
            "WHERE type = 'index' AND tbl_name = 'impressions')").fetchone()


def measure(folder: Path, impressions: list[Impression]) -> np.ndarray:
    """Bytes per impression in a store of schema 3 and in one of schema 4: rows, and pages
    with the indexes (shape ``(2, 2)``: schema, measure)."""
    old, new = folder / "schema3.sqlite", folder / "schema4.sqlite"
    for path in (old, new):
        path.unlink(missing_ok=True)
    sqlite_store(old, impressions)
    store = SQLiteStore(new)
    try:
        for imp in impressions:
            store.log_impression(imp)
        store.close_impressions(float("inf"))  # as most of a store's are
    finally:
        store.close()
    with sqlite3.connect(old) as conn:
        conn.execute("UPDATE impressions SET closed_seq = seq")
    return np.array([table_bytes(old), table_bytes(new)]) / len(impressions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--searches", type=int, default=1000, help="impressions measured")
    parser.add_argument("--warmup", type=int, default=3000, help="searches before them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        served = serve(folder, args.searches, args.warmup)
        n = np.mean([len(imp.doc_ids) for imp in served])
        m = served[0].features.shape[1]
        print(f"{len(served)} impressions, {n:.0f} candidates and {m} features each, "
              f"{sum(len(imp.clicked) for imp in served)} clicks")
        rows = [("corpus ids", served)]
        rows.append(("20-character random ids", [
            replace(imp, doc_ids=[secrets.token_urlsafe(15) for _ in imp.doc_ids], clicked=None)
            for imp in served]))
        print(f"{'bytes per impression':<34}{'schema 3':>10}{'compact':>10}{'ratio':>8}")
        for label, impressions in rows:
            (old_row, old_pages), (new_row, new_pages) = measure(folder, impressions)
            print(f"{label + ', row':<34}{old_row:>10,.0f}{new_row:>10,.0f}"
                  f"{new_row / old_row:>8.3f}")
            print(f"{label + ', pages with indexes':<34}{old_pages:>10,.0f}{new_pages:>10,.0f}"
                  f"{new_pages / old_pages:>8.3f}")
        features = np.mean([len(encoding.pack_features(imp.features)) for imp in served])
        candidates = np.mean([len(encoding.pack_candidates(imp.doc_ids, imp.ranking,
                                                           imp.propensities))
                              for imp in served])
        print(f"of the compact row: features {features:,.0f} bytes (float64: "
              f"{n * m * 8:,.0f}), ids + ranking + propensities {candidates:,.0f}")
        imp = served[-1]
        packed = encoding.pack_features(imp.features), encoding.pack_candidates(
            imp.doc_ids, imp.ranking, imp.propensities)
        for what, call in (
                ("pack", lambda: (encoding.pack_features(imp.features), encoding.pack_candidates(
                    imp.doc_ids, imp.ranking, imp.propensities))),
                ("unpack", lambda: (encoding.unpack_features(packed[0]),
                                    encoding.unpack_candidates(packed[1])))):
            start = time.perf_counter()
            for _ in range(2000):
                call()
            print(f"{what} one impression: {(time.perf_counter() - start) / 2000 * 1e6:.0f} µs")


if __name__ == "__main__":
    main()

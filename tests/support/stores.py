"""Event store helpers: features shaped as a search makes them, and the rows of a query on a
store's own database (impressions made by hand are reranker.stores.conformance.impression)."""

from __future__ import annotations

import numpy as np


def served_like(n: int, rng: np.random.Generator, *, rank_column: bool = False) -> np.ndarray:
    """Features as a search with click features makes them: engine scores in float32 (as
    Lucene and Tantivy score) and of a few distinct values (documents alike in term counts
    and length score alike), a field with one decimal, and two click lifts in float32, most
    of them the prior's (the documents without clicks). ``rank_column``: with 1/rank second,
    as impressions logged before the features dropped it have it."""
    def scores(zeros: float) -> np.ndarray:
        levels = rng.gamma(2.0, 3.0, 12).astype(np.float32)
        return rng.choice(levels, n) * (rng.random(n) >= zeros)

    X = np.empty((n, 6), order="F")
    X[:, 0] = np.sort(scores(0.0))[::-1]
    X[:, 1] = scores(0.6)
    X[:, 2] = scores(0.1)
    X[:, 3] = np.round(rng.uniform(0, 100, n), 1)
    X[:, 4] = np.where(rng.random(n) < 0.9, 0.4836, rng.uniform(0.2, 3.0, n))
    X[:, 5] = np.where(rng.random(n) < 0.8, 0.5217, rng.uniform(0.2, 3.0, n))
    # as reranker.features.clicks.lifts_from_counts rounds them
    X[:, 4:] = X[:, 4:].astype(np.float32)
    if rank_column:
        X = np.asfortranarray(np.insert(X, 1, 1.0 / np.arange(1, n + 1), axis=1))
    return X


def store_rows(store, sql: str, args=()) -> list[tuple]:
    """Rows of a query run on the store's own database (``?`` placeholders)."""
    with store._reading() as conn:
        return [tuple(row) for row in store._run(conn, sql, args).fetchall()]

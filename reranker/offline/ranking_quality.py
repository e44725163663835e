"""Ranking quality of a ranking against graded relevance labels (DCG, NDCG): what the
offline simulation and the demo measure; not the service's Prometheus metrics
(:mod:`reranker.serving.monitoring`) nor an experiment's click measures
(:mod:`reranker.experiments.outcomes`)."""

from __future__ import annotations

import numpy as np


def dcg(labels: np.ndarray, k: int, gain: str = "exp") -> float:
    """DCG@k of graded ``labels`` in ranked order: gain ``2^r - 1`` (``"exp"``, the online
    learning-to-rank convention) or ``r`` (``"linear"``), discount ``1 / log2(rank + 1)``."""
    top = np.asarray(labels[:k], dtype=np.float64)
    gains = np.exp2(top) - 1.0 if gain == "exp" else top
    return float(gains @ (1.0 / np.log2(np.arange(2, top.size + 2))))


def ndcg(ranked_labels: np.ndarray, all_labels: np.ndarray, k: int = 10,
         gain: str = "exp") -> float:
    """NDCG@k: DCG of the ranking over the DCG of the ideal ordering of ``all_labels`` (the
    query's own labels); 0 when the query has no relevant document."""
    ideal = dcg(np.sort(np.asarray(all_labels))[::-1], k, gain)
    return dcg(ranked_labels, k, gain) / ideal if ideal > 0 else 0.0

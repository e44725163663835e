"""Random ranking policies: Plackett-Luce sampling and its probabilities (docs/algorithms.md,
"Plackett-Luce learners"; Delage's K-logistic policies)."""

from __future__ import annotations

import math

import numpy as np


def gumbel_top_k(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A Plackett-Luce ranking of all candidates: each next item drawn with probability
    ``exp(s_i) / sum over the remaining exp(s_j)``. Sorting ``s_i + G_i`` with Gumbel(0, 1)
    noise ``G_i`` draws exactly that distribution (the Gumbel-top-k trick)."""
    return (-(scores + rng.gumbel(size=scores.shape))).argsort(kind="stable")


def plackett_luce_log_prob(scores: np.ndarray, ranking: np.ndarray, k: int) -> float:
    """``sum_{j<k} (s_{y_j} - logsumexp(s over items not yet placed))`` for a full ranking
    ``y`` of all candidates: the log-probability of its first ``k`` items. The items not yet
    placed before position ``j`` are ``y[j:]``, so the normalisers are suffix sums."""
    if k == 0 or len(ranking) == 0:
        return 0.0
    ordered = scores[ranking]
    # log of the suffix sums, accumulated in log space: exact even when scores differ by
    # hundreds (exp would underflow the smaller terms to zero)
    log_suffix = np.logaddexp.accumulate(ordered[::-1])[::-1][:k]
    return float(ordered[:k].sum() - log_suffix.sum())


def plackett_luce_prefix_log_prob(scores: np.ndarray, top_items: np.ndarray) -> float:
    """Log-probability of a given ordered prefix ``top_items`` (any length) under
    Plackett-Luce with ``scores``; exact, for checks and evaluation."""
    remaining = np.ones(len(scores), dtype=bool)
    total = 0.0
    for item in top_items:
        s = scores[remaining]
        m = s.max()
        total += scores[item] - (m + math.log(float(np.exp(s - m).sum())))
        remaining[item] = False
    return float(total)


def uniform_log_prob(n: int, k: int) -> float:
    """Log-probability of any ordered top-``k`` of a uniform random permutation of ``n``."""
    return -float(np.sum(np.log(np.arange(n - k + 1, n + 1)))) if n else 0.0


def log_softmax(scores: np.ndarray) -> np.ndarray:
    """``log P(first = i)`` of a Plackett-Luce ranking: ``s_i - logsumexp(s)``."""
    if len(scores) == 0:
        return np.empty(0)
    top = scores.max()
    return scores - (top + math.log(float(np.exp(scores - top).sum())))

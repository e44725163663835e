"""The DCG-style joint feature map of a query and a ranking.

docs/algorithms.md, "The joint feature map" (Coactive Learning, section 4; Online Learning
with Preference Feedback, section 5): ``phi(q, y) = sum_{i=1..k} g_i * x_{y_i}`` with
position discounts ``g_i = 1 / log2(i + 1)`` for ``i <= k`` and 0 past the cut-off ``k``. The
utility of a ranking is ``U = w . phi(q, y)``; because the discounts decrease,
``argmax_y w . phi(q, y)`` is the candidates sorted by ``w . x_i``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

DISCOUNTS = ("log2", "reciprocal", "none")


@lru_cache(maxsize=64)
def _discounts(depth: int, discount: str) -> np.ndarray:
    positions = np.arange(1, depth + 1, dtype=np.float64)
    if discount == "log2":
        g = 1.0 / np.log2(positions + 1.0)
    elif discount == "reciprocal":
        g = 1.0 / positions
    elif discount == "none":
        g = np.ones(depth)
    else:
        raise ValueError(f"unknown discount {discount!r}; expected one of {', '.join(DISCOUNTS)}")
    g.setflags(write=False)
    return g


@dataclass(frozen=True)
class FeatureMap:
    """``phi(q, y)`` with a cut-off ``depth`` and a position ``discount``."""

    depth: int = 10
    discount: str = "log2"

    def __post_init__(self) -> None:
        if not isinstance(self.depth, (int, np.integer)) or self.depth < 1:
            raise ValueError(f"feature map depth must be a positive integer, got {self.depth!r}")
        # validates the discount name; kept for the hot path of phi_difference
        g = _discounts(int(self.depth), self.discount)
        object.__setattr__(self, "_g", g)
        # positive discounts that differ at every position (log2, reciprocal)
        object.__setattr__(self, "_distinct", bool(len(np.unique(g)) == len(g) and g.min() > 0))

    def discounts(self, n: int) -> np.ndarray:
        """Discounts of the first ``min(n, depth)`` positions, shape ``(min(n, depth),)``."""
        return _discounts(int(self.depth), self.discount)[: min(n, self.depth)]

    def phi(self, X: np.ndarray, ranking: np.ndarray) -> np.ndarray:
        """Joint feature vector of a ranking.

        ``X`` has shape ``(n, m)``; ``ranking`` holds candidate indices, best first (at least
        the first ``depth`` of them). Returns shape ``(m,)``.
        """
        g = self.discounts(len(ranking))
        return g @ X[ranking[: len(g)]]

    def phi_difference(self, X: np.ndarray, better: np.ndarray, worse: np.ndarray) -> np.ndarray:
        """``phi(X, better) - phi(X, worse)``: the coactive update direction ``D_t``."""
        return self._difference_weights(X.shape[0], better, worse) @ X

    def same_phi(self, a: np.ndarray, b: np.ndarray) -> bool:
        """True when ``phi(X, a) == phi(X, b)`` whatever the features ``X``: every candidate
        gets the same discount in both rankings (such as rankings that differ only below
        ``depth``, or only in order with ``discount: none``). Learning from such a pair
        would change nothing. ``a`` and ``b`` are orderings of the same candidates."""
        if self._distinct:  # then each of the top k must be at the same position in both
            k = min(self.depth, len(a), len(b))
            return a[:k].tolist() == b[:k].tolist()  # a few items: lists beat numpy here
        return not self._difference_weights(max(len(a), len(b)), a, b).any()

    def _difference_weights(self, n: int, better: np.ndarray, worse: np.ndarray) -> np.ndarray:
        # phi(better) - phi(worse) as weights over the n candidates: +g_i for the i-th of
        # `better`, -g_i for the i-th of `worse`.
        k = min(self.depth, len(better), len(worse))
        weights = np.zeros(n)
        g = self._g[:k]
        weights[better[:k]] += g
        weights[worse[:k]] -= g
        return weights

    def utility(self, w: np.ndarray, X: np.ndarray, ranking: np.ndarray) -> float:
        """``U = w . phi(q, y)``."""
        return float(self.phi(X, ranking) @ w)

    def to_dict(self) -> dict:
        return {"depth": int(self.depth), "discount": self.discount}

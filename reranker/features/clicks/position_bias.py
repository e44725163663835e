"""Position bias from randomised adjacent pairs.

Under the position-based click model a result at position ``k`` is clicked with probability
``theta_k * r(d)``: examined, then found attractive. When a learner shows the two results of
an adjacent pair ``(k, k + 1)`` in either order at random (swapped with probability ``p``),
the same two documents occupy position ``k`` in both orders, so with inverse-propensity
weights (``1 / p`` for a swapped pair, ``1 / (1 - p)`` for a kept one)

    E[weighted clicks at k]     = theta_k     * (r(u) + r(l))
    E[weighted clicks at k + 1] = theta_(k+1) * (r(u) + r(l))

and their ratio estimates ``theta_(k+1) / theta_k`` whatever the documents' relevance. This
is the swap intervention of Joachims, Swaminathan & Schnabel (WSDM 2017, their propensity
estimation by swapping results), harvested
from the adjacent swaps the perceptrons make anyway (Agarwal et al., WSDM 2019, estimate
propensities from such interventions; Wang et al., WSDM 2018, from regression EM); chaining
the ratios from ``theta_1 = 1`` gives every position's weight. Until a pair has clicks, its
ratio is shrunk toward the ratio of the DCG discounts ``1 / log2(k + 1)``, with the weight of
``prior_clicks`` pseudo-clicks. See docs/algorithms.md, "Position bias".
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

#: Keys of the impression context in which a pair-perturbing learner logs its randomisation
#: (:class:`reranker.learners.coactive.CoactiveLearner`): the pairing (0: pairs (1, 2), (3, 4), ...;
#: 1: (2, 3), (4, 5), ...), the 0-based upper positions of the swapped pairs, and the swap
#: probability.
PAIR_OFFSET, SWAPPED, SWAP_PROBABILITY_KEY = "pair_offset", "swapped", "swap_probability"
#: The positions a page's randomised pairs stay within, when fewer than the page's (a mixed
#: page of an experiment: :data:`reranker.experiments.interleaving.MIXED_PAIR_DEPTH`).
PAIR_DEPTH = "pair_depth"


def randomized_pairs(context: dict | None, n_shown: int
                     ) -> tuple[list[tuple[int, bool]], float]:
    """The randomised adjacent pairs of an impression as ``(upper position, swapped)``
    (0-based) and their swap probability, from the context its learner logged; no pairs when
    it randomised none."""
    if not context or PAIR_OFFSET not in context:
        return [], 0.0
    p = float(context.get(SWAP_PROBABILITY_KEY, 0.0))
    if not 0.0 < p < 1.0:
        return [], 0.0
    offset = int(context[PAIR_OFFSET])
    swapped = set(context.get(SWAPPED, ()))
    within = min(n_shown, int(context.get(PAIR_DEPTH, n_shown)))
    return [(upper, upper in swapped) for upper in range(offset, within - 1, 2)], p


def one_click_pairs(context: dict | None, n_shown: int, ranking: np.ndarray,
                    clicked_positions: Iterable[int]
                    ) -> tuple[list[tuple[int, int, bool]], float]:
    """The randomised adjacent pairs of an impression with exactly one click, each as a
    preference ``(clicked candidate, the other candidate, swapped)`` (candidate indices into
    the features), and the swap probability they were drawn with (docs/algorithms.md,
    "Perturbed pairs"): within such a pair, which of the two was clicked is unbiased by
    position once weighted by the chance of the order shown."""
    pairs, p = randomized_pairs(context, n_shown)
    clicked = set(clicked_positions)
    out = []
    for upper, swapped in pairs:
        top, bottom = upper in clicked, upper + 1 in clicked
        if top == bottom or upper + 1 >= len(ranking):
            continue
        a, b = int(ranking[upper]), int(ranking[upper + 1])
        out.append((a, b, swapped) if top else (b, a, swapped))
    return out, p


class PositionBias:
    """Running estimate of the examination probability of each position (position 1 is
    examined with probability 1), from inverse-propensity-weighted click counts at the
    upper and lower position of randomised adjacent pairs."""

    def __init__(self, upper: np.ndarray | None = None, lower: np.ndarray | None = None,
                 prior_clicks: float = 10.0):
        self.upper = np.zeros(0) if upper is None else np.asarray(upper, dtype=np.float64)
        self.lower = np.zeros(0) if lower is None else np.asarray(lower, dtype=np.float64)
        self.prior_clicks = float(prior_clicks)
        self._weights: dict[int, np.ndarray] = {}  # per page length, until the next add

    @staticmethod
    def pair_counts(pairs: Iterable[tuple[int, bool]], swap_probability: float,
                    clicked_positions: Iterable[int]) -> list[tuple[int, float, float]]:
        """``(upper position, weighted clicks at it, weighted clicks below it)`` of each
        randomised pair of one impression (0-based positions), its weight ``1 / p`` if it was
        swapped and ``1 / (1 - p)`` if not; pairs without a click contribute nothing."""
        clicked = set(clicked_positions)
        out = []
        p = swap_probability
        for upper, swapped in pairs:
            top, bottom = upper in clicked, upper + 1 in clicked
            if top or bottom:
                weight = 1.0 / p if swapped else 1.0 / (1.0 - p)
                out.append((upper, weight * top, weight * bottom))
        return out

    def add(self, counts: Iterable[tuple[int, float, float]]) -> None:
        """Add the :meth:`pair_counts` of one impression."""
        self._weights = {}
        for upper, top, bottom in counts:
            if upper >= len(self.upper):
                grow = upper + 1 - len(self.upper)
                self.upper = np.concatenate([self.upper, np.zeros(grow)])
                self.lower = np.concatenate([self.lower, np.zeros(grow)])
            self.upper[upper] += top
            self.lower[upper] += bottom

    def weights(self, n: int) -> np.ndarray:
        """``theta_1 .. theta_n``, shape ``(n,)``, with ``theta_1 = 1``; each ratio is kept
        in (0, 1]: a lower position is never examined more than the one above it. Read-only
        (kept until the next :meth:`add`)."""
        if n in self._weights:
            return self._weights[n]
        theta = np.ones(n)
        lam = self.prior_clicks
        for k in range(n - 1):
            prior_ratio = math.log2(k + 2) / math.log2(k + 3)
            top = self.upper[k] if k < len(self.upper) else 0.0
            bottom = self.lower[k] if k < len(self.lower) else 0.0
            ratio = (bottom + lam * prior_ratio) / (top + lam)
            theta[k + 1] = theta[k] * min(max(ratio, 1e-3), 1.0)
        theta.setflags(write=False)
        self._weights[n] = theta
        return theta

"""What the coactive learners (Preference Perceptron family) share: how they present a
ranking and which improved ranking ``ybar`` they learn from.

With ``swap_probability`` 0 a coactive learner is exactly the paper's algorithm: it
presents ``argmax_y w . phi(q, y)`` and learns from the coactive ``ybar`` (clicked results
prepended, ALGORITHMS.md section 1). Clicks are position-biased, though: a user who scans
top-down and clicks irrelevant results too (the ``informational`` click model) keeps
demoting whatever the model ranks first, so that feedback is not alpha-informative at a good
ranking and the perceptron's weights wander back toward random quality.

With ``swap_probability`` p > 0 the learner follows Raman, Joachims, Shivaswamy & Schnabel,
*Stable Coactive Learning via Perturbation* (ICML 2013, the perturbed Preference Perceptron
for ranking; Coactive Learning cites it in section 2): it swaps each pair of shown positions
(1, 2), (3, 4), ... of the argmax with probability p, and learns from
:func:`reranker.feedback.pair_swapped_ranking`, which only compares the two results of a
pair. The update rule of each learner is unchanged; only ``y`` (what was shown) and ``ybar``
differ. The presentation is then random: the learner logs the probability of what it shows.
"""

from __future__ import annotations

import math

import numpy as np

from .feedback import Feedback, pair_swapped_ranking
from .learner import LinearLearner, Param, RankResult, argmax_ranking

SWAP_PROBABILITY = Param(
    "swap_probability", float, 0.5,
    "chance of swapping each shown pair of positions (1, 2), (3, 4), ... and learning only "
    "within pairs (Raman et al. 2013), which keeps learning from position-biased clicks "
    "stable; 0 presents the argmax and learns from prepended clicks (the paper's algorithm)",
    minimum=0.0, maximum=0.5)


class CoactiveLearner(LinearLearner):
    """A linear learner of the Preference Perceptron family. Subclasses implement
    ``_update`` with :meth:`improved` as their ``ybar`` and ``feedback.ranking`` as ``y``."""

    params: tuple[Param, ...] = (SWAP_PROBABILITY,)

    @property  # type: ignore[override]
    def stochastic(self) -> bool:
        return self.swap_probability > 0

    @property  # type: ignore[override]
    def policy(self) -> str:
        return "perturbed_pairs" if self.swap_probability > 0 else "argmax"

    def _rank(self, X: np.ndarray, n_shown: int,
              rng: np.random.Generator | None) -> RankResult:
        scores = X @ self.weights()
        ranking = argmax_ranking(scores)
        p = self.swap_probability
        if p == 0:
            return RankResult(ranking=ranking, scores=scores)
        # Raman et al. 2013, perturbation: swap the pairs of shown positions (1, 2), (3, 4),
        # ... each with probability p, independently. (A page holds a handful of pairs:
        # plain Python on lists beats numpy's per-call overhead here.)
        n_pairs = n_shown // 2
        swapped = upper = 0
        for coin in rng.random(n_pairs).tolist():
            if coin < p:
                ranking[upper], ranking[upper + 1] = ranking[upper + 1], ranking[upper]
                swapped += 1
            upper += 2
        log_prob = swapped * math.log(p) + (n_pairs - swapped) * math.log1p(-p)
        return RankResult(ranking=ranking, scores=scores, log_prob=log_prob)

    def log_probability(self, X: np.ndarray, top: np.ndarray) -> float:
        """Log-probability of showing ``top`` as the whole shown list (``n_shown`` =
        ``len(top)``): each pair of positions is the argmax's pair, in order (1 - p) or
        swapped (p)."""
        if not self.stochastic:
            return super().log_probability(X, top)
        X = self.check_features(X)
        top = np.asarray(top, dtype=np.intp)
        k = len(top)
        best = argmax_ranking(X @ self.weights())[:k]
        if k % 2 and top[-1] != best[-1]:
            return -math.inf
        upper, lower = top[0:k - 1:2], top[1:k:2]
        kept = (upper == best[0:k - 1:2]) & (lower == best[1:k:2])
        swapped = (upper == best[1:k:2]) & (lower == best[0:k - 1:2])
        if not np.all(kept | swapped):
            return -math.inf
        n_swapped = int(swapped.sum())
        p = self.swap_probability
        return n_swapped * math.log(p) + (len(kept) - n_swapped) * math.log1p(-p)

    def improved(self, feedback: Feedback) -> np.ndarray | None:
        """``ybar`` of this feedback, or None when it carries no information: the coactive
        improved ranking when the learner presents the argmax, the pair-swapped ranking
        when it perturbs. A ``ybar`` the feature map cannot tell from the shown ranking
        (say, a swapped pair below ``depth``) carries no information either."""
        if self.swap_probability > 0:
            improved = pair_swapped_ranking(feedback)
        else:
            improved = feedback.improved if feedback.informative else None
        if improved is None or self.feature_map.same_phi(improved, feedback.ranking):
            return None
        return improved

"""What the coactive learners (Preference Perceptron family) share: how they present a
ranking and which improved ranking ``ybar`` they learn from.

With ``swap_probability`` 0 a coactive learner is exactly the paper's algorithm: it
presents ``argmax_y w . phi(q, y)`` and learns from the coactive ``ybar`` (clicked results
prepended; docs/algorithms.md, "From clicks to feedback"). Clicks are position-biased,
though: a user who scans top-down and clicks irrelevant results too (the ``informational``
click model) keeps demoting whatever the model ranks first, so that feedback is not
alpha-informative at a good ranking and the perceptron's weights wander back toward random
quality.

With ``swap_probability`` p > 0 the learner follows Raman, Joachims, Shivaswamy & Schnabel,
*Stable Coactive Learning via Perturbation* (ICML 2013, the perturbed Preference Perceptron
for ranking; Coactive Learning cites it in section 2): it cuts the argmax into pairs of
adjacent positions and swaps each pair with probability p, then learns from
:func:`reranker.learners.feedback.pair_swapped_ranking`, which only compares the two results of a
pair. The pairing itself is drawn at random for every impression, (1, 2), (3, 4), ... or
(2, 3), (4, 5), ... with equal chance, as in FairPairs (Radlinski & Joachims, AAAI 2006) and
BubbleRank (Li et al., UAI 2019): every adjacent pair of the argmax, the first and second
included, can then be compared, so a result clicked at any rank can rise. The update rule of
each learner is unchanged; only ``y`` (what was shown) and ``ybar`` differ. The learner logs
the probability of what it shows and, as the impression's context, the pairing and the
swapped pairs (:func:`reranker.features.clicks.position_bias.randomized_pairs` reads them back: the
position-bias estimate uses them as interventions).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from reranker.features.clicks.position_bias import PAIR_OFFSET, SWAP_PROBABILITY_KEY, SWAPPED
from reranker.features.extraction import kernels
from reranker.learners.base import LinearLearner, Param, RankResult, argmax_ranking
from reranker.learners.capabilities import Capabilities
from reranker.learners.feedback import Feedback, pair_swapped_ranking

SWAP_PROBABILITY = Param(
    "swap_probability", float, 0.5,
    "chance of swapping each shown pair of adjacent positions (the pairing (1, 2), (3, 4), "
    "... or (2, 3), (4, 5), ... drawn at random per search) and learning only within pairs, "
    "each pair's feedback weighted by the inverse of the chance of the order shown "
    "(Raman et al. 2013; inverse propensity weights), which keeps learning from "
    "position-biased clicks stable (0.5, the paper's: every weight 1); smaller costs the "
    "pages less, for noisier feedback; 0 "
    "presents the argmax and learns from prepended clicks (the paper's algorithm)",
    minimum=0.0, maximum=0.5)

_LOG_HALF = math.log(0.5)


def _pair_uppers(n_shown: int, n: int) -> tuple[range, range]:
    """The 0-based upper positions of the pairs of each pairing, for a page of ``n_shown`` of
    ``n`` candidates: every pair whose upper position is shown (its lower one may be the
    first left out)."""
    return range(0, min(n_shown, n - 1), 2), range(1, min(n_shown, n - 1), 2)


def perturbed_page(scores: np.ndarray, n_shown: int, p: float,
                   rng: np.random.Generator) -> RankResult:
    """The argmax of ``scores`` (stable: ties keep the candidates' order) shown with
    randomised adjacent pairs: FairPairs / BubbleRank pairing, (1, 2), (3, 4), ... or
    (2, 3), (4, 5), ... at random; Raman et al. 2013: each pair swapped with probability
    ``p``, independently. A pair whose upper position is the page's last one reaches one
    below it, so the first result the page leaves out is shown now and then and can earn
    clicks. The page and its chances come from one compiled pass
    (:func:`reranker.features.kernels.perturbed_pairs`); the pairing and the swapped pairs are the
    impression's context, which the position-bias estimate and the learners' pair feedback
    read back."""
    uppers = _pair_uppers(n_shown, len(scores))
    coins = np.asarray(rng.random(len(uppers[0]) + 1), dtype=np.float64)
    if coins.shape != (len(uppers[0]) + 1,):  # pairing 0 never has fewer pairs
        raise ValueError(f"the generator drew {coins.shape} coins for "
                         f"{len(uppers[0]) + 1}")
    ranking, offset, swapped, shown, at = kernels().perturbed_pairs(scores, n_shown, p, coins)
    swapped = swapped.tolist()
    return RankResult(ranking=ranking, scores=scores,
                      log_prob=list_log_prob(p, offset, len(swapped), uppers),
                      propensities=shown, shown_propensities=at,
                      context={PAIR_OFFSET: offset, SWAPPED: swapped, SWAP_PROBABILITY_KEY: p})


def list_log_prob(p: float, offset: int, n_swapped: int, uppers: tuple[range, range]) -> float:
    """Log-probability of a shown top made with pairing ``offset`` (whose pairs start at
    ``uppers[offset]``) and swap probability ``p``: the pairing's coin, the pairs' coins,
    and, for the argmax itself (nothing swapped), the other pairing that also leaves it
    unchanged."""
    n_pairs = len(uppers[offset])
    log_p = _LOG_HALF + n_swapped * math.log(p) + (n_pairs - n_swapped) * math.log1p(-p)
    if n_swapped == 0:  # log(exp(log_p) + exp(other)), without overflow
        other = _LOG_HALF + len(uppers[1 - offset]) * math.log1p(-p)
        high, low = max(log_p, other), min(log_p, other)
        log_p = high + math.log1p(math.exp(low - high))
    return log_p


def pair_first_log_probabilities(scores: np.ndarray, p: float) -> np.ndarray:
    """``log P(candidate i is shown first)`` on a :func:`perturbed_page` of ``scores``: the
    argmax's first is shown first unless the pairing (1, 2), (3, 4), ... (chance 1/2) swaps
    its first pair (chance p), even when only one result is shown; the pairing (2, 3), ...
    never moves it. A single candidate is never swapped."""
    best = argmax_ranking(scores)
    out = np.full(len(best), -math.inf)
    p = p / 2 if len(best) >= 2 else 0.0
    if len(best):
        out[best[0]] = math.log1p(-p)
    if p > 0:
        out[best[1]] = math.log(p)
    return out


class CoactiveLearner(LinearLearner):
    """A linear learner of the Preference Perceptron family. Subclasses implement
    ``_update`` with :meth:`direction` as their ``D_t = phi(ybar) - phi(y)`` (``ybar`` is
    :meth:`improved`, ``y`` is ``feedback.ranking``)."""

    params: tuple[Param, ...] = (SWAP_PROBABILITY, *LinearLearner.params)
    capabilities = replace(LinearLearner.capabilities, stochastic=True,
                           policy="perturbed_pairs")

    def current_capabilities(self) -> Capabilities:
        """Without swaps (``swap_probability`` 0) it presents the argmax."""
        capabilities = super().current_capabilities()
        if self.swap_probability > 0:
            return capabilities
        return capabilities.with_(stochastic=False, policy="argmax")

    def _rank(self, X: np.ndarray, n_shown: int,
              rng: np.random.Generator | None) -> RankResult:
        scores = X @ self.weights()
        if self.swap_probability == 0:
            return RankResult(ranking=argmax_ranking(scores), scores=scores)
        return perturbed_page(scores, n_shown, self.swap_probability, rng)

    def _list_log_prob(self, offset: int, n_swapped: int,
                       uppers: tuple[range, range]) -> float:
        return list_log_prob(self.swap_probability, offset, n_swapped, uppers)

    def log_probability(self, X: np.ndarray, top: np.ndarray) -> float:
        """Log-probability of showing ``top`` as the whole shown list (``n_shown`` =
        ``len(top)``): the argmax's top with the pairs of one pairing each kept (1 - p) or
        swapped (p)."""
        if not self.capabilities.stochastic:
            return super().log_probability(X, top)
        X = self.check_features(X)
        top = np.asarray(top, dtype=np.intp).tolist()
        k = len(top)
        best = argmax_ranking(X @ self.weights()).tolist()
        uppers = _pair_uppers(k, len(best))
        if top == best[:k]:
            return self._list_log_prob(0, 0, uppers)
        for offset in (0, 1):  # a list with a swap comes from one pairing only
            shown = list(best)
            n_swapped = 0
            for upper in uppers[offset]:
                if top[upper] != shown[upper]:  # this pair must have been swapped
                    shown[upper], shown[upper + 1] = shown[upper + 1], shown[upper]
                    n_swapped += 1
            if shown[:k] == top:
                return self._list_log_prob(offset, n_swapped, uppers)
        return -math.inf

    def _first_log_probabilities(self, X: np.ndarray) -> np.ndarray:
        return pair_first_log_probabilities(X @ self.weights(), self.swap_probability)

    def marginals(self, X: np.ndarray, n_shown: int) -> np.ndarray | None:
        """Every result of the argmax's top is shown but the last, which the pair reaching
        below the page (in one pairing of two, swapped with chance p) trades for the first
        result left out."""
        if not self.capabilities.stochastic:
            return super().marginals(X, n_shown)
        X = self.check_features(X)
        out = np.zeros(X.shape[0])
        kernels().shown_chances(argmax_ranking(X @ self.weights()),
                                 max(0, min(int(n_shown), X.shape[0])), self.swap_probability,
                                 out)
        return out

    def position_marginals(self, X: np.ndarray, n_shown: int) -> np.ndarray | None:
        """Each pairing (chance 1/2) keeps every pair of its own (chance 1 - p) or swaps it
        (chance p); the positions outside its pairs keep the argmax's result. A position
        can only hold the argmax's result there or one of its two neighbours."""
        if not self.capabilities.stochastic:
            return super().position_marginals(X, n_shown)
        X = self.check_features(X)
        k = max(0, min(int(n_shown), X.shape[0]))
        out = np.zeros((X.shape[0], k))
        kernels().position_chances(argmax_ranking(X @ self.weights()), k,
                                    self.swap_probability, out)
        return out

    def improved(self, feedback: Feedback) -> np.ndarray | None:
        """``ybar`` of this feedback, or None when it carries no information: the coactive
        improved ranking when the learner presents the argmax, the pair-swapped ranking
        (within the pairing the impression's context names) when it perturbs. A ``ybar`` the
        feature map cannot tell from the shown ranking (say, a swapped pair below ``depth``)
        carries no information either."""
        if self.swap_probability > 0:
            context = feedback.context or {}
            improved = pair_swapped_ranking(feedback, int(context.get(PAIR_OFFSET, 0)))
        else:
            improved = feedback.improved if feedback.informative else None
        if improved is None or self.feature_map.same_phi(improved, feedback.ranking):
            return None
        return improved

    def direction(self, X: np.ndarray, feedback: Feedback,
                  improved: np.ndarray | None = None) -> np.ndarray | None:
        """``D_t = phi(ybar) - phi(y)``, shape ``(m,)``, or None without information
        (``improved``: :meth:`improved` of this feedback, when the caller has it already).

        Perturbed, ``ybar`` differs from ``y`` by swapped pairs, and each pair's part of
        ``D_t``, ``(g_k - g_k+1) (x_lower - x_upper)``, is weighted by the inverse of the
        chance that the pair was shown the way it was, ``1 / (2 p)`` swapped and
        ``1 / (2 (1 - p))`` kept (inverse propensity weighting, Joachims, Swaminathan &
        Schnabel 2017): both orders then count as if shown equally often, which is what
        cancels the position bias in Raman et al.'s pair feedback, for any ``p``. At
        ``p = 0.5`` every weight is 1 and ``D_t`` is the papers'."""
        if improved is None:
            improved = self.improved(feedback)
        if improved is None:
            return None
        # the chance the pairs were swapped with: logged with the impression (an experiment
        # randomises the pairs of a mixed page itself), else the learner's own
        p = float((feedback.context or {}).get(SWAP_PROBABILITY_KEY, self.swap_probability))
        if p == 0.0 or p == 0.5:
            return self.feature_map.phi_difference(X, improved, feedback.ranking)
        swapped = set((feedback.context or {}).get(SWAPPED, ()))
        g = self.feature_map.discounts(len(improved))
        ranking = feedback.ranking
        weights = np.zeros(X.shape[0])
        for upper in np.flatnonzero(improved[:len(g)] != ranking[:len(g)])[::2].tolist():
            below = g[upper + 1] if upper + 1 < len(g) else 0.0
            scale = (g[upper] - below) * (0.5 / p if upper in swapped else 0.5 / (1.0 - p))
            weights[ranking[upper + 1]] += scale  # the lower result, clicked, moves up
            weights[ranking[upper]] -= scale
        return weights @ X

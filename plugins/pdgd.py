"""Pairwise Differentiable Gradient Descent (Oosterhuis & de Rijke, CIKM 2018, Algorithm 1)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from reranker import hookimpl
from reranker.features.clicks.position_bias import PAIR_OFFSET, one_click_pairs
from reranker.learners import (
    GradientStepLearner,
    RankResult,
    learning_rate_params,
)
from reranker.learners.base import PRIOR_STEPS
from reranker.learners.feedback import Feedback, click_positions
from reranker.learners.policies import PlackettLucePolicy, RankedScores, gumbel_top_k

_EXP_MINUS_700 = math.exp(-700.0)  # the floor of a pair's logistic weight term, e^-|d|


def clicked_and_skipped(feedback: Feedback) -> tuple[list[int], list[int]]:
    """The shown positions that were clicked, and the unclicked ones PDGD compares them
    with: above the last click, and the one directly below it (PDGD, section 4.1). Each
    clicked result is preferred to each of them."""
    k = min(feedback.n_shown, len(feedback.ranking))
    positions = feedback.positions
    if positions is None:  # live clicks: their positions in the ranking
        where = np.empty(len(feedback.ranking), dtype=np.intp)
        where[feedback.ranking] = np.arange(len(feedback.ranking))
        positions = np.sort(where[np.asarray(feedback.clicked, dtype=np.intp)])
    clicked = positions.tolist()  # (a page: scalars beat numpy)
    if clicked and clicked[-1] >= k:  # (ascending: only then is one below the page)
        clicked = [p for p in clicked if p < k]
    if not clicked:
        return [], []
    chosen = set(clicked)
    seen = min(clicked[-1] + 2, k)  # through the one directly below the last click
    return clicked, [p for p in range(seen) if p not in chosen]


class _Normalisers:
    """The Plackett-Luce normalisers of a ranking's first ``depth`` positions, in scalars (a
    page has a few clicks and at most a page of positions, where numpy's per-call cost would
    dominate): ``e[r]`` the shifted exponentiated score at position ``r``, ``after[r]`` the
    normaliser at ``r`` (the sum of ``e`` over positions ``r..``), and ``log_after[r]`` the
    sum of ``log after`` over positions before ``r``."""

    __slots__ = ("e", "after", "log_after", "logs")

    def __init__(self, ranked: RankedScores, depth: int):
        shifted = ranked.shifted
        self.e = e = shifted[:depth].tolist()
        self.after = after = [0.0] * (depth + 1)
        total = float(np.add.reduce(shifted[depth:]))  # (.sum(), without its Python wrapper)
        after[depth] = total
        for r in range(depth - 1, -1, -1):
            total += e[r]
            after[r] = total
        self.log_after = log_after = [0.0] * (depth + 1)
        #: In log space, when scores hundreds apart underflow a normaliser to zero (a
        #: starting ranking that weighs much makes the policy all but deterministic): per
        #: position the log of its shifted score and of its normaliser.
        self.logs: tuple[list[float], list[float]] | None = None
        if depth and after[depth - 1] <= 1e-250:
            shifted_log = ranked.ordered - ranked.top
            normalisers = np.logaddexp.accumulate(shifted_log[::-1])[::-1][:depth]
            self.logs = (shifted_log[:depth].tolist(), normalisers.tolist())
            log_after[1:] = np.cumsum(normalisers).tolist()
            return
        log, total = math.log, 0.0
        for r in range(depth):
            total += log(after[r])
            log_after[r + 1] = total

    def swap_log_ratio(self, a: int, b: int) -> float:
        """``log P(R*) - log P(R)`` for positions ``a < b``, ``R*`` being the ranking with
        the two swapped. Both place the same items before ``a`` and after ``b`` and the same
        items (in another order) between, so only the normalisers at ``a+1..b`` differ:
        there the items not yet placed hold ``R[a]`` instead of ``R[b]``, ``after[r] - e_b +
        e_a`` (at least ``e_a``; the clamp only catches rounding), multiplied up and logged
        once."""
        if self.logs is not None:
            return self._swap_log_ratio_in_logs(a, b)
        e_a, after = self.e[a], self.after
        change = e_a - self.e[b]
        product = 1.0
        for value in after[a + 1:b + 1]:
            value += change
            product *= value if value > e_a else e_a
        if 1e-280 < product < 1e280:
            log_swapped = math.log(product)
        else:  # (a product this far out of range: log each term)
            log_swapped = sum(math.log(max(value + change, e_a)) for value in after[a + 1:b + 1])
        return self.log_after[b + 1] - self.log_after[a + 1] - log_swapped


    def _swap_log_ratio_in_logs(self, a: int, b: int) -> float:
        """:meth:`swap_log_ratio` from the logs: each changed normaliser ``after[r] - e_b
        + e_a`` as ``m + log(exp(L_r - m) - exp(l_b - m) + exp(l_a - m))``, ``m`` the
        largest of the logs, at least ``e_a``."""
        scores, normalisers = self.logs
        l_a, l_b = scores[a], scores[b]
        exp, log = math.exp, math.log
        log_swapped = 0.0
        for value in normalisers[a + 1:b + 1]:
            m = value if value > l_a else l_a
            changed = exp(value - m) - exp(l_b - m) + exp(l_a - m)
            floor = exp(l_a - m)
            log_swapped += m + log(changed if changed > floor else floor)
        return self.log_after[b + 1] - self.log_after[a + 1] - log_swapped


def swap_log_ratio(scores: np.ndarray, ranking: np.ndarray, a: int, b: int) -> float:
    """``log P(R*) - log P(R)`` of swapping positions ``a < b`` of the Plackett-Luce ranking
    ``R`` with ``scores``."""
    return _Normalisers(RankedScores(scores, ranking), b + 1).swap_log_ratio(a, b)


def pair_weights(ranked: RankedScores, clicked: list[int], skipped: list[int]) -> list[float]:
    """For every pair of a clicked position ``k`` and a skipped one ``l``, PDGD's weight
    ``rho * exp(s_k) exp(s_l) / (exp(s_k) + exp(s_l))^2`` (eqs. 7 and 9), summed per clicked
    position and, negated, per skipped one: the coefficients of their feature vectors in the
    gradient, in the order of ``clicked + skipped``. ``rho = P(R*) / (P(R) + P(R*))`` comes
    from the swap's log-ratio; ``ranked`` holds the ranking's scores."""
    depth = max(clicked[-1], skipped[-1]) + 1
    swap_log_ratio = _Normalisers(ranked, depth).swap_log_ratio
    s = ranked.ordered[:depth].tolist()
    exp = math.exp
    n_clicked = len(clicked)
    weights = [0.0] * (n_clicked + len(skipped))
    for i, k in enumerate(clicked):
        s_k, up = s[k], 0.0
        for j, m in enumerate(skipped, n_clicked):
            log_ratio = swap_log_ratio(k, m) if k < m else swap_log_ratio(m, k)
            rho = 1.0 / (1.0 + exp(-log_ratio)) if log_ratio > -700.0 else 0.0
            d = abs(s_k - s[m])  # e^d / (1 + e^d)^2 = z / (1 + z)^2, z = e^-|d|
            z = exp(-d) if d <= 700.0 else _EXP_MINUS_700
            weight = rho * z / ((1.0 + z) * (1.0 + z))
            up += weight
            weights[j] -= weight
        weights[i] = up
    return weights


class _LastRanking(NamedTuple):
    """A ranking PDGD presented, with the scores it computed for it."""

    X: np.ndarray
    ranking: np.ndarray
    scores: np.ndarray
    ranked: RankedScores
    updates: int  # n_updates_ when it ranked


class PDGD(PlackettLucePolicy, GradientStepLearner):
    """Presents Plackett-Luce samples of ``w . x``; each clicked result is preferred to the
    unclicked ones above the last click and the one directly below it, each pair weighted by
    the probability of the ranking with the pair swapped (which makes the preferences
    unbiased by position), and ``w`` follows the gradient of the pairs' log-likelihood."""

    name = "pdgd"
    description = ("Pairwise Differentiable Gradient Descent (Oosterhuis & de Rijke 2018): "
                   "Plackett-Luce rankings, click pairs debiased by the swapped ranking.")
    params = (
        *learning_rate_params(0.1, 0.9999977),  # the paper's eta for linear models
        # the engine's order as the floor, as every learner that ranks pages starts from
        # (docs/algorithms.md, "Safe start"); 0 is the paper's start, w = 0, a uniformly
        # random ranking, 0.03 to 0.16 NDCG@10 below the engine's for its first pages
        PRIOR_STEPS,
    )
    # On a list not drawn from its own policy it learns from the randomised pairs, whose
    # probabilities the list logs (_pair_update). (PlackettLucePolicy makes it stochastic.)
    capabilities = replace(GradientStepLearner.capabilities, learns_from_mixed_lists=True)

    def policy_scores(self, X: np.ndarray) -> np.ndarray:
        return X @ self.weights()

    def _rank(self, X: np.ndarray, n_shown: int,
              rng: np.random.Generator | None) -> RankResult:
        scores = X.dot(self.weights())  # (X @ w without the ufunc's per-call cost)
        ranking = gumbel_top_k(scores, rng)
        ranked = RankedScores(scores, ranking)
        # Valid for feedback on this very ranking until the model changes (the simulator
        # learns right after ranking; the service's feedback comes later and recomputes).
        self._last = _LastRanking(X, ranking, scores, ranked, self.n_updates_)
        # (the list's probability is for the log: rank() adds it, the simulator needs none)
        return RankResult(ranking=ranking, scores=scores)

    def log_probability(self, X: np.ndarray, top: np.ndarray) -> float:
        last = self._fresh_last()
        if last is not None and last.X is X and np.array_equal(last.ranking[:len(top)], top):
            return last.ranked.log_prob(len(top))
        return super().log_probability(X, top)

    def _fresh_last(self) -> _LastRanking | None:
        """What the latest ``_rank`` computed, while the model is still the one it used."""
        last = getattr(self, "_last", None)
        return last if last is not None and last.updates == self.n_updates_ else None

    def _ranked(self, X: np.ndarray, ranking: np.ndarray) -> RankedScores:
        last = self._fresh_last()
        if last is not None and last.ranking is ranking:
            return last.ranked
        return RankedScores(X @ self.weights(), ranking)

    def _first_log_probabilities(self, X: np.ndarray) -> np.ndarray:
        last = self._fresh_last()
        if last is not None and last.X is X:
            # exp(s - top) summed in the ranking's order: the same normaliser
            ranked = last.ranked
            return last.scores - (ranked.top + math.log(float(ranked.shifted.sum())))
        return super()._first_log_probabilities(X)

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        if PAIR_OFFSET in (feedback.context or {}):
            return self._pair_update(X, feedback)
        clicked, skipped = clicked_and_skipped(feedback)
        if not clicked or not skipped:
            return False
        ranking = feedback.ranking
        weights = pair_weights(self._ranked(X, ranking), clicked, skipped)
        # sum over the pairs of weight * (x_k - x_l) (take and dot: indexing and @ without
        # their per-call costs)
        self._step(np.array(weights).dot(X.take(ranking.take(clicked + skipped), axis=0)))
        return True


    def _pair_update(self, X: np.ndarray, feedback: Feedback) -> bool:
        """PDGD's gradient on a list another policy drew with randomised adjacent pairs (a
        specialised page's judgments, an experiment's mixed list; docs/algorithms.md,
        "PDGD"): within each randomised pair with exactly one click, the clicked result is
        preferred to the other, weighted by the probability of the list with the pair the
        other way round, ``rho = P(R*) / (P(R) + P(R*))`` (eq. 9): ``p`` for a pair shown
        kept and ``1 - p`` for one shown swapped, ``p`` the logged swap probability. No other
        pair has a reversed list the policy could have shown, so no other pair counts."""
        preferences, p = one_click_pairs(feedback.context, feedback.n_shown, feedback.ranking,
                                         click_positions(feedback).tolist())
        if not preferences:
            return False
        scores = X @ self.weights()
        direction = np.zeros(X.shape[1])
        exp = math.exp
        for k, m, swapped in preferences:
            rho = (1.0 - p) if swapped else p
            d = abs(float(scores[k] - scores[m]))
            z = exp(-d) if d <= 700.0 else _EXP_MINUS_700
            # PDGD, eqs. 7 and 9: rho * e^{s_k} e^{s_m} / (e^{s_k} + e^{s_m})^2 (x_k - x_m)
            direction += rho * z / ((1.0 + z) * (1.0 + z)) * (X[k] - X[m])
        self._step(direction)
        return True


@hookimpl
def reranker_register_learners():
    return [PDGD]

"""Pairwise Differentiable Gradient Descent (Oosterhuis & de Rijke, CIKM 2018, Algorithm 1)."""

from __future__ import annotations

import math

import numpy as np

from reranker import hookimpl
from reranker.feedback import Feedback
from reranker.learner import (
    GradientStepLearner,
    RankResult,
    learning_rate_params,
    prior_steps_param,
)
from reranker.policies import PlackettLucePolicy, RankedScores, gumbel_top_k


def clicked_and_skipped(feedback: Feedback) -> tuple[list[int], list[int]]:
    """The shown positions that were clicked, and the unclicked ones PDGD compares them
    with: above the last click, and the one directly below it (PDGD, section 4.1)."""
    k = min(feedback.n_shown, len(feedback.ranking))
    positions = feedback.positions
    if positions is None:  # live clicks: their positions in the ranking
        where = np.empty(len(feedback.ranking), dtype=np.intp)
        where[feedback.ranking] = np.arange(len(feedback.ranking))
        positions = np.sort(where[np.asarray(feedback.clicked, dtype=np.intp)])
    clicked = [p for p in positions.tolist() if p < k]  # (a page: scalars beat numpy)
    if not clicked:
        return [], []
    chosen = set(clicked)
    seen = min(clicked[-1] + 2, k)  # through the one directly below the last click
    return clicked, [p for p in range(seen) if p not in chosen]


def click_pairs(feedback: Feedback) -> tuple[np.ndarray, np.ndarray]:
    """The positions ``(preferred, other)`` of every pair PDGD infers from the clicks: each
    clicked result over each unclicked one of :func:`clicked_and_skipped`."""
    clicked, skipped = clicked_and_skipped(feedback)
    return (np.repeat(np.array(clicked, dtype=np.intp), len(skipped)),
            np.tile(np.array(skipped, dtype=np.intp), len(clicked)))


def swap_log_ratios(scores: np.ndarray, ranking: np.ndarray, upper: np.ndarray,
                    lower: np.ndarray) -> np.ndarray:
    """``log P(R*) - log P(R)`` for each pair of positions ``upper < lower`` of the
    Plackett-Luce ranking ``R`` with ``scores``, ``R*`` being ``R`` with the two swapped.
    Both rankings place the same items before ``upper`` and after ``lower`` and the same
    items (in another order) between, so only the normalisers at the positions after
    ``upper`` up to ``lower`` differ: there the not-yet-placed items hold ``R[upper]``
    instead of ``R[lower]``."""
    if not len(upper):
        return np.empty(0)
    depth = int(lower.max()) + 2
    e = np.exp(scores[ranking] - scores.max())  # shifted: only ratios matter
    # after[r]: the sum over positions r.. (the normaliser of R at r)
    after = np.concatenate([np.cumsum(e[::-1])[::-1], [0.0]])[:depth]
    r = np.arange(depth - 1)
    inside = (r > upper[:, None]) & (r <= lower[:, None])  # (pairs, positions)
    # R*'s normaliser at r: positions r..b-1 and after b, plus R[a] (all positive terms)
    swapped = (after[r] - after[lower][:, None]) + after[lower + 1][:, None] \
        + e[upper][:, None]
    logs = np.log(after[r])[None, :] - np.log(np.where(inside, swapped, 1.0))
    return np.where(inside, logs, 0.0).sum(axis=1)


def pair_weights(ranked: RankedScores, clicked: list[int],
                 skipped: list[int]) -> tuple[list[float], list[float]]:
    """For every pair of a clicked position ``k`` and a skipped one ``l``, PDGD's weight
    ``rho * exp(s_k) exp(s_l) / (exp(s_k) + exp(s_l))^2`` (eqs. 7 and 9), summed per clicked
    and per skipped position. ``rho = P(R*) / (P(R) + P(R*))`` comes from the log-ratio of
    :func:`swap_log_ratios`, here in scalar arithmetic: a page has a few clicks and at most
    a page of positions, where numpy's per-call cost would dominate. ``ranked`` holds the
    ranking's scores."""
    depth = max(clicked[-1], skipped[-1]) + 1
    shifted = ranked.shifted  # exp of the scores in the ranking's order, shifted
    e = shifted[:depth].tolist()
    s = ranked.ordered[:depth].tolist()
    after = [0.0] * (depth + 1)  # after[r]: the normaliser of R at r
    total = float(shifted[depth:].sum())
    after[depth] = total
    for r in range(depth - 1, -1, -1):
        total += e[r]
        after[r] = total
    log_after = [0.0] * (depth + 1)  # log_after[r]: sum of log after[0..r-1]
    for r in range(depth):
        log_after[r + 1] = log_after[r] + math.log(after[r])
    up_weight = [0.0] * len(clicked)
    down_weight = [0.0] * len(skipped)
    for i, k in enumerate(clicked):
        for j, m in enumerate(skipped):
            a, b = (k, m) if k < m else (m, k)
            e_a, e_b = e[a], e[b]
            # R*'s normalisers at a+1..b hold R[a] instead of R[b]: after[r] - e_b + e_a
            # (at least e_a; the clamp only catches rounding), multiplied up and logged once
            change = e_a - e_b
            product = 1.0
            for value in after[a + 1:b + 1]:
                value += change
                product *= value if value > e_a else e_a
            if 1e-280 < product < 1e280:
                log_swapped = math.log(product)
            else:  # (a product this far out of range: log each term)
                log_swapped = sum(math.log(max(value + change, e_a))
                                  for value in after[a + 1:b + 1])
            log_ratio = log_after[b + 1] - log_after[a + 1] - log_swapped
            rho = 1.0 / (1.0 + math.exp(-log_ratio)) if log_ratio > -700.0 else 0.0
            z = math.exp(-min(abs(s[k] - s[m]), 700.0))  # e^d / (1 + e^d)^2, d = s_k - s_m
            weight = rho * z / ((1.0 + z) * (1.0 + z))
            up_weight[i] += weight
            down_weight[j] += weight
    return up_weight, down_weight


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
        prior_steps_param(0.0),  # the paper starts from w = 0, a uniformly random ranking
    )
    # Its pair weights are unbiased only for lists drawn from its own Plackett-Luce policy.
    learns_from_mixed_lists = False

    def policy_scores(self, X: np.ndarray) -> np.ndarray:
        return X @ self.weights()

    def _rank(self, X: np.ndarray, n_shown: int,
              rng: np.random.Generator | None) -> RankResult:
        scores = X @ self.weights()
        ranking = gumbel_top_k(scores, rng)
        ranked = RankedScores(scores, ranking)
        # Valid for feedback on this very ranking until the model changes (the simulator
        # learns right after ranking; the service's feedback comes later and recomputes).
        self._last = (X, ranking, ranked, self.n_updates_, scores)
        return RankResult(ranking=ranking, scores=scores, log_prob=ranked.log_prob(n_shown))

    def _ranked(self, X: np.ndarray, ranking: np.ndarray) -> RankedScores:
        last = getattr(self, "_last", None)
        if last is not None and last[1] is ranking and last[3] == self.n_updates_:
            return last[2]
        return RankedScores(X @ self.weights(), ranking)

    def _first_log_probabilities(self, X: np.ndarray) -> np.ndarray:
        last = getattr(self, "_last", None)
        if last is not None and last[0] is X and last[3] == self.n_updates_:
            ranked = last[2]  # exp(s - top) summed in another order: the same normaliser
            return last[4] - (ranked.top + math.log(float(ranked.shifted.sum())))
        return super()._first_log_probabilities(X)

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        clicked, skipped = clicked_and_skipped(feedback)
        if not clicked or not skipped:
            return False
        ranking = feedback.ranking
        up_weight, down_weight = pair_weights(self._ranked(X, ranking), clicked, skipped)
        # sum over the pairs of weight * (x_k - x_l), per document
        gradient = np.array(up_weight + [-w for w in down_weight]) @ X[ranking[clicked + skipped]]
        self._step(gradient)
        return True


@hookimpl
def reranker_register_learners():
    return [PDGD]

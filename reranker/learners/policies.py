"""Random ranking policies: Plackett-Luce sampling and its probabilities (docs/algorithms.md,
"Plackett-Luce learners"; Delage's K-logistic policies)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np


def gumbel_top_k(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A Plackett-Luce ranking of all candidates: each next item drawn with probability
    ``exp(s_i) / sum over the remaining exp(s_j)``. Sorting ``s_i + G_i`` with Gumbel(0, 1)
    noise ``G_i`` draws exactly that distribution (the Gumbel-top-k trick)."""
    return (-(scores + rng.gumbel(size=scores.shape))).argsort(kind="stable")


class RankedScores:
    """A ranking's scores in its order, ``ordered``, with their maximum ``top`` and
    ``shifted = exp(ordered - top)``: what a Plackett-Luce learner computes once per
    ranking for its probability and its update."""

    __slots__ = ("ordered", "top", "shifted")

    def __init__(self, scores: np.ndarray, ranking: np.ndarray):
        self.ordered = scores[ranking]
        self.top = float(self.ordered.max()) if len(ranking) else 0.0
        self.shifted = np.exp(self.ordered - self.top)

    def log_prob(self, k: int) -> float:
        """The log-probability of the ranking's first ``k`` items: ``sum_{j<k} (s_{y_j} -
        logsumexp(s over y[j:]))`` (the items not yet placed before position ``j``)."""
        ordered, top, shifted = self.ordered, self.top, self.shifted
        k = min(k, len(ordered))
        if k == 0:
            return 0.0
        # the normalisers are sums of positive terms, accumulated from the end in scalars
        # (a page is a few positions, where numpy's per-call cost would dominate)
        total = float(shifted[k:].sum())
        head, head_scores = shifted[:k].tolist(), ordered[:k].tolist()
        log_prob = 0.0
        for r in range(k - 1, -1, -1):
            total += head[r]
            if total <= 1e-250:
                break
            log_prob += head_scores[r] - top - math.log(total)
        else:
            return log_prob
        # scores hundreds apart underflow the smaller terms to zero: accumulate in log space
        log_suffix = np.logaddexp.accumulate(ordered[::-1])[::-1][:k]
        return float(ordered[:k].sum() - log_suffix.sum())


def plackett_luce_log_prob(scores: np.ndarray, ranking: np.ndarray, k: int) -> float:
    """The log-probability of the first ``k`` items of a full ranking of all candidates
    under Plackett-Luce with ``scores`` (:meth:`RankedScores.log_prob`)."""
    return RankedScores(scores, ranking).log_prob(k)


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


#: Step of the quadrature grid in log-time of :func:`plackett_luce_position_marginals`; the
#: trapezoid rule on these smooth, rapidly decaying integrands is accurate to ~1e-10 at it
#: (measured on 50 to 300 candidates, the first ten positions).
_LOG_TIME_STEP = 0.2


#: A drop between two consecutive scores (sorted) beyond which the candidates above it are
#: taken to be placed before every candidate below it: each such inversion has a chance of
#: at most ``e^-40`` (about 4e-18), far below the quadrature's accuracy.
_SEPARATING_GAP = 40.0


def plackett_luce_position_marginals(scores: np.ndarray, k: int) -> np.ndarray:
    """``P[i, r]``: the probability that candidate ``i`` is placed at position ``r`` (0-based,
    ``r < k``) of a Plackett-Luce ranking with ``scores``; summed over ``r``, the chance of
    being among the first ``k`` (docs/algorithms.md, "Plackett-Luce learners").

    Plackett-Luce is the order in which independent exponential clocks with rates
    ``exp(s_j)`` ring, so ``P[i, r] = integral of exp(s_i) e^(-exp(s_i) t) P(r other clocks
    rang before t) dt``: the count of the others is Poisson-binomial, computed per candidate
    without it from prefix and suffix distributions (truncated at ``k``, all sums of
    positive terms), and the integral by the trapezoid rule in ``log t``.

    Where the sorted scores drop by more than :data:`_SEPARATING_GAP`, the candidates above
    the drop fill the first places and those below it follow (up to chances of ``e^-40``):
    each block is computed alone, so that scores hundreds apart (a starting ranking that
    weighs much) need no time grid spanning all of their clocks."""
    scores = np.asarray(scores, dtype=np.float64)
    n = len(scores)
    k = min(int(k), n)
    out = np.zeros((n, k))
    if k == 0:
        return out
    order = np.argsort(-scores, kind="stable")
    drops = np.flatnonzero(np.diff(scores[order]) < -_SEPARATING_GAP) + 1
    if drops.size:
        start = 0
        for end in (*drops.tolist(), n):
            if start >= k:
                break
            block = order[start:end]
            part = _block_position_marginals(scores[block], k - start)
            out[block, start:start + part.shape[1]] = part
            start = end
        return out
    return _block_position_marginals(scores, k)


def _block_position_marginals(scores: np.ndarray, k: int) -> np.ndarray:
    """:func:`plackett_luce_position_marginals` of one block of scores, on one time grid."""
    n = len(scores)
    k = min(int(k), n)
    out = np.zeros((n, k))
    if k == 0:
        return out
    if n == 1:
        out[0, 0] = 1.0
        return out
    lam = np.exp(scores - scores.max())  # rates; the largest is 1
    # log t from where every clock is still silent (mass below < 1e-12) to where the k + 1
    # fastest clocks have all rung (after that, fewer than k others have rung with chance
    # below (k + 1) e^-40: no candidate can still be placed in the first k)
    slowest_needed = max(float(np.partition(lam, n - k - 1)[n - k - 1]) if k < n
                         else float(lam.min()), 1e-300)
    x = np.arange(math.log(1e-12), math.log(40.0 / slowest_needed) + _LOG_TIME_STEP,
                  _LOG_TIME_STEP)
    t = np.exp(x)
    rung = -np.expm1(-np.outer(lam, t))  # (n, T): clock j has rung by t
    silent = np.exp(-np.outer(lam, t))
    # prefix[j]: distribution of the count among clocks 0..j-1 (counts 0..k-1), (T, k)
    prefix = np.zeros((n + 1, len(t), k))
    prefix[0, :, 0] = 1.0
    for j in range(n):
        prefix[j + 1] = prefix[j] * silent[j][:, None]
        prefix[j + 1, :, 1:] += prefix[j, :, :-1] * rung[j][:, None]
    suffix = np.zeros((n + 1, len(t), k))
    suffix[n, :, 0] = 1.0
    for j in range(n - 1, -1, -1):
        suffix[j] = suffix[j + 1] * silent[j][:, None]
        suffix[j, :, 1:] += suffix[j + 1, :, :-1] * rung[j][:, None]
    # others[i, :, m]: exactly m of the clocks other than i rang by t
    others = np.zeros((n, len(t), k))
    for m in range(k):
        others[:, :, m] = np.einsum("itc,itc->it", prefix[:n, :, : m + 1],
                                    suffix[1:, :, m::-1])
    density = lam[:, None] * t[None, :] * silent  # exp(s_i) e^(-exp(s_i) t), times dt/dx = t
    out = np.einsum("it,itm->im", density, others) * _LOG_TIME_STEP
    return out


def plackett_luce_marginals(scores: np.ndarray, k: int) -> np.ndarray:
    """The probability of each candidate to be among the first ``k`` of a Plackett-Luce
    ranking with ``scores`` (1 for every candidate when ``k`` covers them all)."""
    if k >= len(scores):
        return np.ones(len(scores))
    return np.clip(plackett_luce_position_marginals(scores, k).sum(axis=1), 0.0, 1.0)


class PlackettLucePolicy:
    """What a learner that presents Plackett-Luce samples of its scores knows of its policy:
    mix it into a :class:`reranker.learners.base.Learner` whose ``policy_scores(X)`` gives the
    scores. Its rankings are logged with the probability of the shown list and each
    candidate's chance of being shown. The learner's capabilities say so (``stochastic``,
    policy ``plackett_luce``) over what it declares: the mixin is what presents them."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)  # (the learner's declaration, read first)
        cls._declare(replace(cls._declared_capabilities, stochastic=True,
                             policy="plackett_luce"))

    def policy_scores(self, X: np.ndarray) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def _present(self, scores: np.ndarray, n_shown: int, rng: np.random.Generator):
        from reranker.learners.base import RankResult

        ranking = gumbel_top_k(scores, rng)
        # (the marginals, which cost more than the sample, are added by Learner.rank)
        return RankResult(ranking=ranking, scores=scores,
                          log_prob=plackett_luce_log_prob(scores, ranking, n_shown))

    def log_probability(self, X: np.ndarray, top: np.ndarray) -> float:
        return plackett_luce_prefix_log_prob(self.policy_scores(self.check_features(X)),
                                             np.asarray(top, dtype=np.intp))

    def _first_log_probabilities(self, X: np.ndarray) -> np.ndarray:
        return log_softmax(self.policy_scores(X))

    def marginals(self, X: np.ndarray, n_shown: int) -> np.ndarray:
        return plackett_luce_marginals(self.policy_scores(self.check_features(X)), n_shown)

    def position_marginals(self, X: np.ndarray, n_shown: int) -> np.ndarray:
        return plackett_luce_position_marginals(self.policy_scores(self.check_features(X)),
                                                n_shown)

"""Outcomes of comparisons between arms, and when they are significant (docs/algorithms.md,
"Comparing learners").

An experiment produces, per pair of arms (a, b), a time-ordered sequence of outcomes: +1 (a
wins the impression), -1 (b wins) or 0 (a tie). Ties carry no information about which arm is
better and are dropped, as the sign test does; among the decided comparisons the null
hypothesis is ``P(a wins | decided) = 1/2``.

The results are looked at while traffic flows, and stopping at the first look where a
fixed-horizon test says "significant" makes false positives far more likely than its nominal
level (the tests show it). Significance therefore comes from an always-valid sequential test,
the mixture sequential probability ratio test (mSPRT; Robbins, "Statistical methods related to
the law of the iterated logarithm", Ann. Math. Statist. 1970; Johari, Koomen, Pekelis & Walsh,
"Peeking at A/B tests: why it matters, and what to do about it", KDD 2017):

* the alternative is a mixture over the win probability ``p`` with a symmetric ``Beta(h, h)``
  density, so after ``w`` wins and ``l`` losses the likelihood ratio against ``p = 1/2`` is
  ``Lambda = B(w + h, l + h) / B(h, h) / 0.5 ** (w + l)``;
* under the null ``Lambda`` is a non-negative martingale with mean 1, so by Ville's inequality
  (Ville 1939) ``P(Lambda_t >= 1 / alpha for some t) <= alpha``;
* hence the always-valid p-value ``min(1, 1 / max_{t <= n} Lambda_t)``: the probability that
  it EVER drops to ``alpha`` or below is at most ``alpha``, however often it is looked at.

For reference, :func:`compare` also reports the exact two-sided sign test (valid only when the
sample size is fixed in advance and looked at once) and a percentile bootstrap interval of the
win rate (Efron & Tibshirani, "An Introduction to the Bootstrap", 1993, Chapter 13).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from reranker.core.renamed import renamed

__all__ = [
    "DEFAULT_MIXTURE",
    "Comparison",
    "always_valid_p_values",
    "bootstrap_rate_interval",
    "compare",
    "impressions_to_significance",
    "mean_confidence_bounds",
]

# h of the Beta(h, h) mixture over the win rate among decided comparisons. Beta(h, h) has mean
# 1/2 and standard deviation sqrt(1 / (4 (2h + 1))): h = 10 gives 0.109, i.e. the test is tuned
# to win rates of roughly 0.4..0.6 and detects them fastest; a smaller h favours large effects
# (h = 1 is uniform over [0, 1]), a larger h small ones (docs/algorithms.md, "Comparing
# learners"; Johari et al. 2017 on choosing the mixing distribution).
DEFAULT_MIXTURE = 10.0


@dataclass(frozen=True)
class Comparison:
    """Summary of one pair's outcomes; arm 0 is the first arm of the pair (``a``)."""

    wins: int
    losses: int
    ties: int
    win_rate: float | None  # wins / (wins + losses); None when no decided comparison
    interval: tuple[float, float] | None  # bootstrap percentile interval of win_rate at `level`
    p_value: float | None  # two-sided exact sign test; fixed-horizon, for reference
    always_valid_p: float  # mSPRT, 1.0 with no data
    significant: bool
    winner: int | None  # 0 (first arm) or 1 (second) when significant, else None

    def to_dict(self) -> dict:
        """JSON-ready fields (the interval as a 2-list or None)."""
        return {
            "wins": self.wins,
            "losses": self.losses,
            "ties": self.ties,
            "win_rate": self.win_rate,
            "interval": None if self.interval is None else list(self.interval),
            "p_value": self.p_value,
            "always_valid_p": self.always_valid_p,
            "significant": self.significant,
            "winner": self.winner,
        }


def _as_outcomes(outcomes: Sequence[int] | np.ndarray) -> np.ndarray:
    """Outcomes as a 1-d int array; raises ValueError on values other than -1, 0, +1."""
    array = np.asarray(outcomes)
    if array.ndim != 1:
        raise ValueError(f"outcomes must be a 1-d sequence, got shape {array.shape}")
    if array.size and not np.isin(array, (-1, 0, 1)).all():
        raise ValueError("outcomes must be +1 (first arm wins), -1 (second arm wins) or 0 (tie)")
    return array.astype(np.int64)


def _check_mixture(mixture: float) -> None:
    if not mixture > 0:
        raise ValueError(f"the mixture parameter h must be positive, got {mixture}")


def _log_likelihood_ratios(decided: np.ndarray, mixture: float) -> np.ndarray:
    """log Lambda after each decided outcome (docs/algorithms.md, "Comparing learners";
    Johari et al. 2017, mSPRT with a Beta(h, h) mixture)."""
    wins = np.cumsum(decided > 0)
    losses = np.arange(1, decided.size + 1) - wins
    return (special.betaln(wins + mixture, losses + mixture) - special.betaln(mixture, mixture)
            + (wins + losses) * math.log(2.0))


def always_valid_p_values(outcomes: np.ndarray, mixture: float = DEFAULT_MIXTURE) -> np.ndarray:
    """Running always-valid p-values after each decided outcome (ties skipped), vectorised with
    numpy (cumsum of wins/losses, betaln), length = number of decided outcomes."""
    _check_mixture(mixture)
    array = _as_outcomes(outcomes)
    decided = array[array != 0]
    if decided.size == 0:
        return np.ones(0)
    # p_n = min(1, 1 / max_{t <= n} Lambda_t): non-increasing, and P(ever <= alpha) <= alpha
    # under the null by Ville's inequality (Johari et al. 2017).
    running_max = np.maximum.accumulate(_log_likelihood_ratios(decided, mixture))
    return np.exp(-np.maximum(running_max, 0.0))


def compare(outcomes: Sequence[int] | np.ndarray, *, alpha: float = 0.05,
            mixture: float = DEFAULT_MIXTURE, level: float = 0.95, draws: int = 2000,
            seed: int = 0) -> Comparison:
    """Counts, win rate with a bootstrap interval, the sign test and the always-valid mSPRT
    decision for one pair's time-ordered outcomes.

    ``winner`` is the arm ahead when the always-valid p-value FIRST reached ``alpha``: that is
    when a sequential test rejects, and it stays significant however the data go on.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    array = _as_outcomes(outcomes)
    wins = int(np.count_nonzero(array > 0))
    losses = int(np.count_nonzero(array < 0))
    ties = int(array.size - wins - losses)
    decided = wins + losses
    p_values = always_valid_p_values(array, mixture)
    always_valid_p = float(p_values[-1]) if p_values.size else 1.0
    significant = always_valid_p <= alpha
    winner = None
    if significant:
        first = int(np.argmax(p_values <= alpha))  # index among the decided outcomes
        ahead = int(np.sum(array[array != 0][:first + 1]))  # wins - losses at that time
        winner = 0 if ahead > 0 else 1
    if decided == 0:
        return Comparison(wins, losses, ties, None, None, None, always_valid_p, significant,
                          winner)
    return Comparison(
        wins=wins,
        losses=losses,
        ties=ties,
        win_rate=wins / decided,
        interval=bootstrap_rate_interval(wins, decided, level=level, draws=draws, seed=seed),
        p_value=sign_test(wins, decided),
        always_valid_p=always_valid_p,
        significant=significant,
        winner=winner,
    )


def sign_test(wins: int, n: int) -> float:
    """The exact two-sided p-value of ``wins`` in ``n`` fair coin flips: under a rate of 1/2
    the binomial distribution is symmetric, so the outcomes at most as likely as ``wins`` are
    those at least as far from ``n / 2``, twice the tail below ``min(wins, n - wins)`` (1 at
    the middle). What ``scipy.stats.binomtest(wins, n, 0.5).pvalue`` gives, from
    ``scipy.special`` alone (``scipy.stats`` costs a serving process some 45 MB and 0.4 s
    to import)."""
    if n <= 0:
        return 1.0
    return float(min(1.0, 2.0 * special.bdtr(min(wins, n - wins), n, 0.5)))


def bootstrap_rate_interval(wins: int, n: int, level: float = 0.95, draws: int = 2000,
                            seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap of a proportion: resampling n iid outcomes is
    rng.binomial(n, wins/n, draws) / n."""
    if n <= 0 or not 0 <= wins <= n:
        raise ValueError(f"need 0 <= wins <= n and n > 0, got wins={wins}, n={n}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    rates = rng.binomial(n, wins / n, draws) / n
    low, high = np.quantile(rates, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def mean_confidence_bounds(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The bounds ``(low, high)`` of the normal-approximation confidence interval of a mean
    at ``level`` (mean +- z * sd / sqrt(n)), as a report shows them beside the mean: a
    single value gives the point ``(mean, mean)``, so that a report stays finite JSON
    (unlike :func:`reranker.evaluation.estimators.mean_estimate`, whose unknown spread is
    unbounded)."""
    array = np.asarray(values, dtype=float).ravel()
    if array.size == 0:
        raise ValueError("the mean of no values is undefined")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    mean = float(array.mean())
    if array.size < 2:
        return mean, mean
    half = special.ndtri((1 + level) / 2) * array.std(ddof=1) / math.sqrt(array.size)
    return mean - float(half), mean + float(half)


def difference_interval(a: np.ndarray, b: np.ndarray, level: float = 0.95
                        ) -> tuple[float, float, float]:
    """The difference of the means of two independent samples, ``mean(a) - mean(b)``, with
    its normal-approximation (Welch) interval: ``(difference, low, high)``."""
    a, b = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    if a.size == 0 or b.size == 0:
        raise ValueError("the mean of no values is undefined")
    difference = float(a.mean() - b.mean())
    variance = sum(x.var(ddof=1) / x.size for x in (a, b) if x.size > 1)
    half = float(special.ndtri((1 + level) / 2) * math.sqrt(variance))
    return difference, difference - half, difference + half


def impressions_to_significance(outcomes: Sequence[int] | np.ndarray, *, alpha: float = 0.05,
                                mixture: float = DEFAULT_MIXTURE,
                                every: int = 1) -> int | None:
    """Index (1-based, counted over ALL outcomes including ties) of the first look, looking
    after every `every` outcomes, at which the test is significant; None if never.

    The looks are after outcomes ``every, 2 * every, ...``; a last partial block is not looked
    at.
    """
    if every < 1:
        raise ValueError(f"every must be at least 1, got {every}")
    array = _as_outcomes(outcomes)
    p_decided = always_valid_p_values(array, mixture)
    # p-value after each of ALL outcomes: the one after the decided outcomes seen so far.
    p_all = np.concatenate(([1.0], p_decided))[np.cumsum(array != 0)]
    looks = p_all[every - 1::every]
    hits = np.flatnonzero(looks <= alpha)
    return int((hits[0] + 1) * every) if hits.size else None


__getattr__ = renamed(__name__, {"mean_interval": "mean_confidence_bounds"}, globals())

"""Outcome statistics and the always-valid sequential test (docs/algorithms.md, "Comparing
learners"; Johari, Koomen, Pekelis & Walsh, KDD 2017)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import integrate, stats

from reranker.experiments.stats import (
    DEFAULT_MIXTURE,
    Comparison,
    always_valid_p_values,
    bootstrap_rate_interval,
    compare,
    impressions_to_significance,
    mean_confidence_bounds,
    sign_test,
)


def _stream(rng: np.random.Generator, size, win: float, tie: float) -> np.ndarray:
    """Outcomes with P(tie) = tie and P(first arm wins | decided) = win."""
    u = rng.random(size)
    decided_u = rng.random(size)
    return np.where(u < tie, 0, np.where(decided_u < win, 1, -1))


def _mixture_likelihood_ratio(wins: int, losses: int, h: float) -> float:
    """Lambda by numerical integration of the Beta(h, h) mixture, independent of betaln."""
    value, _ = integrate.quad(
        lambda p: p ** wins * (1 - p) ** losses * stats.beta.pdf(p, h, h), 0, 1,
        epsabs=0, epsrel=1e-11, limit=200)
    return value / 0.5 ** (wins + losses)


@pytest.mark.parametrize("h", [1.0, 2.5, DEFAULT_MIXTURE])
def test_p_values_match_the_integrated_likelihood_ratio(h):
    outcomes = np.array([1, 1, 0, -1, 1, 1, 1, 0, 1, -1, 1, 1, 1, 0, 1])
    decided = outcomes[outcomes != 0]
    wins = np.cumsum(decided > 0)
    ratios = [_mixture_likelihood_ratio(int(w), int(t + 1 - w), h)
              for t, w in enumerate(wins)]
    expected = np.minimum(1.0, 1.0 / np.maximum.accumulate(ratios))
    p_values = always_valid_p_values(outcomes, mixture=h)
    assert p_values.shape == (decided.size,)
    np.testing.assert_allclose(p_values, expected, rtol=1e-8)


def test_p_values_hand_computed_with_a_uniform_mixture():
    # h = 1: Lambda = w! l! / (n + 1)! * 2**n; for l = 0 that is 2**n / (n + 1).
    p_values = always_valid_p_values(np.array([1, 1, 1, 1, 1]), mixture=1.0)
    np.testing.assert_allclose(p_values, [1.0, 0.75, 0.5, 5 / 16, 6 / 32])
    # w = 2, l = 2: Lambda = 2! 2! / 5! * 16 = 8 / 15 < 1, so the running max keeps 2 wins' 4/3.
    p_values = always_valid_p_values(np.array([1, 1, -1, -1]), mixture=1.0)
    np.testing.assert_allclose(p_values, [1.0, 0.75, 0.75, 0.75])


def test_p_values_skip_ties_and_never_increase():
    rng = np.random.default_rng(0)
    outcomes = _stream(rng, 3000, win=0.55, tie=0.4)
    p_values = always_valid_p_values(outcomes)
    assert p_values.size == np.count_nonzero(outcomes)
    assert (np.diff(p_values) <= 0).all()
    assert ((p_values > 0) & (p_values <= 1)).all()
    np.testing.assert_array_equal(p_values, always_valid_p_values(outcomes[outcomes != 0]))
    assert always_valid_p_values(np.array([0, 0])).size == 0
    assert always_valid_p_values(np.array([], dtype=int)).size == 0


def test_compare_counts_and_sign_test():
    result = compare([1, 1, -1, 0, 0, 1])
    assert (result.wins, result.losses, result.ties) == (3, 1, 2)
    assert result.win_rate == 0.75
    assert result.p_value == pytest.approx(stats.binomtest(3, 4, 0.5).pvalue)
    assert result.p_value == pytest.approx(0.625)
    decided = np.array([1, 1, -1, 1])
    assert result.always_valid_p == pytest.approx(always_valid_p_values(decided)[-1])
    assert not result.significant and result.winner is None
    assert result.interval is not None and result.interval[0] <= 0.75 <= result.interval[1]
    for wins, losses in [(0, 5), (7, 3), (30, 12), (50, 50)]:
        outcomes = [1] * wins + [-1] * losses + [0] * 3
        assert compare(outcomes).p_value == pytest.approx(
            stats.binomtest(wins, wins + losses, 0.5).pvalue)


def test_compare_without_decided_outcomes():
    for outcomes in ([], [0, 0, 0], np.array([], dtype=int)):
        result = compare(outcomes)
        assert result == Comparison(0, 0, len(outcomes), None, None, None, 1.0, False, None)


def test_to_dict_is_json_ready():
    result = compare(np.array([1, -1, 1, 1, 0]))
    data = json.loads(json.dumps(result.to_dict()))
    assert data["wins"] == 3 and data["losses"] == 1 and data["ties"] == 1
    assert isinstance(data["interval"], list) and len(data["interval"]) == 2
    assert set(data) == {"wins", "losses", "ties", "win_rate", "interval", "p_value",
                         "always_valid_p", "significant", "winner"}
    assert compare([]).to_dict()["interval"] is None


def test_win_rate_and_interval_contain_the_truth():
    rng = np.random.default_rng(1)
    outcomes = _stream(rng, 2000, win=0.7, tie=0.0)
    result = compare(outcomes)
    low, high = result.interval
    assert low <= result.win_rate <= high
    assert low <= 0.7 <= high
    # Close to the normal-approximation interval of a proportion.
    half = 1.96 * math.sqrt(0.7 * 0.3 / 2000)
    assert high - low == pytest.approx(2 * half, rel=0.15)
    assert result.significant and result.winner == 0


def test_bootstrap_rate_interval():
    assert bootstrap_rate_interval(30, 100, seed=3) == bootstrap_rate_interval(30, 100, seed=3)
    low, high = bootstrap_rate_interval(30, 100, level=0.9)
    assert low < 0.3 < high
    wide = bootstrap_rate_interval(30, 100, level=0.99)
    assert wide[0] <= low and wide[1] >= high
    assert bootstrap_rate_interval(0, 10) == (0.0, 0.0)
    assert bootstrap_rate_interval(10, 10) == (1.0, 1.0)
    with pytest.raises(ValueError):
        bootstrap_rate_interval(0, 0)
    with pytest.raises(ValueError):
        bootstrap_rate_interval(11, 10)


def test_mean_confidence_bounds_hand_computed():
    low, high = mean_confidence_bounds(np.array([1.0, 2.0, 3.0, 4.0]))
    half = 1.959963985 * math.sqrt(5 / 3) / 2
    assert (low, high) == pytest.approx((2.5 - half, 2.5 + half))
    assert mean_confidence_bounds(np.array([4.0])) == (4.0, 4.0)
    narrow = mean_confidence_bounds(np.array([1.0, 2.0, 3.0, 4.0]), level=0.5)
    assert low < narrow[0] < 2.5 < narrow[1] < high
    with pytest.raises(ValueError):
        mean_confidence_bounds(np.array([]))


def test_clear_effect_becomes_significant_quickly():
    for seed in range(5):
        outcomes = _stream(np.random.default_rng(seed), 1000, win=0.75, tie=0.3)
        first = impressions_to_significance(outcomes)
        assert first is not None and first <= 300
        result = compare(outcomes[:first])
        assert result.significant and result.winner == 0
        assert not compare(outcomes[:first - 1]).significant
        mirrored = compare(-outcomes)
        assert mirrored.significant and mirrored.winner == 1


def test_impressions_to_significance_hand_computed():
    # h = 1 and only wins: Lambda_n = 2**n / (n + 1) first reaches 20 at n = 8 (256 / 9).
    outcomes = np.array([0, 1] * 8 + [1] * 4)
    assert impressions_to_significance(outcomes, mixture=1.0) == 16  # ties count as impressions
    assert impressions_to_significance(outcomes, mixture=1.0, every=5) == 20
    assert impressions_to_significance(outcomes, mixture=1.0, every=3) == 18
    assert impressions_to_significance(outcomes, mixture=1.0, every=25) is None
    assert impressions_to_significance(outcomes[:15], mixture=1.0) is None
    assert impressions_to_significance([], mixture=1.0) is None
    with pytest.raises(ValueError):
        impressions_to_significance(outcomes, every=0)


def test_winner_is_decided_when_the_test_first_rejects():
    # Significant for the first arm early on; later losses cannot undo an always-valid decision.
    outcomes = np.array([1] * 60 + [-1] * 80)
    result = compare(outcomes)
    assert result.win_rate < 0.5
    assert result.significant and result.winner == 0


def _naive_sign_test_p(wins: np.ndarray, decided: np.ndarray) -> np.ndarray:
    """Exact two-sided sign test p-values, vectorised (symmetric binomial)."""
    return np.minimum(1.0, 2 * stats.binom.cdf(np.minimum(wins, decided - wins), decided, 0.5))


def test_peeking_keeps_false_positives_below_alpha():
    """A/A: 300 null experiments, looked at after every 100 of 3000 outcomes."""
    rng = np.random.default_rng(2024)
    experiments, length, every, alpha = 300, 3000, 100, 0.05
    outcomes = _stream(rng, (experiments, length), win=0.5, tie=0.4)
    sequential = sum(impressions_to_significance(row, alpha=alpha, every=every) is not None
                     for row in outcomes)
    # The naive alternative: an exact sign test at every look, stopping when p <= alpha.
    looks = slice(every - 1, None, every)
    wins = np.cumsum(outcomes == 1, axis=1)[:, looks]
    decided = np.cumsum(outcomes != 0, axis=1)[:, looks]
    for w, d in [(40, 100), (55, 100), (61, 100), (9, 30)]:
        assert _naive_sign_test_p(np.array(w), np.array(d)) == pytest.approx(
            stats.binomtest(w, d, 0.5).pvalue)
    naive = int((_naive_sign_test_p(wins, decided) <= alpha).any(axis=1).sum())
    upper = stats.binom.ppf(0.99, experiments, alpha)
    assert sequential <= upper
    assert naive > upper  # peeking at a fixed-horizon test inflates false positives


def test_the_sign_test_is_scipys_exact_binomial_test():
    for n in (1, 2, 3, 10, 11, 57, 400, 1001):
        for wins in sorted({0, 1, n // 3, n // 2, (n + 1) // 2, n - 1, n}):
            assert sign_test(wins, n) == pytest.approx(stats.binomtest(wins, n, 0.5).pvalue,
                                                       rel=1e-9, abs=1e-300), (wins, n)
    assert sign_test(0, 0) == 1.0


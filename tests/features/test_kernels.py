"""The compiled loops of the per-search path (reranker/features/kernels.py) give the values the
numpy expressions they replace give for float64 input, on random matrices and on the edge
cases (NaN, infinities, constant columns, ties, scores out of order); the perturbed pairs'
chances equal those counted by enumerating every pairing and coin; and bad shapes, page
sizes and coins are refused with a clear error instead of reaching the compiled code, which
checks no bounds."""

import itertools
import math

import numpy as np
import pytest
from reranker_plugins.preference_perceptron import PreferencePerceptron

from reranker.backends import Candidates
from reranker.features import kernels
from reranker.features.extraction import FeatureSpec, PerQueryMinMax, engine_scores


def numpy_minmax(X, keep):
    """Per-query min-max as numpy writes it: NaN spreads over its column, a constant column
    becomes 0."""
    lo, hi = X.min(axis=0), X.max(axis=0)
    span = np.maximum(hi - lo, np.nextafter(0.0, 1.0))
    out = (X - lo) / span
    out[:, keep] = X[:, keep]
    return out


def numpy_engine_scores(scores):
    if len(scores) > 1:
        rise = float(np.diff(scores).max())
        if rise > 0 and rise > 1e-6 * max(1.0, float(np.abs(scores).max())):
            return np.arange(len(scores), 0, -1, dtype=np.float64)
    return scores


def awkward_matrix(rng, n, m):
    X = rng.normal(size=(n, m)) * rng.choice([1e-3, 1.0, 1e6], size=m)
    for j in rng.choice(m, size=rng.integers(0, m + 1), replace=False):
        kind = rng.integers(4)
        if kind == 0:
            X[:, j] = rng.normal()  # constant
        elif kind == 1:
            X[rng.integers(n), j] = np.inf
        elif kind == 2:
            X[rng.integers(n), j] = -np.inf
        else:
            X[rng.integers(n), j] = np.nan
    return X


@pytest.mark.parametrize("order", ["C", "F"])
def test_minmax_matches_numpy(order):
    rng = np.random.default_rng(3)
    for _ in range(300):
        n, m = int(rng.integers(1, 40)), int(rng.integers(1, 8))
        X = np.asarray(awkward_matrix(rng, n, m), order=order)
        keep = rng.random(m) < 0.3
        before = X.copy()
        with np.errstate(invalid="ignore"):
            expected = numpy_minmax(X, keep)
        got = PerQueryMinMax().transform(X, keep)
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(X, before)  # the input is never written


def test_engine_column_matches_numpy():
    rng = np.random.default_rng(4)
    cases = [np.array([]), np.array([3.0]), np.array([1.0, 1.0]), np.array([7.0, 7.0000005, 6.0]),
             np.array([1.0, np.nan, 0.5]), np.array([np.inf, 1.0, 2.0]),
             np.array([1.0, np.inf, np.inf])]
    for _ in range(300):
        scores = np.sort(rng.gamma(2.0, 3.0, size=int(rng.integers(2, 30))))[::-1].copy()
        if rng.random() < 0.5:
            i = int(rng.integers(1, len(scores)))
            scores[i] = scores[i - 1] + rng.choice([1e-9, 1e-3, 1.0])
        cases.append(scores)
    for scores in cases:
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(engine_scores(scores), numpy_engine_scores(scores))


def candidates(rng, n, n_fields, n_numeric):
    return Candidates(ids=[f"d{i}" for i in range(n)],
                      scores=np.sort(rng.gamma(2.0, 3.0, size=n))[::-1],
                      field_scores=rng.gamma(1.5, 2.0, size=(n, n_fields)),
                      numeric=np.where(rng.random((n, n_numeric)) < 0.2, np.nan,
                                       rng.normal(size=(n, n_numeric)) * 1e13),
                      load_sources=lambda indices: [{} for _ in indices])


def test_raw_features_match_the_numpy_expressions():
    rng = np.random.default_rng(5)
    spec = FeatureSpec(fields=("title", "body"), numeric_fields=("a", "b"), missing_value=-1.0,
                       click_features=True)
    for n in (0, 1, 2, 17, 100):
        c = candidates(rng, n, 2, 2)
        clicks = rng.normal(size=(n, 2))
        X = spec.build(c, clicks)
        expected = np.column_stack([
            numpy_engine_scores(c.scores), c.field_scores,
            np.where(np.isfinite(c.numeric), c.numeric, -1.0), clicks]).reshape(n, 7)
        np.testing.assert_array_equal(X, np.clip(expected, -spec.LIMIT, spec.LIMIT))


def test_a_nan_is_refused_wherever_it_is():
    rng = np.random.default_rng(6)
    spec = FeatureSpec(fields=("title",), click_features=True)
    c = candidates(rng, 5, 1, 0)
    c.scores[1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        spec.build(c, np.zeros((5, 2)))
    c = candidates(rng, 5, 1, 0)
    clicks = np.zeros((5, 2))
    clicks[4, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        spec.build(c, clicks)


def test_shapes_are_checked_before_the_compiled_code():
    rng = np.random.default_rng(7)
    spec = FeatureSpec(fields=("title", "body"), click_features=True)
    c = candidates(rng, 4, 1, 0)  # one field score column where two are searched
    with pytest.raises(ValueError, match=r"field_scores have shape \(4, 1\), expected \(4, 2\)"):
        spec.build(c, np.zeros((4, 2)))
    with pytest.raises(ValueError, match="click features have shape"):
        spec.build(candidates(rng, 4, 2, 0), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="mask"):
        PerQueryMinMax().transform(np.zeros((3, 4)), np.zeros(3, dtype=bool))
    with pytest.raises(ValueError, match=r"one per hit, got shape \(2, 2\)"):
        engine_scores(np.ones((2, 2)))
    # a spec whose numeric fields grew after its names were read: more columns than names
    spec = FeatureSpec(fields=("title",), numeric_fields=["a"])
    assert len(spec.names) == 3
    spec.numeric_fields.append("b")
    wide = Candidates(ids=["x", "y"], scores=np.ones(2), field_scores=np.ones((2, 1)),
                      numeric=np.ones((2, 2)), load_sources=lambda indices: [])
    with pytest.raises(ValueError, match="4 feature columns for 3 feature names"):
        spec.build(wide)


def test_page_sizes_and_coins_are_checked():
    learner = PreferencePerceptron(swap_probability=0.5)
    learner.initialize(2)
    X = np.random.default_rng(9).normal(size=(5, 2))
    result = learner.rank(X, -3, np.random.default_rng(1))
    assert sorted(result.ranking.tolist()) == list(range(5))
    assert result.shown_propensities.shape == (0,) and not result.propensities.any()
    assert not learner.marginals(X, -3).any() and learner.position_marginals(X, -3).shape == (5, 0)

    class FewCoins:
        def random(self, size):
            return np.zeros(size - 1)

    with pytest.raises(ValueError, match="coins"):
        learner.rank(X, 4, FewCoins())


def test_without_a_writable_cache_the_kernels_compile_in_each_process(monkeypatch):
    calls = []

    def njit(*args, **options):
        calls.append(options)
        if options.get("cache"):
            def decorate(function):
                raise RuntimeError("cannot cache function: no locator available")
            return decorate
        return args[0]

    monkeypatch.setattr(kernels, "njit", njit)

    def double(x):
        return 2 * x

    assert kernels._compiled(double) is double
    assert calls == [{"cache": True}, {}]


def enumerated_chances(best, k, p):
    """Every pairing (1/2 each) and every coin of its pairs, the shown list's chance counted
    into each candidate's chance of being shown and each position's chance of each result."""
    n = len(best)
    end = min(k, n - 1)
    shown, at = np.zeros(n), np.zeros((n, k))
    for offset in (0, 1):
        uppers = list(range(offset, end, 2))
        for coins in itertools.product((False, True), repeat=len(uppers)):
            ranking = list(best)
            chance = 0.5
            for upper, swap in zip(uppers, coins, strict=True):
                chance *= p if swap else 1 - p
                if swap:
                    ranking[upper], ranking[upper + 1] = ranking[upper + 1], ranking[upper]
            for r, item in enumerate(ranking[:k]):
                shown[item] += chance
                at[item, r] += chance
    return shown, at


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_perturbed_pairs_chances_equal_the_enumeration(p):
    rng = np.random.default_rng(8)
    learner = PreferencePerceptron(swap_probability=p)
    for n, k in [(1, 1), (2, 1), (2, 2), (3, 2), (5, 3), (6, 6), (7, 4), (8, 10)]:
        X = rng.normal(size=(n, 3))
        learner.initialize(3)
        learner.w_ = rng.normal(size=3)
        best = np.argsort(-(X @ learner.weights()), kind="stable")
        shown, at = enumerated_chances(best.tolist(), min(k, n), p)
        np.testing.assert_allclose(learner.marginals(X, k), shown, atol=1e-12)
        np.testing.assert_allclose(learner.position_marginals(X, k), at, atol=1e-12)
        for _ in range(20):  # every drawn page logs the chances of what it shows
            result = learner.rank(X, k, rng)
            top = result.ranking[:min(k, n)]
            np.testing.assert_allclose(result.propensities, shown, atol=1e-12)
            np.testing.assert_allclose(result.shown_propensities,
                                       at[top, np.arange(len(top))], atol=1e-12)
            assert math.isclose(result.log_prob, learner.log_probability(X, top))
            assert sorted(result.ranking.tolist()) == list(range(n))


def test_perturbed_pairs_draw_the_page_from_the_coins():
    """The first coin picks the pairing (below 1/2: (2, 3), (4, 5), ...), each further coin
    one of its pairs in order, swapped below p; ties keep the candidates' order."""
    learner = PreferencePerceptron(swap_probability=0.3)
    learner.initialize(1)
    learner.w_ = np.array([1.0])
    X = np.array([[5.0], [4.0], [4.0], [3.0], [2.0], [1.0], [0.0]])

    class Coins:
        def __init__(self, values):
            self.values = np.array(values)

        def random(self, size):
            assert size == len(self.values)
            return self.values

    # n_shown 5: pairing 0 has the pairs at 0, 2, 4 (the last reaching below the page)
    page = learner.rank(X, 5, Coins([0.9, 0.1, 0.5, 0.2]))
    assert page.ranking.tolist() == [1, 0, 2, 3, 5, 4, 6]
    assert page.context["pair_offset"] == 0 and page.context["swapped"] == [0, 4]
    page = learner.rank(X, 5, Coins([0.2, 0.9, 0.1, 0.7]))
    assert page.ranking.tolist() == [0, 1, 2, 4, 3, 5, 6]
    assert page.context["pair_offset"] == 1 and page.context["swapped"] == [3]

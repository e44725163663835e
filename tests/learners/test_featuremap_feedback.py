import numpy as np
import pytest

from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import (
    Feedback,
    feedback_from_clicks,
    improved_ranking,
    pair_swapped_ranking,
    skip_above_pairs,
)


def test_phi_is_discounted_sum_of_top_k():
    X = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [5.0, 5.0]])
    fmap = FeatureMap(depth=2, discount="log2")
    # phi = 1/log2(2) * x_2 + 1/log2(3) * x_0; x_1 and x_3 fall past the cut-off.
    expected = np.array([2.0, 2.0]) + np.array([1.0, 0.0]) / np.log2(3)
    np.testing.assert_allclose(fmap.phi(X, np.array([2, 0, 1, 3])), expected)


@pytest.mark.parametrize("discount, g", [("log2", [1, 1 / np.log2(3), 0.5]),
                                         ("reciprocal", [1, 1 / 2, 1 / 3]),
                                         ("none", [1, 1, 1])])
def test_discounts(discount, g):
    np.testing.assert_allclose(FeatureMap(3, discount).discounts(10), g)
    assert len(FeatureMap(3, discount).discounts(2)) == 2


def test_phi_difference_matches_phi():
    rng = np.random.default_rng(0)
    X = rng.random((7, 3))
    fmap = FeatureMap(depth=4)
    a, b = rng.permutation(7), rng.permutation(7)
    np.testing.assert_allclose(fmap.phi_difference(X, a, b), fmap.phi(X, a) - fmap.phi(X, b))


@pytest.mark.parametrize("depth", [4, 12])
@pytest.mark.parametrize("discount", ["log2", "reciprocal", "none"])
def test_same_phi_agrees_with_phi(discount, depth):
    """same_phi(a, b) holds exactly when phi(X, a) == phi(X, b) for generic features: on
    rankings that differ by a prepended click, a swapped pair or a shuffle, above and below
    the cut-off, and with a cut-off beyond the last candidate."""
    rng = np.random.default_rng(5)
    fmap = FeatureMap(depth=depth, discount=discount)
    X = rng.normal(size=(9, 3))
    seen = set()
    for _ in range(300):
        a = rng.permutation(9)
        b = a.copy()
        kind = rng.integers(3)
        if kind == 0:  # swap one pair of adjacent positions
            i = rng.integers(8)
            b[i], b[i + 1] = b[i + 1], b[i]
        elif kind == 1:  # prepend some clicked results
            b = improved_ranking(a, rng.choice(a, size=rng.integers(1, 7), replace=False))
        else:
            b = rng.permutation(9)
        same = fmap.same_phi(a, b)
        assert same == bool(np.allclose(fmap.phi(X, a), fmap.phi(X, b))), (a, b)
        seen.add(same)
    # without discounts and a cut-off past every candidate, every ordering has the same phi
    assert seen == ({True} if discount == "none" and depth > 9 else {True, False})


def test_argmax_of_utility_is_sort_by_score():
    rng = np.random.default_rng(1)
    X, w = rng.random((6, 3)), rng.normal(size=3)
    fmap = FeatureMap(depth=6)
    best = np.argsort(-(X @ w))
    for _ in range(200):
        assert fmap.utility(w, X, rng.permutation(6)) <= fmap.utility(w, X, best) + 1e-12


def test_bad_feature_map_parameters():
    with pytest.raises(ValueError, match="depth"):
        FeatureMap(depth=0)
    with pytest.raises(ValueError, match="discount"):
        FeatureMap(depth=3, discount="cubic")


def test_improved_ranking_prepends_clicks_in_shown_order():
    # Coactive Learning, section 3.2: clicked results (in shown order) go on top.
    y = np.array([4, 2, 0, 3, 1])
    np.testing.assert_array_equal(improved_ranking(y, np.array([1, 0])), [0, 1, 4, 2, 3])


def test_feedback_orders_clicks_by_position_and_detects_no_information():
    y = np.array([4, 2, 0, 3, 1])
    fb = feedback_from_clicks(y, 3, np.array([0, 2]))
    np.testing.assert_array_equal(fb.clicked, [2, 0])
    np.testing.assert_array_equal(fb.improved, [2, 0, 4, 3, 1])
    assert fb.informative
    assert not feedback_from_clicks(y, 3, np.array([4, 2])).informative  # top two clicked
    assert not feedback_from_clicks(y, 3, np.array([], dtype=int)).informative


def test_feedback_with_an_explicit_improved_ranking():
    fb = Feedback(ranking=np.array([0, 1, 2]), n_shown=3, improved=np.array([2, 0, 1]))
    assert fb.informative and fb.clicked.size == 0


def test_skip_above_pairs():
    y = np.array([4, 2, 0, 3, 1])
    fb = feedback_from_clicks(y, 5, np.array([0, 1]))
    assert sorted(skip_above_pairs(fb)) == [(0, 2), (0, 4), (1, 2), (1, 3), (1, 4)]


@pytest.mark.parametrize("clicked, n_shown, expected", [
    ([3], 5, [3, 4, 2, 1, 0, 5]),  # lower of pair (1, 2) clicked, upper not: swapped
    ([3, 1], 5, [3, 4, 1, 2, 0, 5]),  # both pairs
    ([4, 3], 5, None),  # both results of the pair clicked: no preference
    ([4], 5, None),  # only an upper result clicked
    ([0], 5, None),  # an upper result clicked (the fifth has no partner on a page of five)
    ([5], 6, [4, 3, 2, 1, 5, 0]),  # the sixth is the lower of pair (5, 6)
    ([2], 2, None),  # clicks past the shown list are not pairs
])
def test_pair_swapped_ranking(clicked, n_shown, expected):
    ranking = np.array([4, 3, 2, 1, 0, 5])
    fb = feedback_from_clicks(ranking, n_shown, np.array(clicked))
    improved = pair_swapped_ranking(fb)
    if expected is None:
        assert improved is None
    else:
        np.testing.assert_array_equal(improved, expected)
    # the same from a feedback without recorded positions, as a plugin may build it
    bare = Feedback(ranking=ranking, n_shown=n_shown, clicked=np.array(clicked))
    again = pair_swapped_ranking(bare)
    assert (again is None) == (improved is None)
    if improved is not None:
        np.testing.assert_array_equal(again, improved)
    np.testing.assert_array_equal(ranking, [4, 3, 2, 1, 0, 5])  # input untouched


def test_improved_ranking_agrees_with_the_fast_path():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 30))
        y = rng.permutation(n)
        clicked = rng.choice(n, size=int(rng.integers(0, min(n, 6) + 1)), replace=False)
        fb = feedback_from_clicks(y, 10, clicked)
        np.testing.assert_array_equal(fb.improved, improved_ranking(y, clicked))
        assert fb.informative == (not np.array_equal(fb.improved, y))
        np.testing.assert_array_equal(y[fb.positions], fb.clicked)

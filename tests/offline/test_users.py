"""Simulated users behave as docs/algorithms.md says."""

import numpy as np
import pytest

from reranker.offline.click_models import cascade_model
from reranker.offline.users import (
    USER_DEPTH,
    ExpectedAlphaInformativeUser,
    NoisyUser,
    StrictAlphaInformativeUser,
    make_user,
    user_utility,
)


def random_query(rng, n=15):
    utility = rng.normal(size=n)
    labels = rng.integers(0, 3, size=n)
    ideal = user_utility(utility, np.argsort(-utility))
    return utility, labels, ideal


@pytest.mark.parametrize("alpha", [0.1, 0.5, 1.0])
def test_strict_feedback_is_alpha_informative(alpha):
    rng = np.random.default_rng(0)
    user = StrictAlphaInformativeUser(alpha)
    for _ in range(300):
        utility, labels, ideal = random_query(rng)
        y = rng.permutation(len(utility))
        fb = user.respond(y, 10, labels, utility, ideal, rng)
        gain = user_utility(utility, fb.improved) - user_utility(utility, y)
        assert gain >= alpha * (ideal - user_utility(utility, y)) - 1e-9
        assert sorted(fb.improved.tolist()) == list(range(len(utility)))  # a permutation
        # the moved documents count as clicks, listed in the order they were shown
        assert sorted(fb.improved[:USER_DEPTH].tolist()) == sorted(fb.clicked.tolist())
        assert (np.diff(fb.positions) > 0).all()
        np.testing.assert_array_equal(y[fb.positions], fb.clicked)


def test_strict_user_goes_no_deeper_than_needed():
    rng = np.random.default_rng(1)
    for _ in range(200):
        utility, labels, ideal = random_query(rng)
        y = rng.permutation(len(utility))
        fb = StrictAlphaInformativeUser(0.5).respond(y, 10, labels, utility, ideal, rng)
        if not fb.informative:
            continue
        depth = int(fb.positions.max()) + 1  # how far down the user went
        if depth > USER_DEPTH:  # one step less would not have been enough
            prefix = y[: depth - 1]
            best = prefix[np.argsort(-utility[prefix], kind="stable")[:USER_DEPTH]]
            gain = user_utility(utility, best) - user_utility(utility, y)
            assert gain < 0.5 * (ideal - user_utility(utility, y))


def test_an_optimal_ranking_gets_no_feedback():
    rng = np.random.default_rng(2)
    utility, labels, ideal = random_query(rng)
    y = np.argsort(-utility)
    assert not StrictAlphaInformativeUser(1.0).respond(y, 10, labels, utility, ideal,
                                                       rng).informative


def test_expected_feedback_is_alpha_informative_in_expectation():
    rng = np.random.default_rng(3)
    utility, labels, ideal = random_query(rng, n=12)
    y = rng.permutation(12)
    user = ExpectedAlphaInformativeUser(0.5)
    gains = [user_utility(utility, user.respond(y, 10, labels, utility, ideal, rng).improved)
             - user_utility(utility, y) for _ in range(20000)]
    target = 0.5 * (ideal - user_utility(utility, y))
    assert abs(np.mean(gains) - target) < 0.05 * abs(target) + 0.01


def test_noisy_user_puts_the_best_labels_of_the_inspected_depth_on_top():
    labels = np.array([0, 2, 0, 1, 0, 2, 0, 0, 1, 2, 2, 2])
    y = np.arange(12)
    fb = NoisyUser(depth=10).respond(y, 10, labels, np.zeros(12), 0.0, None)
    # inspected: positions 0-9; best five by label (ties in shown order): 1, 5, 9, 3, 8
    np.testing.assert_array_equal(fb.improved[:5], [1, 5, 9, 3, 8])
    np.testing.assert_array_equal(fb.improved[5:], [0, 2, 4, 6, 7, 10, 11])


@pytest.mark.parametrize("name", ["perfect", "navigational", "informational"])
def test_cascade_click_rates_match_the_model(name):
    model = cascade_model(name, 3)
    rng = np.random.default_rng(4)
    labels = np.array([2, 0, 1, 2])
    clicks = np.array([model.clicks(labels, rng) for _ in range(40000)])
    # the first result is always examined: P(click) = P(click | label 2)
    assert abs(clicks[:, 0].mean() - model.click_probs[2]) < 0.01
    # the second is examined unless the user clicked the first and stopped
    examined = 1 - model.click_probs[2] * model.stop_probs[2]
    assert abs(clicks[:, 1].mean() - examined * model.click_probs[0]) < 0.01


def test_stop_at_every_position_variant_stops_without_clicks():
    labels = np.array([0, 0, 0])
    papers = make_user("navigational", 3).model
    reference = make_user("navigational-every", 3).model
    rng = np.random.default_rng(5)
    deep_papers = np.mean([papers.clicks(labels, rng)[2] for _ in range(40000)])
    deep_reference = np.mean([reference.clicks(labels, rng)[2] for _ in range(40000)])
    # papers: position 3 reached unless a click and a stop came first (rare for label 0)
    assert deep_papers > 0.045
    assert abs(deep_reference - 0.05 * 0.8 ** 2) < 0.006


def test_make_user_errors_name_the_model():
    for spec in ("clicky", "strict_alpha:2", "noisy:0", "perfect:3"):
        with pytest.raises(ValueError, match="click model"):
            make_user(spec, 3)
    assert make_user("pbm:0.5", 5).name == "pbm:0.5"

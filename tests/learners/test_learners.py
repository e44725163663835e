"""Each learner's update rule against a hand computation from the papers' formulas."""

import math

import numpy as np
import pytest
from reranker_plugins.batch_preference_perceptron import BatchPreferencePerceptron
from reranker_plugins.convex_preference_perceptron import ConvexPreferencePerceptron
from reranker_plugins.exponentiated_preference_perceptron import ExponentiatedPreferencePerceptron
from reranker_plugins.greedy_klrank import GreedyKLRank
from reranker_plugins.noregret_klrank import NoRegretKLRank
from reranker_plugins.online_ranknet import OnlineRankNet
from reranker_plugins.preference_perceptron import PreferencePerceptron
from reranker_plugins.second_order_preference_perceptron import (
    SecondOrderPreferencePerceptron,
    project_in_metric,
)

from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import Feedback, feedback_from_clicks
from reranker.learners.policies import (
    gumbel_top_k,
    plackett_luce_log_prob,
    plackett_luce_prefix_log_prob,
)

X = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
G2 = 1 / math.log2(3)
# Presented y = [0, 1, 2] (all-zero model, backend order); a click on candidate 2 gives
# ybar = [2, 0, 1]. At depth 2: phi(ybar) = x2 + g2 x0, phi(y) = x0 + g2 x1.
PHI_BAR = np.array([0.5 + G2, 0.5])
PHI_Y = np.array([1.0, G2])
D = PHI_BAR - PHI_Y
FMAP = FeatureMap(depth=2)


def click(learner, candidate, X=X):
    ranking = learner.rank(X, 3, np.random.default_rng(0)).ranking
    return learner.update(X, feedback_from_clicks(ranking, 3, np.array([candidate])))


def test_batch_perceptron_applies_the_sum_every_batch():
    learner = BatchPreferencePerceptron(feature_map=FMAP, batch_size=2, swap_probability=0.0)
    assert click(learner, 2)
    np.testing.assert_array_equal(learner.w_, [0, 0])  # presents with the last applied w
    np.testing.assert_allclose(learner.pending_, D)
    assert click(learner, 2)
    np.testing.assert_allclose(learner.w_, 2 * D)  # Algorithm 2: w_2 = w_1 + D_1 + D_2
    np.testing.assert_array_equal(learner.pending_, [0, 0])


def test_exponentiated_perceptron_first_step():
    learner = ExponentiatedPreferencePerceptron(feature_map=FMAP, swap_probability=0.0)
    click(learner, 2)
    S = max(np.abs(PHI_BAR).max(), np.abs(PHI_Y).max())
    eta = 1 / (2 * S * math.sqrt(1))
    we = 0.25 * np.exp(eta * np.concatenate([D, -D]))
    we /= we.sum()
    np.testing.assert_allclose(np.exp(learner.log_we_), we)
    np.testing.assert_allclose(learner.weights(), we[:2] - we[2:])
    assert learner.S_ == pytest.approx(S) and learner.t_ == 1


def test_convex_perceptron_steps_and_projects():
    learner = ConvexPreferencePerceptron(feature_map=FMAP, B=10.0, swap_probability=0.0)
    click(learner, 2)
    np.testing.assert_allclose(learner.w_, D)  # eta_1 = 1, inside the ball
    small = ConvexPreferencePerceptron(feature_map=FMAP, B=0.1, swap_probability=0.0)
    click(small, 2)
    np.testing.assert_allclose(small.w_, D * 0.1 / np.linalg.norm(D))
    # second step: eta_2 = 1/sqrt(2) on the new D, then project again
    w1 = small.w_.copy()
    ranking = small.rank(X, 3).ranking
    fb = feedback_from_clicks(ranking, 3, np.array([ranking[2]]))
    small.update(X, fb)
    wbar = w1 + FMAP.phi_difference(X, fb.improved, fb.ranking) / math.sqrt(2)
    np.testing.assert_allclose(small.w_, wbar * min(1, 0.1 / np.linalg.norm(wbar)))


def test_second_order_perceptron_first_step():
    learner = SecondOrderPreferencePerceptron(feature_map=FMAP, gamma=1.0, epsilon=1.0, B=10.0,
                                              swap_probability=0.0)
    click(learner, 2)
    A = np.eye(2) + np.outer(D, D)  # A_1 = eps I + gamma D D^T
    np.testing.assert_allclose(learner.A_, A)
    np.testing.assert_allclose(learner.A_inv_, np.linalg.inv(A))  # Sherman-Morrison
    np.testing.assert_allclose(learner.w_, np.linalg.solve(A, D))  # wbar, inside the ball
    # D is an eigenvector of A, so the A-norm projection of wbar scales it to radius B
    tight = SecondOrderPreferencePerceptron(feature_map=FMAP, B=0.05, swap_probability=0.0)
    click(tight, 2)
    wbar = np.linalg.solve(A, D)
    np.testing.assert_allclose(tight.w_, wbar * 0.05 / np.linalg.norm(wbar))


PERCEPTRONS = [PreferencePerceptron, BatchPreferencePerceptron, ExponentiatedPreferencePerceptron,
               ConvexPreferencePerceptron, SecondOrderPreferencePerceptron]


@pytest.mark.parametrize("cls", PERCEPTRONS)
def test_perceptrons_ignore_feedback_the_feature_map_cannot_see(cls):
    """A swapped pair below ``depth``, or any reordering with ``discount: none``, leaves
    phi unchanged (D = 0): no step, and no step counter moves."""
    X = np.random.default_rng(3).random((24, 3))
    y = np.arange(24)
    learner = cls(feature_map=FeatureMap(depth=10), swap_probability=0.5)
    learner.initialize(3)
    before = learner.get_state()
    # the pair of 0-based positions (12, 13) lies below depth 10: a click on its lower result
    assert not learner.update(X, feedback_from_clicks(y, 20, y[[13]]))
    # with no discounts, swapping a pair inside depth leaves phi unchanged as well
    flat = cls(feature_map=FeatureMap(depth=10, discount="none"), swap_probability=0.5)
    flat.initialize(3)
    assert not flat.update(X, feedback_from_clicks(y, 20, y[[3]]))
    after = learner.get_state()
    assert before.keys() == after.keys()
    for key in before:
        np.testing.assert_array_equal(before[key], after[key])
    # at depth 9 the pair (8, 9) straddles the cut-off (g_9 against 0): that is a step
    odd = cls(feature_map=FeatureMap(depth=9), swap_probability=0.5)
    odd.initialize(3)
    assert odd.update(X, feedback_from_clicks(y, 20, y[[9]]))
    # and without perturbation the prepend rule skips a reordering phi cannot see
    prepend = cls(feature_map=FeatureMap(depth=10, discount="none"), swap_probability=0.0)
    prepend.initialize(3)
    assert not prepend.update(X, feedback_from_clicks(y, 20, y[[4, 7]]))
    assert prepend.update(X, feedback_from_clicks(y, 20, y[[12]]))


def test_metric_projection_is_the_constrained_minimum():
    rng = np.random.default_rng(0)
    M = rng.normal(size=(4, 4))
    A = M @ M.T + 0.1 * np.eye(4)
    wbar = rng.normal(size=4) * 3
    u = project_in_metric(A, wbar, 1.0)
    assert np.linalg.norm(u) == pytest.approx(1.0, abs=1e-9)
    best = (wbar - u) @ A @ (wbar - u)
    points = rng.normal(size=(20000, 4))
    points /= np.linalg.norm(points, axis=1)[:, None] / rng.random((20000, 1)) ** 0.25
    diffs = wbar - points
    assert (np.einsum("ij,jk,ik->i", diffs, A, diffs) >= best - 1e-9).all()


def kl_cost(theta, X, item):
    s = X @ theta
    return -s[item] + math.log(np.exp(s).sum())


def ranknet_loss(theta, X, item):
    s = X @ theta
    n = len(s)
    return sum(-s[item] + math.log(math.exp(s[item]) + math.exp(s[i]))
               for i in range(n) if i != item) / (n - 1)


def numeric_gradient(loss, theta, X, item, h=1e-6):
    grad = np.zeros_like(theta)
    for j in range(len(theta)):
        e = np.zeros_like(theta)
        e[j] = h
        grad[j] = (loss(theta + e, X, item) - loss(theta - e, X, item)) / (2 * h)
    return grad


@pytest.mark.parametrize("cls, loss", [(GreedyKLRank, kl_cost), (NoRegretKLRank, kl_cost),
                                       (OnlineRankNet, ranknet_loss)])
def test_gradients_match_the_losses(cls, loss):
    rng = np.random.default_rng(1)
    learner = cls()
    learner.initialize(3)
    learner.theta_ = rng.normal(size=3)
    Xr = rng.random((6, 3))
    for item in range(6):
        np.testing.assert_allclose(learner._gradient(Xr, np.array([item])),
                                   numeric_gradient(loss, learner.theta_, Xr, item), atol=1e-6)
    both = learner._gradient(Xr, np.array([1, 4]))
    np.testing.assert_allclose(both, (numeric_gradient(loss, learner.theta_, Xr, 1)
                                      + numeric_gradient(loss, learner.theta_, Xr, 4)) / 2,
                               atol=1e-6)


def test_gper_steps_cycles_and_balls_by_hand():
    learner = GreedyKLRank(a=10.0)
    learner.initialize(2)
    # Round 1 of cycle 1: r_1 = 10, F = 1, alpha_1 = 2 r_1 / (2 sqrt 2 F), k = 1.
    assert click(learner, 0)
    grad = np.array([0.5, 0.5]) - X[0]  # uniform softmax at theta = 0
    theta1 = -(20 / (2 * math.sqrt(2))) * grad
    np.testing.assert_allclose(learner.theta_, theta1)
    assert (learner.cycle_, learner.round_) == (1, 1)
    # Cycle 1 has length 1: the next round starts cycle 2 with r_2 = 10 * 2^(1/4).
    click(learner, 1)
    r2 = 10 * 2 ** 0.25
    s = X @ theta1
    p = np.exp(s - s.max())
    p /= p.sum()
    theta2 = theta1 - (2 * r2 / (2 * math.sqrt(2))) * (p @ X - X[1])
    if np.linalg.norm(theta2) > r2:
        theta2 *= r2 / np.linalg.norm(theta2)
    np.testing.assert_allclose(learner.theta_, theta2)
    assert (learner.cycle_, learner.round_) == (2, 1)
    click(learner, 1)  # k = 2 of cycle 2: the step shrinks by 1/sqrt(2)
    assert (learner.cycle_, learner.round_) == (2, 2)
    click(learner, 1)
    assert (learner.cycle_, learner.round_) == (3, 1)


def test_gper_projects_onto_the_ball():
    learner = GreedyKLRank(a=0.01)
    learner.initialize(2)
    for _ in range(50):  # the steps add up to far more than the small radius
        click(learner, 0)
        assert np.linalg.norm(learner.theta_) <= learner.radius() + 1e-12
    assert learner.cycle_ == 6
    assert np.linalg.norm(learner.theta_) == pytest.approx(0.01 * 32 ** 0.25)


def test_klrank_variants_share_updates_but_not_presentation():
    greedy, noregret = GreedyKLRank(), NoRegretKLRank()
    for learner in (greedy, noregret):
        learner.initialize(2)
    rng = np.random.default_rng(3)
    for _ in range(30):
        Xr = rng.random((5, 2))
        fb = Feedback(ranking=np.arange(5), n_shown=5, clicked=np.array([rng.integers(5)]))
        greedy.update(Xr, fb)
        noregret.update(Xr, fb)
    np.testing.assert_array_equal(greedy.theta_, noregret.theta_)
    rankings = {tuple(noregret.rank(Xr, 5, rng).ranking) for _ in range(50)}
    assert len(rankings) > 1  # NoRegret samples
    assert len({tuple(greedy.rank(Xr, 5, rng).ranking) for _ in range(10)}) == 1


@pytest.mark.parametrize("cls", [GreedyKLRank, OnlineRankNet])
def test_argmax_klrank_compares_a_click_with_the_results_shown(cls):
    """choice_set 'shown': the loss of a click is that among the results the user saw (the
    page, or down to a click below it), the same step as 'all' on those results alone."""
    rng = np.random.default_rng(5)
    Xr = rng.random((9, 3))
    ranking = rng.permutation(9)
    for positions, seen in (([1], 4), ([0, 2], 4), ([6], 7)):  # a page of 4; a click at 7th
        shown, every = cls(), cls(choice_set="all")
        for learner in (shown, every):
            learner.initialize(3)
            learner.theta_ = np.array([0.3, -0.2, 0.1])
        shown.update(Xr, feedback_from_clicks(ranking, 4, ranking[positions]))
        every.update(Xr[ranking[:seen]], feedback_from_clicks(np.arange(seen), seen,
                                                               np.array(positions)))
        np.testing.assert_allclose(shown.theta_, every.theta_)
    assert (cls().choice_set, cls().prior_steps) == ("shown", 30.0)
    assert (NoRegretKLRank().choice_set, NoRegretKLRank().prior_steps) == ("all", 0.0)


@pytest.mark.parametrize("cls", [GreedyKLRank, OnlineRankNet])
def test_a_click_on_a_page_of_identical_results_teaches_nothing(cls):
    """The lock-in seen on OHSUMED: weights below zero put the candidates matching nothing
    (features all 0) on the page. Against every candidate, a click on one lowers every
    weight again, for good; against the page, which holds nothing else, it teaches nothing."""
    Xr = np.vstack([np.zeros((4, 3)), np.random.default_rng(2).random((6, 3)) + 0.1])
    start = np.array([-0.1, -0.2, -0.05])
    for choice_set in ("all", "shown"):
        learner = cls(choice_set=choice_set)
        learner.initialize(3)
        learner.theta_ = start.copy()
        for step in range(20):
            before = learner.theta_.copy()
            ranking = learner.rank(Xr, 3).ranking
            assert set(ranking[:3].tolist()) <= {0, 1, 2, 3}  # only the non-matching shown
            learner.update(Xr, feedback_from_clicks(ranking, 3, ranking[[1]]))
            if choice_set == "shown":
                np.testing.assert_array_equal(learner.theta_, before)
            elif step == 0:
                assert np.all(learner.theta_ < before)
        if choice_set == "all":  # pushed down to the edge of GPER's ball, all below zero
            assert np.all(learner.theta_ < 0)
            assert np.linalg.norm(learner.theta_) > 3 * np.linalg.norm(start)


def test_last_click_option():
    learner = GreedyKLRank(clicks="last")
    learner.initialize(2)
    Xr = np.array([[1.0, 0.0], [0.0, 1.0], [0.3, 0.3]])
    learner.update(Xr, Feedback(ranking=np.arange(3), n_shown=3, clicked=np.array([0, 1])))
    only_last = GreedyKLRank()
    only_last.initialize(2)
    only_last.update(Xr, Feedback(ranking=np.arange(3), n_shown=3, clicked=np.array([1])))
    np.testing.assert_array_equal(learner.theta_, only_last.theta_)


def test_plackett_luce_probabilities():
    scores = np.array([0.3, -1.0, 2.0, 0.5])
    ranking = np.array([2, 0, 3, 1])
    e = np.exp(scores)
    by_hand = (e[2] / e.sum()) * (e[0] / (e.sum() - e[2])) * (e[3] / (e[3] + e[1]))
    assert plackett_luce_log_prob(scores, ranking, 3) == pytest.approx(math.log(by_hand))
    assert plackett_luce_prefix_log_prob(scores, ranking[:3]) == pytest.approx(math.log(by_hand))
    rng = np.random.default_rng(0)
    firsts = np.bincount([gumbel_top_k(scores, rng)[0] for _ in range(20000)], minlength=4)
    np.testing.assert_allclose(firsts / 20000, e / e.sum(), atol=0.01)


def test_klrank_grows_with_new_features():
    learner = NoRegretKLRank()
    learner.initialize(2, ["a", "b"])
    click(learner, 0)
    theta = learner.theta_.copy()
    wider = np.hstack([X, np.ones((3, 1))])
    learner.rank(wider, 3, np.random.default_rng(0))
    np.testing.assert_array_equal(learner.theta_, np.append(theta, 0.0))
    assert learner.feature_names_in_ == ["a", "b", "feature_2"]


@pytest.mark.parametrize("name", ["preference_perceptron", "pdgd", "epsilon_greedy", "random",
                                  "dbgd", "linucb"])
def test_the_unchecked_entries_rank_and_learn_as_the_checked_ones(name):
    """rank_validated, update_validated and first_log_probabilities_validated (the offline
    simulator's) are rank, update and first_log_probabilities without the checks: the same
    random numbers, rankings, scores and learned state."""
    from reranker.core.plugins import get_plugin_manager, learner_classes

    cls = learner_classes(get_plugin_manager(load_entrypoints=False))[name]
    checked, fast = cls(), cls()
    data = np.random.default_rng(3)
    rngs = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(30):
        X = data.random((7, 4))
        a = checked.rank(X, 4, rngs[0])
        b = fast.rank_validated(fast.check_features(X), 4, rngs[1])
        assert np.array_equal(a.ranking, b.ranking) and np.array_equal(a.scores, b.scores)
        if checked.capabilities.exact_probabilities:
            assert np.array_equal(checked.first_log_probabilities(X),
                                  fast.first_log_probabilities_validated(X))
        clicked = np.array([int(a.ranking[1])])
        logged = {"log_prob": a.log_prob, "propensities": a.propensities}
        assert checked.update(X, feedback_from_clicks(a.ranking, 4, clicked, context=a.context,
                                                      **logged)) == \
            fast.update_validated(X, feedback_from_clicks(b.ranking, 4, clicked,
                                                          context=b.context, **logged))
    assert rngs[0].random() == rngs[1].random()
    for key, value in checked.get_state().items():
        np.testing.assert_array_equal(fast.get_state()[key], value, err_msg=key)

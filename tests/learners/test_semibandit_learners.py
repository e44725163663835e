"""The semibandit learners: their updates worked out by hand, and their probabilities."""

from __future__ import annotations

import math

import numpy as np
import pytest
from reranker_plugins.epsilon_greedy import EpsilonGreedy
from reranker_plugins.linucb import LinUCB

from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import Feedback

X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])


def learner(cls, **params):
    out = cls(feature_map=FeatureMap(depth=5), **params)
    out.initialize(2, ["a", "b"])
    return out


def page(shown, clicked, chance=None) -> Feedback:
    rest = [i for i in range(3) if i not in shown]
    feedback = Feedback(ranking=np.array(shown + rest), n_shown=len(shown),
                        clicked=np.array(clicked, dtype=np.intp))
    if chance is not None:  # each candidate's logged chance of being shown
        feedback.propensities = np.zeros(3)
        feedback.propensities[shown] = chance
    return feedback


def test_epsilon_greedy_weights_each_shown_item_by_its_chance_and_refits_at_epochs():
    eg = learner(EpsilonGreedy, epsilon=0.2, ridge=1.0)
    # shown 0 and 1 with chances 1/2 and 1/4, 1 clicked: weights 2 and 4
    assert eg.update(X, page([0, 1], [1], [0.5, 0.25]))
    np.testing.assert_allclose(eg.A_, np.diag([3.0, 5.0]))
    np.testing.assert_allclose(eg.b_, [0.0, 4.0])
    np.testing.assert_allclose(eg.theta_, [0.0, 0.8])  # refit after round 1
    assert eg.next_fit_ == 2
    assert eg.update(X, page([2], [2], [1.0]))  # round 2: refit
    A = np.diag([3.0, 5.0]) + np.ones((2, 2))
    np.testing.assert_allclose(eg.theta_, np.linalg.solve(A, [1.0, 5.0]))
    theta = eg.theta_.copy()
    assert eg.update(X, page([0], [], [0.9]))  # round 3: statistics only, no refit
    np.testing.assert_allclose(eg.theta_, theta)
    assert eg.b_.tolist() == [1.0, 5.0] and eg.next_fit_ == 4
    assert not eg.update(X, page([], []))  # nothing shown: nothing learned


def test_epsilon_greedy_probabilities():
    eg = learner(EpsilonGreedy, epsilon=0.3)
    eg.theta_ = np.array([1.0, 0.5])  # greedy: 2, 0, 1
    assert eg.log_probability(X, np.array([2, 0])) == pytest.approx(
        math.log(0.3 / 6 + 0.7))
    assert eg.log_probability(X, np.array([0, 2])) == pytest.approx(math.log(0.3 / 6))
    np.testing.assert_allclose(eg.marginals(X, 2), [0.2 + 0.7, 0.2, 0.2 + 0.7])
    np.testing.assert_allclose(eg.position_marginals(X, 2),
                               [[0.1, 0.8], [0.1, 0.1], [0.8, 0.1]])
    result = eg.rank(X, 2, np.random.default_rng(0))
    np.testing.assert_allclose(result.propensities, eg.marginals(X, 2))


def test_linucb_refreshes_every_n_rounds():
    ucb = learner(LinUCB, alpha=2.0, ridge=1.0, refresh=2)
    result = ucb.rank(X, 3)  # no data: the bonus alone, alpha * |x|
    np.testing.assert_allclose(result.scores, 2.0 * np.linalg.norm(X, axis=1))
    assert result.ranking[0] == 2
    assert ucb.update(X, page([2, 0], [0]))
    Sigma = np.eye(2) + np.outer(X[2], X[2]) + np.outer(X[0], X[0])
    np.testing.assert_allclose(ucb.Sigma_, Sigma)
    assert not ucb.theta_.any()  # not refreshed yet
    assert ucb.update(X, page([1], [1]))
    Sigma += np.outer(X[1], X[1])
    np.testing.assert_allclose(ucb.theta_, np.linalg.solve(Sigma, X[0] + X[1]))
    np.testing.assert_allclose(ucb.Sigma_inv_, np.linalg.inv(Sigma))
    x = X[1]
    assert ucb.rank(X, 3).scores[1] == pytest.approx(
        ucb.theta_ @ x + 2.0 * math.sqrt(x @ np.linalg.inv(Sigma) @ x))


def test_eels_explores_then_estimates_the_position_weights_and_exploits():
    from reranker_plugins.eels import EELS

    eels = learner(EELS, positions=2, min_rounds=2, min_eigenvalue=0.5, ridge=1.0)
    rng = np.random.default_rng(0)
    assert eels.capabilities.stochastic
    assert eels.rank(X, 2, rng).log_prob == pytest.approx(math.log(1 / 6))
    no_reward = page([0, 1], [0])
    assert not eels.update(X, no_reward)  # a page without a reward teaches nothing
    first = page([0, 1], [0])
    first.reward = 2.0  # y = (1, 0)
    assert eels.update(X, first) and not eels.exploiting_
    second = page([2, 1], [1])
    second.reward = 1.0  # y = (0, 1)
    assert eels.update(X, second)
    # sum y y^T = I reaches the eigenvalue: w = (2, 1), and the oracle is fitted once, each
    # shown result weighted 3 / 2 (the inverse of a random list's chance to show it)
    assert eels.exploiting_ and not eels.capabilities.stochastic
    np.testing.assert_allclose(eels.w_hat_, [2.0, 1.0])
    A = np.eye(2) + 1.5 * (np.outer(X[0], X[0]) + 2 * np.outer(X[1], X[1])
                           + np.outer(X[2], X[2]))
    np.testing.assert_allclose(eels.theta_, np.linalg.solve(A, 1.5 * (X[0] + X[1])))
    best = np.argsort(-(X @ eels.theta_), kind="stable")
    assert eels.rank(X, 2).ranking[:2].tolist() == best[:2].tolist()  # position 1 weighs most
    eels.w_hat_ = np.array([1.0, 2.0])  # position 2 weighs most: the best result goes there
    assert eels.rank(X, 2).ranking[:2].tolist() == [best[1], best[0]]
    assert not eels.update(X, second)  # it exploits for good


def test_eels_learns_in_the_simulator_from_the_applications_reward():
    """With `--reward dcg` the simulated application reports each page's reward, EELS
    explores, estimates the position weights and exploits; without a reward it never
    leaves its uniformly random exploration."""
    from reranker.offline.simulation import LearnerSpec, Settings, prepare, simulate, summarize
    from tests.support.paths import SHARED_DATA

    folder = SHARED_DATA / "letor4-mq2008"
    if not folder.is_dir():
        pytest.skip("shared MQ2008 data not present beside the project")
    data = prepare([folder / "S1.txt.gz"], folder / "S5.txt.gz")
    spec = LearnerSpec("eels", {"min_rounds": 300})
    offline = {}
    for reward in ("none", "dcg"):
        settings = Settings(impressions=1500, runs=2, click_model="navigational",
                            checkpoints=2, reward=reward)
        summary = summarize(simulate(data, [spec, LearnerSpec("random")], settings, workers=1))
        offline[reward] = summary[spec.key]["offline_ndcg@10"]["mean"]
        random_ndcg = summary["random"]["offline_ndcg@10"]["mean"]
    assert offline["dcg"] > random_ndcg + 0.1
    assert offline["dcg"] > offline["none"] + 0.1

"""VCEE and the regression oracles: fits, stored tree ensembles, probabilities worked out by
hand, the optimisation problem's constraints, and learning under the semibandit protocol."""

from __future__ import annotations

import math

import numpy as np
import pytest
from reranker_plugins.epsilon_greedy import EpsilonGreedy
from reranker_plugins.vcee import PSI, VCEE

from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import Feedback, item_feedback
from reranker.learners.oracles import (
    LinearOracle,
    TreeOracle,
    page_lists,
    position_weights,
    smoothing,
)
from tests.support.paths import SHARED_DATA

MQ2008 = SHARED_DATA / "letor4-mq2008"
X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])


def make(cls=VCEE, **params):
    out = cls(feature_map=FeatureMap(depth=5), **params)
    out.initialize(2, ["a", "b"])
    return out


def test_linear_oracle_is_weighted_ridge_regression():
    rng = np.random.default_rng(0)
    A, y, w = rng.random((30, 3)), rng.random(30), rng.random(30) + 0.5
    theta = LinearOracle(2.0).fit(A, y, w)
    expected = np.linalg.solve(A.T @ np.diag(w) @ A + 2.0 * np.eye(3), A.T @ (w * y))
    np.testing.assert_allclose(theta, expected)
    np.testing.assert_allclose(LinearOracle(2.0).scores(theta, A), A @ expected)


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_a_stored_tree_ensemble_predicts_what_lightgbm_does(depth):
    lightgbm = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(depth)
    A = rng.random((300, 4))
    y = np.sin(4 * A[:, 0]) + A[:, 1] * A[:, 2] + 0.1 * rng.standard_normal(300)
    w = rng.random(300) + 0.1
    policy = TreeOracle(20, depth).fit(A, y, w)
    assert policy.dtype == np.float64 and policy.ndim == 1  # plain numbers, no object
    model = lightgbm.LGBMRegressor(n_estimators=20, max_depth=depth, num_leaves=2 ** depth,
                                   random_state=0, n_jobs=1, deterministic=True, verbose=-1)
    model.fit(A, y, sample_weight=w)
    new = np.vstack([rng.random((100, 4)), A[:20]])  # training rows sit on thresholds' sides
    np.testing.assert_allclose(TreeOracle(20, depth).scores(policy, new), model.predict(new),
                               atol=1e-9)
    assert np.ptp(TreeOracle(20, depth).scores(policy, new)) > 0.5  # it did split


def test_page_lists_place_each_pages_best_results():
    scores = np.array([0.1, 0.9, 0.5, 0.3, 0.3, 0.7])
    # pages of 4 and 2 rows, lists of 2: page 0 shows rows 1, 2; page 1 rows 5, 4
    np.testing.assert_array_equal(page_lists(scores, np.array([4, 2]), 2),
                                  [-1, 0, 1, -1, 1, 0])


def test_position_weights_and_smoothing():
    np.testing.assert_allclose(position_weights("dcg", 3), [1.0, 1 / math.log2(3), 0.5])
    np.testing.assert_allclose(position_weights("uniform", 3), [1.0, 1.0, 1.0])
    assert smoothing(2.0, 16, 4) == pytest.approx(2.0 / 8)
    assert smoothing(100.0, 16, 4) == 0.5  # never more than half the pages random


def test_graded_values_are_the_semibandit_feedback_where_given():
    feedback = Feedback(ranking=np.array([2, 0, 1]), n_shown=2, clicked=np.array([0]))
    np.testing.assert_array_equal(item_feedback(feedback, 2)[1], [0.0, 1.0])
    feedback.values = np.array([2.0, 1.0])
    shown, y = item_feedback(feedback, 2)
    np.testing.assert_array_equal(shown, [2, 0])
    np.testing.assert_array_equal(y, [2.0, 1.0])


def test_vcee_probabilities_by_hand():
    vcee = make(smoothing=1.0)
    vcee.rounds_ = 12  # mu = 1 / sqrt(3 * 12) = 1/6 for 3 candidates
    vcee.theta_ = np.array([1.0, 0.5])  # the leader's list: 2, 0, 1
    vcee.policies_ = np.array([0.0, 1.0])  # one policy in Q, list 1, 2, 0 ...
    vcee.policy_sizes_ = np.array([2])
    vcee.policy_weights_ = np.array([0.25])  # ... with weight 1/4; the leader has 3/4
    mu = 1 / 6
    uniform_pair = 1 / 6  # one of the 3 * 2 ordered pairs
    assert math.exp(vcee.log_probability(X, np.array([2, 0]))) == pytest.approx(
        mu * uniform_pair + (1 - mu) * 0.75)
    assert math.exp(vcee.log_probability(X, np.array([1, 2]))) == pytest.approx(
        mu * uniform_pair + (1 - mu) * 0.25)
    assert math.exp(vcee.log_probability(X, np.array([0, 1]))) == pytest.approx(
        mu * uniform_pair)
    at = vcee.position_marginals(X, 2)
    expected = np.full((3, 2), mu / 3)
    expected[2, 0] += (1 - mu) * 0.75
    expected[0, 1] += (1 - mu) * 0.75
    expected[1, 0] += (1 - mu) * 0.25
    expected[2, 1] += (1 - mu) * 0.25
    np.testing.assert_allclose(at, expected)
    np.testing.assert_allclose(vcee.marginals(X, 2), expected.sum(axis=1))
    np.testing.assert_allclose(np.exp(vcee.first_log_probabilities(X)), expected[:, 0])


def test_vcee_keeps_each_page_and_weights_the_leaders_fit_by_the_logged_chances():
    vcee = make(ridge=1.0, positions=2)
    feedback = Feedback(ranking=np.array([0, 1, 2]), n_shown=2, clicked=np.array([1]))
    feedback.propensities = np.array([0.5, 0.25, 0.1])
    assert vcee.update(X, feedback)
    # the shown 0 and 1 weigh 2 and 4; only 1 was clicked
    np.testing.assert_allclose(vcee.A_, np.diag([3.0, 5.0]))
    np.testing.assert_allclose(vcee.b_, [0.0, 4.0])
    np.testing.assert_allclose(vcee.pages_X_, X)
    np.testing.assert_allclose(vcee.pages_y_, [0.0, 1.0, 0.0])
    np.testing.assert_allclose(vcee.pages_q_, [0.5, 0.25, -1.0])  # -1: not shown
    assert vcee.pages_sizes_.tolist() == [3] and vcee.rounds_ == 1
    assert vcee.next_fit_ == 2  # epoch 1 ended: the leader was refitted, OP solved
    leader = np.linalg.solve(np.diag([3.0, 5.0]), [0.0, 4.0])
    assert np.allclose(vcee.theta_, leader) or \
        vcee._estimated_reward(vcee.theta_) >= vcee._estimated_reward(leader)
    assert not vcee.update(X, Feedback(ranking=np.array([0, 1, 2]), n_shown=0))


def test_vcee_keeps_only_its_newest_pages():
    vcee = make(history=3)
    rng = np.random.default_rng(1)
    sizes = []
    for _ in range(10):
        n = int(rng.integers(2, 6))
        sizes.append(n)
        page = rng.random((n, 2))
        vcee.update(page, Feedback(ranking=np.arange(n), n_shown=2, clicked=np.array([1])))
    X_kept, y_kept, q_kept, kept = vcee._kept_pages()
    assert kept.tolist() == sizes[-3:] and len(X_kept) == sum(sizes[-3:])
    assert len(vcee.pages_sizes_) <= 6  # the older ones are dropped, not only hidden


def optimisation_problem(seed: int, **params) -> VCEE:
    """A VCEE after 64 pages of a problem where feature 0 predicts the feedback."""
    rng = np.random.default_rng(seed)
    vcee = make(**params)
    for _ in range(64):
        page = rng.random((8, 2))
        result = vcee.rank(page, 3, rng)
        shown = result.ranking[:3]
        clicked = shown[page[shown, 0] + 0.3 * rng.random(3) > 0.8]
        feedback = Feedback(ranking=result.ranking, n_shown=3, clicked=clicked)
        feedback.propensities = result.propensities
        vcee.update(page, feedback)
    return vcee


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vcee_solves_the_optimisation_problem(seed):
    """After a solve, Q meets OP's constraints (Krishnamurthy et al., Eqs. 4 and 5) on the
    kept pages: its regret is low, and no policy the oracle finds has a variance above its
    bound."""
    vcee = optimisation_problem(seed, positions=3, iterations=200, smoothing=1.0)
    X_all, y, q, sizes = vcee._kept_pages()
    L, K = vcee.positions, float(sizes.mean())
    mu = vcee._mu(K)
    scale, C = K / (PSI * mu * L), 2 * K
    policies, weights = vcee._mixture()
    best = vcee._estimated_reward(vcee.theta_)
    regrets = [max(0.0, best - vcee._estimated_reward(p)) for p in policies[:-1]]
    low_regret = sum(c * (C + scale * r) for c, r in zip(weights[:-1], regrets, strict=True))
    assert low_regret <= C * (1 + 1e-9)
    q_mu = np.zeros(len(y))
    oracle = vcee._oracle()
    for p, c in zip(policies[:-1], weights[:-1], strict=True):
        q_mu[page_lists(oracle.scores(p, X_all), sizes, L) >= 0] += c
    q_mu = (1 - mu) * q_mu + mu * np.repeat(np.minimum(L, sizes) / sizes, sizes)
    shown = q > 0
    y_hat = np.where(shown, y / np.where(shown, q, 1.0), 0.0)
    probe = oracle.fit(X_all, 1 / q_mu + scale * y_hat, np.ones(len(y)))
    on = page_lists(oracle.scores(probe, X_all), sizes, L) >= 0
    variance = (1 / q_mu[on]).sum() / len(sizes)
    regret = max(0.0, best - vcee._estimated_reward(probe))
    assert variance <= C + scale * regret + 1e-6


def test_vcee_exploration_shrinks_as_it_learns():
    early = optimisation_problem(3, positions=3)
    assert early.rounds_ == 64 and early._mu(8) == pytest.approx(1 / math.sqrt(8 * 64))
    rng = np.random.default_rng(5)
    page = rng.random((8, 2))
    leader = np.argsort(-(page @ early.theta_), kind="stable")[:3]
    # the leader's list is the likeliest, and every candidate keeps a chance of mu / 8
    chances = early.position_marginals(page, 3)
    assert chances[leader, np.arange(3)].min() > 0.5
    assert chances.min() >= early._mu(8) / 8 - 1e-12


def labelled_protocol(rounds: int, runs: int, specs):
    from reranker.offline.semibandit import SemibanditSettings, simulate_semibandits
    from reranker.offline.simulation import LearnerSpec, prepare

    if not MQ2008.is_dir():
        pytest.skip(f"MQ2008 is not at {MQ2008}")
    data = prepare([MQ2008 / f"S{i}.txt.gz" for i in (1, 2, 3)], MQ2008 / "S5.txt.gz")
    return simulate_semibandits(
        data, [LearnerSpec(name, params) for name, params in specs],
        SemibanditSettings(rounds=rounds, runs=runs, checkpoints=4), workers=1)


def test_vcee_learns_from_graded_per_item_feedback_on_mq2008():
    result = labelled_protocol(1500, 2, [("vcee", {}), ("random", {})])
    vcee, random = result.average_reward["vcee"], result.average_reward["random"]
    assert vcee.shape == (2, 4)
    assert (vcee[:, -1] > random[:, -1] + 0.3).all()  # sum of the top 6's labels
    assert (vcee[:, -1] < result.ideal[:, -1]).all()


def test_epsilon_greedy_trees_oracle_learns_from_graded_feedback():
    rng = np.random.default_rng(0)
    eg = make(EpsilonGreedy, oracle="trees", trees=10, epsilon=0.2)
    for _ in range(200):
        page = rng.random((6, 2))
        result = eg.rank(page, 2, rng)
        shown = result.ranking[:2]
        feedback = Feedback(ranking=result.ranking, n_shown=2,
                            values=(page[shown, 1] > 0.5).astype(float) * 2.0)
        feedback.propensities = result.propensities
        eg.update(page, feedback)
    test = rng.random((500, 2))
    scores = eg._leader_scores(test)
    # the trees found the step in feature 1 (and not a line through feature 0)
    assert scores[test[:, 1] > 0.6].min() > scores[test[:, 1] < 0.4].max()


def test_vcee_serves_learns_and_saves_its_pages_through_the_http_api(workdir):
    """Through the real service: every page logs its chances, the trainer applies the clicks,
    and the saved model loads back with its pages and policies; the clicked result rises."""
    from tests.support.configs import write_config
    from tests.support.servers import LiveServer

    path = write_config(workdir, learner={"name": "vcee", "params": {
        "positions": 5, "history": 30, "smoothing": 0.5}})
    server = LiveServer(path)
    try:
        favourite = None
        for _ in range(48):
            page = server.post("/search", {"query": "tea kettle", "size": 5}).json()
            ids = [hit["id"] for hit in page["hits"]]
            favourite = favourite or ids[-1]  # the engine's fifth
            if favourite in ids:
                assert server.post("/click", {"impression_id": page["impression_id"],
                                              "doc_id": favourite}).status_code == 202
        logged = server.service.events.get_impression(page["impression_id"])
        assert logged.propensities is not None and logged.log_prob is not None
        assert server.service.trainer.run_once(close_all=True).applied == 48
        learner = server.service.model.learner
        assert learner.rounds_ == 48 and len(learner.pages_sizes_) <= 60
        model, errors = server.service.models.load_latest(server.service.factory)
        assert not errors
        saved = model.learner
        np.testing.assert_array_equal(saved.pages_X_, learner.pages_X_)
        np.testing.assert_array_equal(saved.policy_weights_, learner.policy_weights_)
        np.testing.assert_array_equal(saved.theta_, learner.theta_)
        # the leader, the policy most pages come from, now puts the clicked result first
        explained = server.post("/explain", {"query": "tea kettle", "size": 5}).json()
        assert explained["hits"][0]["id"] == favourite
        top = [server.post("/search", {"query": "tea kettle", "size": 5}).json()["hits"][0]
               for _ in range(20)]
        assert sum(hit["id"] == favourite for hit in top) >= 5  # (and other policies explore)
    finally:
        server.stop()

"""The Preference Perceptron: its update rule by hand, and that it learns."""

import numpy as np
import pytest
from reranker_plugins.preference_perceptron import PreferencePerceptron

from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import Feedback, feedback_from_clicks
from reranker.offline.ranking_quality import ndcg


def test_update_rule_by_hand():
    # Coactive Learning, Algorithm 1 (no perturbation) with w_1 = 0, depth 2, log2 discounts.
    X = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    learner = PreferencePerceptron(feature_map=FeatureMap(depth=2), swap_probability=0.0)
    result = learner.rank(X)
    np.testing.assert_array_equal(result.ranking, [0, 1, 2])  # all-zero model: backend order
    fb = feedback_from_clicks(result.ranking, 3, np.array([2]))  # ybar = [2, 0, 1]
    assert learner.update(X, fb)
    g2 = 1 / np.log2(3)
    # phi(ybar) = x_2 + g2 x_0 = (0.5 + g2, 0.5); phi(y) = x_0 + g2 x_1 = (1, g2)
    w1 = np.array([0.5 + g2 - 1.0, 0.5 - g2])
    np.testing.assert_allclose(learner.w_, w1)
    # Second step: the model now ranks [2, 0, 1]? scores: x@w1
    scores = X @ w1
    ranking = learner.rank(X).ranking
    np.testing.assert_array_equal(ranking, np.argsort(-scores, kind="stable"))
    fb2 = feedback_from_clicks(ranking, 3, np.array([1]))
    learner.update(X, fb2)
    ybar = fb2.improved
    D2 = (X[ybar[0]] + g2 * X[ybar[1]]) - (X[ranking[0]] + g2 * X[ranking[1]])
    np.testing.assert_allclose(learner.w_, w1 + D2)


@pytest.mark.parametrize("seed", [0, 3, 7])  # pairing (1, 2), (3, 4); (2, 3); no swap
def test_perturbed_presentation_and_update_by_hand(seed):
    # Raman et al. 2013 on the Preference Perceptron, with the random pairing of FairPairs:
    # a fair coin picks the pairs (1, 2), (3, 4), ... or (2, 3), (4, 5), ..., each pair of
    # the argmax is swapped with probability p, and a step is taken only within a pair.
    X = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [0.2, 0.9], [0.3, 0.3]])
    p = 0.3
    learner = PreferencePerceptron(feature_map=FeatureMap(depth=4), swap_probability=p)
    assert learner.capabilities.stochastic and learner.capabilities.policy == "perturbed_pairs"
    draws = np.random.default_rng(seed).random(3)  # the pairing, then one coin per pair
    result = learner.rank(X, 4, np.random.default_rng(seed))
    offset = 1 if draws[0] < 0.5 else 0
    # pairing (2, 3), (4, 5) reaches the first result the page leaves out (the 5th)
    uppers = [0, 2] if offset == 0 else [1, 3]
    expected = [0, 1, 2, 3, 4]  # all-zero model: backend order
    swapped = [i for i, draw in zip(uppers, draws[1:], strict=False) if draw < p]
    for i in swapped:
        expected[i], expected[i + 1] = expected[i + 1], expected[i]
    np.testing.assert_array_equal(result.ranking, expected)
    assert result.context == {"pair_offset": offset, "swapped": swapped,
                              "swap_probability": p}
    if swapped:
        probability = 0.5 * p ** len(swapped) * (1 - p) ** (len(uppers) - len(swapped))
    else:  # the argmax itself: either pairing with no swap
        probability = 0.5 * (1 - p) ** 2 + 0.5 * (1 - p) ** 2
    assert result.log_prob == pytest.approx(np.log(probability))
    assert learner.log_probability(X, result.ranking[:4]) == pytest.approx(result.log_prob)
    assert learner.log_probability(X, np.array([2, 0, 1, 3])) == -np.inf

    y = result.ranking

    def clicks(*positions):
        return feedback_from_clicks(y, 4, y[list(positions)], context=result.context)

    # clicks on the upper results only, on both of a pair, or outside the pairs: nothing
    assert not learner.update(X, clicks(*uppers))
    assert not learner.update(X, clicks(uppers[0], uppers[0] + 1))
    if offset == 1:  # the first is in no pair, the 4th's partner was not shown
        assert not learner.update(X, clicks(0)) and not learner.update(X, clicks(3))
    np.testing.assert_array_equal(learner.w_, [0.0, 0.0])
    # a click on the lower result of the last pair shown whole:
    # w = (g_k - g_k+1) (x_lower - x_upper), weighted by the inverse of the chance that the
    # pair was shown that way over 1/2: 1 / (2p) swapped, 1 / (2 (1 - p)) kept
    k = 2 if offset == 0 else 1
    assert learner.update(X, clicks(k + 1))
    g = 1 / np.log2(np.arange(2, 7))
    weight = 0.5 / p if k in swapped else 0.5 / (1 - p)
    np.testing.assert_allclose(learner.w_,
                               weight * (g[k] - g[k + 1]) * (X[y[k + 1]] - X[y[k]]))


def test_no_information_changes_nothing():
    X = np.random.default_rng(0).random((5, 3))
    learner = PreferencePerceptron()
    learner.initialize(3)
    learner.w_ = np.array([0.3, -0.2, 0.1])
    before = learner.get_state()
    y = learner.rank(X).ranking
    assert not learner.update(X, Feedback(ranking=y, n_shown=5))
    np.testing.assert_array_equal(learner.w_, before["w_"])
    assert learner.n_updates_ == before["n_updates_"]


def _simulate(alpha_noise: float, rounds: int, seed: int) -> list[float]:
    """Simulated users with a hidden w*: each round they click the results they like best
    among the top 5 (with some noise). Returns the NDCG@5 of each shown ranking."""
    rng = np.random.default_rng(seed)
    m, n = 6, 20
    w_star = rng.normal(size=m)
    learner = PreferencePerceptron(feature_map=FeatureMap(depth=5))
    scores = []
    for _ in range(rounds):
        X = rng.random((n, m))
        utility = X @ w_star
        labels = np.digitize(utility, np.quantile(utility, [0.6, 0.85]))  # 0, 1, 2
        y = learner.rank(X).ranking
        scores.append(ndcg(labels[y], labels, 5))
        top = y[:10]
        liked = top[labels[top] == 2]
        noise = rng.random(len(top)) < alpha_noise
        clicked = np.union1d(liked, top[noise])
        learner.update(X, feedback_from_clicks(y, 10, clicked))
    return scores


def test_learns_from_simulated_clicks():
    scores = np.array([_simulate(0.05, 300, seed) for seed in range(8)]).mean(axis=0)
    first, last = scores[:3].mean(), scores[-100:].mean()
    # The all-zero model ranks arbitrarily (NDCG@5 about 0.4); the learned one nearly ideally.
    assert first < 0.6, first
    assert last > first + 0.3, (first, last)
    assert last > 0.9, last


@pytest.mark.parametrize("p", [0.25, 0.5])
def test_weighted_pair_feedback_has_no_position_bias(p):
    """Two equally attractive results under a position-based click model (the lower
    position examined half as often): the weighted pair feedback moves the weights nowhere
    on average, whatever the swap probability; without the weights a small swap probability
    keeps demoting the result it ranks first (it is shown on top more often, so the other
    one is more often the lower result clicked alone), as the unperturbed rule does."""
    rng = np.random.default_rng(1)
    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    learner = PreferencePerceptron(feature_map=FeatureMap(depth=2), swap_probability=p)
    learner.initialize(2)
    total, unweighted = np.zeros(2), np.zeros(2)
    for _ in range(40_000):
        learner.w_ = np.zeros(2)  # the argmax stays candidate 0 first
        result = learner.rank(X, 2, rng)
        y = result.ranking
        clicked = y[rng.random(2) < np.array([0.6, 0.3])]  # examination 1 and 1/2, a = 0.6
        feedback = feedback_from_clicks(y, 2, clicked, context=result.context)
        delta = learner.direction(X, feedback)
        if delta is not None:
            total += delta
            improved = learner.improved(feedback)
            unweighted += learner.feature_map.phi_difference(X, improved, y)
    g = 1 - 1 / np.log2(3)
    np.testing.assert_allclose(total / 40_000, [0.0, 0.0], atol=0.01 * g)
    if p < 0.5:  # the unweighted feedback leans against the argmax's first
        assert (unweighted / 40_000)[0] < -0.02 * g

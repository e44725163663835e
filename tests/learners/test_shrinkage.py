"""Learned weights count as far as the queries that taught them agree, and every query weighs
alike in what is learned (docs/algorithms.md, "Evidence across queries")."""

import numpy as np
import pytest

from reranker.core.plugins import get_plugin_manager, learner_class
from reranker.learners import shrinkage
from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import feedback_from_clicks
from reranker.models.balance import CAPACITY, QueryBalance
from reranker.models.model import ModelFactory


def exact_and_sketched(contributions: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """sum_q u_q^2 exactly, and as the sketch estimates it from the same changes, each
    query's split into a few updates."""
    n = len(next(iter(contributions.values())))
    rows, squares, seen = shrinkage.new_sketch(n)
    for key, u in contributions.items():
        for part in (0.5, 0.3, 0.2):
            shrinkage.add_change(rows, squares, seen, key, part * u)
    exact = sum(u * u for u in contributions.values())
    return exact, squares


def test_the_sketch_estimates_the_queries_squares():
    rng = np.random.default_rng(0)
    few = {f"q{i}": rng.normal(size=4) for i in range(5)}
    rows = {shrinkage.query_slot(k)[0] for k in few}
    assert len(rows) == 5  # no two share a row: the estimate is exact
    exact, sketched = exact_and_sketched(few)
    np.testing.assert_allclose(sketched, exact)
    # thousands of queries share the rows: the cross terms cancel to a few per cent
    many = {f"query {i}": rng.normal(0.3, 1.0, size=4) for i in range(5000)}
    exact, sketched = exact_and_sketched(many)
    # (the relative standard error is sqrt(2 / ROWS), about 13%)
    error = np.abs(sketched / exact - 1)
    assert error.mean() < 0.2 and error.max() < 0.4


def test_the_queries_are_counted():
    _, _, seen = shrinkage.new_sketch(1)
    assert shrinkage.query_count(seen) == 0
    for i in range(50):
        seen[shrinkage.query_slot(f"q{i}")[2] >> 3] |= np.uint8(1 << (shrinkage.query_slot(
            f"q{i}")[2] & 7))
    assert shrinkage.query_count(seen) == pytest.approx(50, abs=1.5)


def test_factors_follow_the_agreement_of_the_queries():
    n = 3
    # one query: no evidence, whatever it taught
    w = np.array([5.0, -2.0, 0.0])
    assert not shrinkage.shrink_factors(w, w * w, 1).any()
    # 20 queries: feature 0 taught alike by all, feature 1 half one way and half the other,
    # feature 2 never
    u = np.zeros((20, n))
    u[:, 0] = 1.0
    u[:, 1] = np.where(np.arange(20) % 2, 1.0, -1.2)
    w = u.sum(axis=0)
    factors = shrinkage.shrink_factors(w, (u * u).sum(axis=0), 20)
    assert factors[0] == pytest.approx(1.0) and factors[1] == 0.0 and factors[2] == 0.0
    # noisy agreement: a factor between
    rng = np.random.default_rng(1)
    u = rng.normal(0.5, 1.0, size=(40, 1))
    factor = shrinkage.shrink_factors(u.sum(axis=0), (u * u).sum(axis=0), 40)[0]
    assert 0.0 < factor < 1.0


def engine_first_learner(shrink: bool = True):
    """A preference perceptron (no randomised pairs) over two features whose starting
    ranking is feature 0, the engine's score."""
    cls = learner_class(get_plugin_manager(), "preference_perceptron")
    factory = ModelFactory(cls, {"swap_probability": 0.0, "prior_steps": 1.0},
                           FeatureMap(depth=3), ["engine", "other"], "none",
                           prior=np.array([1.0, 0.0]), shrink=shrink)
    return factory.new().learner


def teach(learner, query: str, prefer_other: bool, rng) -> None:
    """One page of ``query``: three results the engine scores alike (so that the clicks
    teach nothing about its score); the user clicks the one with the most (or least) of
    feature 1."""
    X = np.column_stack([np.full(3, 0.5), rng.random(3)])
    ranking = learner.rank(X, 3, rng).ranking
    target = np.argmax(X[:, 1]) if prefer_other else np.argmin(X[:, 1])
    feedback = feedback_from_clicks(ranking, 3, np.array([target]))
    feedback.query = query
    learner.update(X, feedback)


#: A query never seen: the engine's order (feature 0) and feature 1's are opposite.
NEW_QUERY = np.array([[0.9, 0.1], [0.6, 0.5], [0.3, 0.9]])


def test_one_query_is_no_evidence_for_a_query_never_seen():
    rng = np.random.default_rng(2)
    learner = engine_first_learner()
    for _ in range(300):
        teach(learner, "the only query", True, rng)
    assert learner.learned_weights()[1] > 0  # it did learn
    assert learner.query_count() == pytest.approx(1, abs=0.01)
    np.testing.assert_array_equal(learner.weights(), learner.start_weights())
    assert learner.rank(NEW_QUERY, 3, rng).ranking.tolist() == [0, 1, 2]
    # with learner.shrink off, the learned weights count in full
    learner.shrink = False
    np.testing.assert_allclose(learner.weights(),
                               learner.learned_weights() + learner.start_weights())


def test_queries_that_agree_move_a_query_never_seen():
    rng = np.random.default_rng(3)
    learner = engine_first_learner()
    for i in range(300):
        teach(learner, f"query {i % 60}", True, rng)
    assert learner.shrink_factors()[1] > 0.8
    assert learner.rank(NEW_QUERY, 3, rng).ranking.tolist() == [2, 1, 0]


def test_queries_that_contradict_each_other_keep_the_engines_order():
    rng = np.random.default_rng(4)
    learner = engine_first_learner()
    for i in range(300):
        query = i % 60
        teach(learner, f"query {query}", query % 2 == 0, rng)
    assert learner.shrink_factors()[1] < 0.2
    assert learner.rank(NEW_QUERY, 3, rng).ranking.tolist() == [0, 1, 2]


def test_the_sketch_survives_saving_growing_and_carrying_over():
    rng = np.random.default_rng(5)
    learner = engine_first_learner()
    for i in range(100):
        teach(learner, f"query {i % 20}", True, rng)
    state = learner.get_state()
    copy = engine_first_learner()
    copy.set_state(state)
    np.testing.assert_array_equal(copy.weights(), learner.weights())
    copy.grow(3, ["engine", "other", "new"], np.array([1.0, 0.0, 0.0]))
    np.testing.assert_array_equal(copy.weights()[:2], learner.weights()[:2])
    assert copy.query_rows_.shape == (shrinkage.ROWS, 3)
    # carried onto a feature set in another order (and one feature more): the same weights,
    # shrunk by the same factors, each on its feature
    cls = learner_class(get_plugin_manager(), "preference_perceptron")
    moved = ModelFactory(cls, {"swap_probability": 0.0, "prior_steps": 1.0}, FeatureMap(depth=3),
                         ["new", "other", "engine"], "none",
                         prior=np.array([0.0, 0.0, 1.0])).new().learner
    moved.carry_over(learner, [-1, 1, 0])
    assert moved.shrinks()
    np.testing.assert_allclose(moved.shrink_factors()[1:], learner.shrink_factors()[::-1])
    np.testing.assert_allclose(moved.weights()[1:], learner.weights()[::-1])
    # a model saved before the sketch keeps its learned weights unshrunk
    old = {k: v for k, v in state.items() if not k.startswith(("query_", "sketched_"))}
    legacy = engine_first_learner()
    legacy.set_state(old)
    assert not legacy.shrinks()
    np.testing.assert_allclose(legacy.weights(),
                               legacy.learned_weights() + legacy.start_weights())


def test_a_frequent_query_is_learned_from_at_the_average_querys_rate():
    balance = QueryBalance()
    kept = {"head": 0, "tail": 0}
    pages = {"head": 0, "tail": 0}
    for t in range(20000):
        query = "head" if t % 2 == 0 else f"tail {t}"
        kind = query.split()[0]
        pages[kind] += 1
        kept[kind] += balance.keeps(query, f"page {t}")
    assert kept["tail"] == pages["tail"]  # a query searched once loses nothing
    # the head query is half the pages of 10,001 queries: about two pages of it are kept,
    # ln(10,000) or so in all (each at the average's rate at its time)
    assert kept["head"] < 30
    # the same pages, the same decisions (a hash of the page's id, no random state)
    first, second = QueryBalance(), QueryBalance()
    stream = [("head" if t % 2 == 0 else f"tail {t}", f"page {t}") for t in range(2000)]
    assert [first.keeps(*page) for page in stream] == [second.keeps(*page) for page in stream]


def test_equal_queries_lose_nothing_and_the_counts_stay_bounded():
    balance = QueryBalance()
    kept = sum(balance.keeps(f"q{t % 50}", f"p{t}") for t in range(5000))
    assert kept > 0.9 * 5000
    for t in range(3 * CAPACITY):
        balance.keeps(f"rare {t}", f"r{t}")
    assert len(balance.counts) <= CAPACITY
    restored = QueryBalance.from_dict(balance.to_dict())
    assert restored.to_dict() == balance.to_dict()
    # restored, it decides the next pages as the one that counted them did
    stream = [(f"q{t % 7}" if t % 3 else f"new {t}", f"n{t}") for t in range(3000)]
    assert [restored.keeps(*page) for page in stream] == [balance.keeps(*page)
                                                         for page in stream]


@pytest.mark.parametrize("change, field", [
    ({"pages": -1}, "query_balance.pages"),
    ({"counts": {"ab": 0}}, "query_balance.counts"),
    ({"seen": [0, 1]}, "query_balance.seen"),
    ({"seen": "zz" * 8192}, "query_balance.seen"),
    ({"seen": "00" * 100}, "query_balance.seen"),
])
def test_a_damaged_balance_is_named(change, field):
    data = {**QueryBalance().to_dict(), **change}
    with pytest.raises(ValueError, match=field):
        QueryBalance.from_dict(data)

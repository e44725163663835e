"""Click features and the position-bias estimate: recovered from the perceptrons' random
pairs, kept in the event store, never leaking a click into an earlier impression."""

import json
import sqlite3

import numpy as np
import pytest
from reranker_plugins.preference_perceptron import PreferencePerceptron

from reranker.core.config import load_config
from reranker.core.errors import StoreError
from reranker.features.clicks import (
    PositionBias,
    click_lifts,
    click_rates,
    lifts_from_counts,
    query_key,
)
from reranker.features.clicks.position_bias import randomized_pairs
from reranker.learners.featuremap import FeatureMap
from reranker.serving.service import RerankerService
from reranker.stores.events import Impression
from reranker.stores.sql import SCHEMA_VERSION
from reranker.stores.sqlite import SQLiteStore
from tests.support.stores import store_rows


def pbm_impressions(count, eta=1.0, seed=0):
    """``count`` impressions of ten results shown by the default perceptron (its random
    pairs) to users of a position-based click model, ``P(click at k) = k^-eta * a(d)``,
    with the most attractive documents ranked first (as a good engine does, which is what
    confounds a naive click-through rate per position). Yields (context, click positions)."""
    rng = np.random.default_rng(seed)
    learner = PreferencePerceptron(feature_map=FeatureMap(depth=10))
    learner.initialize(1)
    attractiveness = np.linspace(1.0, 0.6, 10)  # candidate i, in the engine's order
    examination = np.arange(1, 11) ** -eta
    X = np.zeros((10, 1))
    coins = rng.random((count, 10))
    for i in range(count):
        result = learner.rank(X, 10, rng)
        clicked = coins[i] < examination * attractiveness[result.ranking]
        yield result.context, np.flatnonzero(clicked)


def test_position_bias_recovers_the_weights_of_a_position_based_model():
    bias, naive = PositionBias(), np.zeros(10)
    for context, positions in pbm_impressions(100_000, eta=0.5):
        pairs, p = randomized_pairs(context, 10)
        bias.add(PositionBias.pair_counts(pairs, p, positions.tolist()))
        naive[positions] += 1
    truth = np.arange(1, 11) ** -0.5
    estimate = bias.weights(10)
    np.testing.assert_allclose(estimate, truth, rtol=0.10)
    # the swaps are what makes it work: clicks per position confound bias with relevance
    assert (np.abs(naive / naive[0] - truth) / truth).max() > 0.25


def test_position_bias_starts_from_the_discounts_and_never_rises_down_the_page():
    np.testing.assert_allclose(PositionBias().weights(4), 1 / np.log2(np.arange(2, 6)))
    # more clicks below than above a pair would mean a lower position is examined more
    bias = PositionBias(upper=np.array([10.0]), lower=np.array([500.0]))
    assert bias.weights(2)[1] == 1.0


def test_the_event_store_counts_what_the_estimator_counts(store):
    bias = PositionBias()
    docs = [f"d{i}" for i in range(10)]
    for i, (context, positions) in enumerate(pbm_impressions(300, seed=2)):
        store.log_impression(Impression(
            id=f"i{i}", created=0.0, query="Espresso  grinder!", user_id=None,
            learner="preference_perceptron", model_version=0, doc_ids=docs,
            feature_names=["x"], features=np.zeros((10, 1)),
            ranking=np.arange(10), n_shown=10, context=context))
        for position in positions.tolist():
            store.record_click(f"i{i}", docs[position])
        pairs, p = randomized_pairs(context, 10)
        bias.add(PositionBias.pair_counts(pairs, p, positions.tolist()))
    np.testing.assert_allclose(store.position_bias(max_age=0).weights(10), bias.weights(10))
    # clicks and exposures per normalised query, per document and in total
    rows = store_rows(store, "SELECT query_key, doc_id, clicks FROM click_stats")
    clicks = {(q, d): c for q, d, c in rows}
    assert {q for q, _ in clicks} == {"espresso grinder", "*"}
    assert clicks[("*", "")] == sum(c for (q, d), c in clicks.items() if q == "*" and d)
    assert clicks[("espresso grinder", "d0")] == clicks[("*", "d0")] > 0
    store.close()


def test_click_features_read_the_counts_of_any_number_of_candidates(store):
    """The features of candidates shown under the query, under others only, or never, in
    one statement, and in several when there are more candidates than one holds: the
    counts are those of the store's rows."""
    shown = [f"d{i}" for i in range(10)]
    for i, query in enumerate(["tea kettle", "tea kettle", "teapot"]):
        store.log_impression(Impression(
            id=f"i{i}", created=0.0, query=query, user_id=None,
            learner="preference_perceptron", model_version=0, doc_ids=shown,
            feature_names=["x"], features=np.zeros((10, 1)),
            ranking=np.arange(10)[::-1] if query == "teapot" else np.arange(10), n_shown=10))
        store.record_click(f"i{i}", shown[i + 1])
    cells = {(q, d): (c, e) for q, d, c, e in store_rows(
        store, "SELECT query_key, doc_id, clicks, exposure FROM click_stats")}
    for candidates in (["never", *shown[::-1]], [f"x{i}" for i in range(1200)] + shown):
        counts = np.array([[*cells.get(("tea kettle", d), (0, 0)), *cells.get(("*", d), (0, 0))]
                           for d in candidates], dtype=float)
        expected = lifts_from_counts(counts, *cells[("*", "")], 5.0)
        got = click_lifts(store.click_counts("Tea  Kettle", candidates), 5.0)
        np.testing.assert_array_equal(got, expected)
        assert np.count_nonzero(counts[:, 1]) == 10 and np.count_nonzero(counts[:, 0]) == 2


def test_click_rates_smooth_toward_the_overall_rate():
    # never shown: the overall rate; shown and never clicked: below; clicked: above
    rates = click_rates(np.array([0.0, 0.0, 3.0]), np.array([0.0, 4.0, 4.0]), 0.25, 4.0)
    np.testing.assert_allclose(rates, [0.25, 1.0 / 8, 4.0 / 8])
    # lifts: rates over the overall rate, mu = (9 + 1) / (28 + 2); the document's own rate
    # over the other queries leaves this query's 1 click in 2 exposures out
    features = lifts_from_counts(np.array([[1.0, 2.0, 5.0, 10.0]]), 9.0, 28.0, 5.0)
    mu = 1 / 3
    np.testing.assert_allclose(features, [[(1 + 5 * mu) / 7 / mu, (4 + 5 * mu) / 13 / mu]])
    never_shown = lifts_from_counts(np.zeros((1, 4)), 9.0, 28.0, 5.0)
    np.testing.assert_allclose(never_shown, [[1.0, 1.0]])


def test_queries_are_counted_under_their_normal_form():
    assert query_key("  Espresso\tGRINDER, burr? ") == "espresso grinder burr"
    assert query_key("Ｃａｆé") == query_key("café")


@pytest.fixture
def service(workdir):
    service = RerankerService(load_config(workdir / "config.yaml")).open()
    yield service
    service.close()


def click_columns(service, page):
    imp = service.events.get_impression(page["impression_id"])
    return imp, {doc: tuple(imp.features[i, -2:].tolist()) for i, doc in enumerate(imp.doc_ids)}


def test_no_leakage_a_click_never_changes_an_earlier_impression(service):
    first = service.search("tea kettle", 10)
    second = service.search("tea kettle", 10)
    imp, before = click_columns(service, first)
    _, second_before = click_columns(service, second)
    target = first["hits"][4]["id"]
    service.click(first["impression_id"], target)  # after both searches were served
    for page, expected in ((first, before), (second, second_before)):
        _, after = click_columns(service, page)
        assert after == expected
    _, third = click_columns(service, service.search("tea kettle", 10))
    assert third[target][0] > second_before[target][0]  # the next search sees the click
    rise = {doc: third[doc][0] - second_before[doc][0] for doc in third if doc in second_before}
    assert rise.pop(target) > max(rise.values())  # others move only with the overall rate
    # click_lift:doc counts the other queries only: this query's own click is not in it ...
    assert third[target][1] == pytest.approx(1.0)
    # ... and a click under another query is
    elsewhere = service.search("kettle", 100)
    assert target in {hit["id"] for hit in elsewhere["hits"]}
    service.click(elsewhere["impression_id"], target)
    _, fourth = click_columns(service, service.search("TEA  kettle!", 10))  # the same query
    assert fourth[target][1] > 1.0
    # the trainer learns from the features as logged, not as they are now
    service.trainer.run_once(close_all=True)
    assert service.events.get_impression(first["impression_id"]).features.tolist() == \
        imp.features.tolist()


def test_the_click_features_can_be_switched_off(workdir):
    from tests.support.configs import write_config

    path = write_config(workdir, features={"click_features": False})
    service = RerankerService(load_config(path)).open()
    try:
        assert not any(name.startswith("click_lift") for name in service.model.feature_names)
        page = service.search("tea", 10)
        features = service.events.get_impression(page["impression_id"]).features
        assert features.shape[1] == len(service.model.feature_names) == 4
    finally:
        service.close()


SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE impressions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, created REAL NOT NULL,
    query TEXT NOT NULL, user_id TEXT, learner TEXT NOT NULL, model_version INTEGER NOT NULL,
    doc_ids TEXT NOT NULL, feature_names TEXT NOT NULL, features BLOB NOT NULL,
    ranking BLOB NOT NULL, n_shown INTEGER NOT NULL, log_prob REAL, propensities BLOB,
    teams TEXT, closed_seq INTEGER UNIQUE);
CREATE TABLE clicks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, impression_id TEXT NOT NULL REFERENCES impressions (id),
    doc_id TEXT NOT NULL, position INTEGER NOT NULL, created REAL NOT NULL,
    UNIQUE (impression_id, doc_id));
INSERT INTO meta VALUES ('schema_version', '1'), ('closed_seq', '1'), ('store_id', 'abc');
"""


def test_an_event_store_of_schema_1_is_migrated(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA_1)
        for i, closed in ((0, 1), (1, None)):
            conn.execute("INSERT INTO impressions (id, created, query, learner, model_version, "
                         "doc_ids, feature_names, features, ranking, n_shown, closed_seq) "
                         "VALUES (?, 0, 'Tea Kettle', 'preference_perceptron', 0, ?, ?, ?, ?, "
                         "2, ?)", (f"i{i}", json.dumps(["a", "b", "c"]), json.dumps(["x"]),
                                   np.zeros(3).tobytes(),
                                   np.array([2, 0, 1], dtype=np.int32).tobytes(), closed))
        conn.execute("INSERT INTO clicks (impression_id, doc_id, position, created) "
                     "VALUES ('i0', 'a', 2, 0)")
    store = SQLiteStore(path)
    assert store.store_id == "abc" and store.last_closed_seq() == 1
    imp = store.get_impression("i0")
    assert imp.context is None and imp.clicked == ["a"]
    # the counts are rebuilt from the log: c and a shown twice, a clicked once
    features = click_lifts(store.click_counts("tea  kettle", ["a", "b", "c"]), 1.0)
    assert features[0, 0] > features[2, 0] and features[1, 0] > features[2, 0]
    # exactly: i0 and i1 showed c then a (ranking [2, 0, 1], two shown), weighted 1 and 1/log2(3)
    g2 = 1 / np.log2(3)
    with sqlite3.connect(path) as conn:
        rows = {f"{q}|{d}": [c, e] for q, d, c, e in conn.execute(
            "SELECT query_key, doc_id, clicks, exposure FROM click_stats")}
    assert rows.keys() == {"tea kettle|c", "tea kettle|a", "*|c", "*|a", "*|"}
    for cell, (clicks, exposure) in {"tea kettle|c": (0, 2), "tea kettle|a": (1, 2 * g2),
                                     "*|c": (0, 2), "*|a": (1, 2 * g2),
                                     "*|": (1, 2 + 2 * g2)}.items():
        assert rows[cell] == pytest.approx([clicks, exposure]), cell
    store.record_click("i1", "c")  # the migrated store takes new events
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                            ).fetchone() == (str(SCHEMA_VERSION),)
        # schema 3: the migrated impressions keep their learner's name as their arm
        assert conn.execute("SELECT DISTINCT arm FROM impressions").fetchall() == [
            ("preference_perceptron",)]
        assert conn.execute("SELECT clicks FROM click_stats WHERE query_key = 'tea kettle' "
                            "AND doc_id = 'c'").fetchone() == (1.0,)
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                     (str(SCHEMA_VERSION + 1),))
    with pytest.raises(StoreError, match=f"old.sqlite has event schema version "
                                         f"{SCHEMA_VERSION + 1}.*newer.*upgrade reranker"):
        SQLiteStore(path)


def test_the_stores_own_click_features_are_deprecated_and_the_same(tmp_path):
    """The store returns counts; its old ``click_features`` warns and gives what the
    features layer computes from them."""
    from reranker.stores.conformance import impression

    store = SQLiteStore(tmp_path / "e.sqlite")
    try:
        store.log_impression(impression("i0", 1.0, n=6, shown=4))
        store.record_click("i0", "d4")
        docs = ["d5", "d4", "d0", "never"]
        with pytest.warns(DeprecationWarning, match="click_lifts"):
            old = store.click_features("Q", docs, 5.0)
        np.testing.assert_array_equal(old, click_lifts(store.click_counts("q", docs), 5.0))
        assert old[1, 0] > old[2, 0] == old[3, 0] == 1.0 > old[0, 0]  # clicked, never, shown
    finally:
        store.close()

import sqlite3
import time

import numpy as np
import pytest

from reranker.errors import ConflictError, NotFoundError, StoreError, UnprocessableError
from reranker.events import EventStore, Impression


def impression(imp_id: str, created: float, n: int = 5, shown: int = 3) -> Impression:
    return Impression(id=imp_id, created=created, query="q", user_id=None, learner="x",
                      model_version=0, doc_ids=[f"d{i}" for i in range(n)],
                      feature_names=["a", "b"], features=np.arange(2.0 * n).reshape(n, 2),
                      ranking=np.arange(n)[::-1].copy(), n_shown=shown)


def test_impression_round_trip(tmp_path):
    store = EventStore(tmp_path / "e.sqlite")
    imp = impression("i1", 1.0)
    imp.log_prob, imp.propensities, imp.teams = -1.5, np.linspace(0, 1, 5), ["a", "b", "a"]
    store.log_impression(imp)
    got = store.get_impression("i1")
    assert got.log_prob == -1.5 and got.teams == ["a", "b", "a"]
    np.testing.assert_array_equal(got.propensities, np.linspace(0, 1, 5))
    np.testing.assert_array_equal(got.features, np.arange(10.0).reshape(5, 2))
    np.testing.assert_array_equal(got.ranking, [4, 3, 2, 1, 0])
    assert got.shown_ids() == ["d4", "d3", "d2"]
    assert got.clicked == []


def test_click_validation_and_duplicates(tmp_path):
    store = EventStore(tmp_path / "e.sqlite")
    store.log_impression(impression("i1", time.time()))
    first = store.record_click("i1", "d3")
    assert (first.position, first.duplicate) == (2, False)
    assert store.record_click("i1", "d3").duplicate
    with pytest.raises(NotFoundError, match="unknown impression_id 'nope'"):
        store.record_click("nope", "d3")
    with pytest.raises(UnprocessableError, match="doc_id 'd0' was not shown"):
        store.record_click("i1", "d0")  # a candidate, but below the page
    assert store.get_impression("i1").clicked == ["d3"]
    assert store.stats()["clicks"] == 1


def test_closing_numbers_impressions_in_order_and_refuses_late_clicks(tmp_path):
    store = EventStore(tmp_path / "e.sqlite")
    for k, created in enumerate([10.0, 5.0, 20.0]):
        store.log_impression(impression(f"i{k}", created))
    store.record_click("i0", "d4")
    assert store.close_impressions(before=15.0) == 2
    closed = store.closed_since(0, 10)
    assert [(i.id, i.closed_seq) for i in closed] == [("i1", 1), ("i0", 2)]
    assert closed[1].clicked == ["d4"]
    assert store.record_click("i0", "d4").duplicate  # a repeat of a counted click is fine
    with pytest.raises(ConflictError, match="no longer accepts clicks"):
        store.record_click("i0", "d3")
    assert store.close_impressions(before=float("inf")) == 1
    assert [i.closed_seq for i in store.closed_since(2, 10)] == [3]
    assert store.closed_since(3, 10) == []


def test_clicks_survive_a_new_connection(tmp_path):
    path = tmp_path / "e.sqlite"
    store = EventStore(path)
    store.log_impression(impression("i1", 1.0))
    store.record_click("i1", "d4")
    # another process's view: a plain connection sees the committed click
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT doc_id FROM clicks").fetchall() == [("d4",)]


def test_unusable_store_files_are_named(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        EventStore(tmp_path / "missing" / "e.sqlite")
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="bad.sqlite is not a usable SQLite database"):
        EventStore(bad)

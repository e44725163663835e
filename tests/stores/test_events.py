"""The event store's guarantees, on every built-in store: SQLite and a real PostgreSQL
server (the ``store`` fixture is parametrized over both)."""

import json
import threading
import time

import numpy as np
import pytest

from reranker.core.errors import ConflictError, NotFoundError, StoreError, UnprocessableError
from reranker.stores.sqlite import SQLiteStore
from tests.support.stores import impression


def test_impression_round_trip(store):
    imp = impression("i1", 1.0, context={"k": [1, 2]}, arm="a1", experiment="e",
                     page_key="pk", user_id="u")
    imp.log_prob, imp.propensities, imp.teams = -1.5, np.linspace(0, 1, 5), ["a", "b", "a"]
    store.log_impression(imp)
    got = store.get_impression("i1")
    assert got.log_prob == -1.5 and got.teams == ["a", "b", "a"]
    assert (got.context, got.arm, got.experiment, got.page_key, got.user_id) == (
        {"k": [1, 2]}, "a1", "e", "pk", "u")
    np.testing.assert_array_equal(got.propensities, np.linspace(0, 1, 5))
    np.testing.assert_array_equal(got.features, np.arange(10.0).reshape(5, 2))
    np.testing.assert_array_equal(got.ranking, [4, 3, 2, 1, 0])
    assert got.shown_ids() == ["d4", "d3", "d2"]
    assert got.clicked == [] and got.reward is None and got.created == 1.0
    with pytest.raises(NotFoundError, match="unknown impression_id 'nope'"):
        store.get_impression("nope")


def test_click_validation_and_duplicates(store):
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


def test_a_later_page_counts_positions_in_the_whole_ranking(store):
    store.log_impression(impression("p2", 1.0, n=8, shown=3, offset=3))
    assert store.record_click("p2", "d3").position == 5  # ranking 7..0: d4 d3 d2 shown


def test_closing_numbers_impressions_in_order_and_refuses_late_clicks(store):
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
    assert store.last_closed_seq() == 3 and store.close_impressions(float("inf")) == 0


def test_closing_with_a_limit_and_reading_by_arm(store):
    for k, arm in enumerate(["a", "b", None, "a"]):
        store.log_impression(impression(f"i{k}", float(k), arm=arm))
    assert store.close_impressions(before=float("inf"), limit=3) == 3
    assert store.pending(cursor=1) == {"open_impressions": 1, "closed_unapplied": 2,
                                       "oldest_unapplied": 1.0,  # i1's creation
                                       "oldest_open": 3.0}  # i3's
    assert store.pending(cursor=3)["oldest_unapplied"] is None
    store.close_impressions(before=float("inf"))
    assert store.pending(cursor=3)["oldest_open"] is None
    # an arm reads its own impressions and the mixed lists (arm None)
    assert [i.id for i in store.closed_since(0, 10, arms=("a",))] == ["i0", "i2", "i3"]
    assert [i.id for i in store.closed_since(1, 2)] == ["i1", "i2"]
    assert store.stats() == {"impressions": 4, "open_impressions": 0, "clicks": 0,
                             "closed_seq": 4}


def test_rewards_are_replaced_while_open_and_frozen_after(store):
    store.log_impression(impression("i1", 1.0))
    assert store.record_reward("i1", 2.5).replaced is None
    assert store.record_reward("i1", 4.0).replaced == 2.5
    store.close_impressions(before=float("inf"))
    assert store.record_reward("i1", 4.0).replaced == 4.0  # the same value again is fine
    with pytest.raises(ConflictError, match="no longer accepts a reward"):
        store.record_reward("i1", 5.0)
    with pytest.raises(NotFoundError, match="unknown impression_id 'nope'"):
        store.record_reward("nope", 1.0)
    assert store.closed_since(0, 1)[0].reward == 4.0


def test_first_pages_and_experiment_rows(store):
    store.log_impression(impression("old", 1.0, page_key="k"))
    store.log_impression(impression("new", 2.0, page_key="k", experiment="exp", arm=None,
                                    teams=["a", "b", "a"]))
    store.log_impression(impression("page2", 3.0, n=8, page_key="k", offset=3, experiment="exp"))
    assert store.first_page("k", since=0.0).id == "new"
    assert store.first_page("k", since=2.5) is None and store.first_page("x", 0.0) is None
    store.record_click("new", "d2")
    store.record_click("new", "d4")
    store.close_impressions(before=float("inf"))
    rows = [(*row[:4], sorted(row[4])) for row in store.experiment_rows("exp", 0, 10)]
    assert rows == [(2, None, json.dumps(["a", "b", "a"]), 3, [1, 3]), (3, None, None, 3, [])]
    assert store.experiment_rows("exp", after=2, limit=10)[0][0] == 3


def test_closed_first_pages_count_the_searches_in_and_outside_an_experiment(store):
    """The traffic share's counts: first pages closed after a cursor and created since a
    time, and those of the experiment; later pages and open impressions are left out."""
    store.log_impression(impression("before", 1.0))
    store.log_impression(impression("in1", 2.0, experiment="exp", arm=None))
    store.log_impression(impression("out1", 3.0))
    store.log_impression(impression("page2", 4.0, n=8, offset=3, page_key="k"))
    store.log_impression(impression("in2", 5.0, experiment="exp", arm=None))
    store.log_impression(impression("other", 6.0, experiment="another"))
    assert store.closed_first_pages("exp", 0, 1.5, 100) == (0, 0, 0)  # none closed yet
    store.close_impressions(before=float("inf"))
    store.log_impression(impression("open", 7.0, experiment="exp", arm=None))
    assert store.closed_first_pages("exp", 0, 1.5, 100) == (6, 4, 2)
    # read in batches, the counts add up, and the cursor moves past every row read
    first = store.closed_first_pages("exp", 0, 1.5, 3)
    assert first == (3, 2, 1)
    assert store.closed_first_pages("exp", first[0], 1.5, 3) == (6, 2, 1)
    assert store.closed_first_pages("exp", 6, 1.5, 3) == (6, 0, 0)


def test_experiment_state_changes_are_atomic_across_instances(open_store):
    stores = [open_store(), open_store()]
    assert stores[0].experiment_state("e") == {}

    def bump(store):
        for _ in range(15):
            store.update_experiment_state("e", lambda s: {"n": s.get("n", 0) + 1}, time.time())

    threads = [threading.Thread(target=bump, args=(s,)) for s in stores for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert stores[1].experiment_state("e") == {"n": 60}  # no change lost


def test_clicks_racing_the_close_are_either_counted_or_refused(open_store):
    """Clickers and a closer on their own connections: an accepted click is always in the
    closed impression the trainer reads, and the numbers have no gap."""
    writer = open_store()
    count = 40
    for k in range(count):
        writer.log_impression(impression(f"i{k}", float(k), n=6, shown=6))
    writer.flush()  # written behind: the other objects see them once written
    accepted, errors = set(), []

    def click(store, doc):
        for k in range(count):
            try:
                if not store.record_click(f"i{k}", doc).duplicate:
                    accepted.add((f"i{k}", doc))
            except ConflictError:
                pass
            except Exception as exc:  # noqa: BLE001 -- reported below
                errors.append(exc)

    def close(store):
        for k in range(count):
            store.close_impressions(before=k + 0.5, limit=2)

    threads = [threading.Thread(target=click, args=(open_store(), f"d{d}")) for d in range(3)]
    threads += [threading.Thread(target=close, args=(open_store(),)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    writer.close_impressions(before=float("inf"))
    closed = writer.closed_since(0, 1000)
    assert [imp.closed_seq for imp in closed] == list(range(1, count + 1))
    assert [imp.id for imp in closed] == [f"i{k}" for k in range(count)]  # oldest first
    assert {(imp.id, doc) for imp in closed for doc in imp.clicked} == accepted
    assert writer.stats()["clicks"] == len(accepted)


def test_clicks_survive_a_new_connection(open_store):
    store = open_store()
    store.log_impression(impression("i1", 1.0))
    store.record_click("i1", "d4")
    store.record_reward("i1", 1.5)
    # another process's view: its own connections see the committed click and reward
    other = open_store()
    assert other.get_impression("i1").clicked == ["d4"] and other.store_id == store.store_id
    assert other.get_impression("i1").reward == 1.5


def test_unusable_store_files_are_named(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        SQLiteStore(tmp_path / "missing" / "e.sqlite")
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="bad.sqlite is not a usable SQLite database"):
        SQLiteStore(bad)


def test_sqlite_copies_its_log_into_the_database_in_a_thread_of_its_own(tmp_path):
    """Commits leave the write-ahead log's checkpoint to the store's own thread, which
    copies their pages into the database within a second, no further commit needed (left
    to SQLite, the commit that takes the log past its threshold does it, and the searches
    waiting for that commit wait for it too)."""
    store = SQLiteStore(tmp_path / "e.sqlite")
    try:
        database = tmp_path / "e.sqlite"
        size = database.stat().st_size
        for i in range(60):  # some 60 pages: far from the threshold of a commit's own
            imp = impression(f"i{i}", float(i), n=100, shown=10)
            imp.features = np.random.default_rng(i).random((100, 2))
            store.log_impression(imp)
        store.flush()
        deadline = time.monotonic() + 5.0
        while database.stat().st_size == size and time.monotonic() < deadline:
            time.sleep(0.05)
        assert database.stat().st_size > size + 100_000
        thread = store._checkpoints._thread
        assert thread.is_alive()
        # a commit checkpoints by itself only far past SQLite's own threshold (1,000 pages)
        assert store._conn().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 4000
    finally:
        store.close()
    assert not thread.is_alive()


def test_a_checkpoint_waits_for_no_writer(tmp_path):
    """The store's checkpoint copies what it can and returns: it never waits for another
    connection's write lock (a checkpoint that did would hold its thread, and with it the
    next one, for up to store.timeout whenever another process writes)."""
    import sqlite3

    store = SQLiteStore(tmp_path / "e.sqlite", busy_timeout=5.0)
    other = sqlite3.connect(tmp_path / "e.sqlite", timeout=5.0, isolation_level=None)
    try:
        store.log_impression(impression("i0", 0.0, n=100, shown=10))
        store.flush()
        store._checkpoints.stop()  # checkpoint by hand below, not from the thread
        other.execute("BEGIN IMMEDIATE")  # another process's writer holds the lock
        started = time.monotonic()
        store._checkpoints._checkpoint(store, 1)
        assert time.monotonic() - started < 1.0
        # the log's pages are in the database all the same (the writer has written none)
        assert store._checkpoints._checkpointed == 1
        log_pages, copied = store._conn().execute(
            "PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1:]
        assert log_pages == copied > 0
    finally:
        other.rollback()
        other.close()
        store.close()


def test_the_checkpoints_go_on_for_a_store_used_again_and_end_with_a_store_dropped(tmp_path):
    import gc

    store = SQLiteStore(tmp_path / "e.sqlite")
    store.check_writable()  # a commit (no impression: its writer thread holds the store)
    first = store._checkpoints._thread
    store.close()
    store.check_writable()  # used again: connections reopen
    again = store._checkpoints._thread
    assert not first.is_alive() and again.is_alive()
    time.sleep(0.8)  # its commit checkpointed: the thread waits for the next
    del store
    gc.collect()
    again.join(3.0)
    assert not again.is_alive()  # gone with its store, unclosed


def test_a_forked_sqlite_store_checkpoints_from_a_thread_of_its_own(tmp_path):
    import os

    store = SQLiteStore(tmp_path / "e.sqlite")
    try:
        store.log_impression(impression("parent", 0.0))
        store.flush()
        assert store._checkpoints._thread is not None
        pid = os.fork()
        if pid == 0:  # the parent's thread is not the child's: its first commit starts one
            fresh = store._checkpoints._thread is None
            store.log_impression(impression("child", 1.0))
            store.flush()
            thread = store._checkpoints._thread
            os._exit(0 if fresh and thread is not None and thread.is_alive() else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        store.close()


def test_the_trainers_status_is_kept_for_every_process(store):
    """What a trainer records, any process sharing the store reads; recorded again, it is
    replaced."""
    assert store.trainer_status() is None
    store.record_trainer({"last_run": 5.0, "last_error": None, "cursors": {"a": 3},
                          "interval": 1.0})
    store.record_trainer({"last_run": 6.0, "last_error": "disk full", "cursors": {},
                          "interval": 1.0})
    assert store.trainer_status() == {"last_run": 6.0, "last_error": "disk full",
                                      "cursors": {}, "interval": 1.0}

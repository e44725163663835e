"""The event store's guarantees: the shipped conformance checks of each part of the interface
(reranker.stores.conformance) on every built-in store, SQLite and a real PostgreSQL server (the
``store_section`` fixture is parametrized over both); that each check fails on a store that
breaks what it checks; and SQLite's own workings."""

import contextlib
import dataclasses
import time

import numpy as np
import pytest

from reranker.core.config import config_from_dict
from reranker.core.errors import StoreError
from reranker.features.clicks import PositionBias, click_lifts
from reranker.stores import ClickCounts, ImpressionLog, Leadership, open_event_store
from reranker.stores.conformance import impression
from reranker.stores.events import ClickResult, RewardResult
from reranker.stores.postgres import PostgresStore
from reranker.stores.sqlite import SQLiteStore
from reranker.testing import STORE_CHECKS, check_event_store

CHECKS = {check.__name__: check for checks in STORE_CHECKS.values() for check in checks}


@pytest.mark.parametrize("check", CHECKS.values(), ids=CHECKS.keys())
def test_every_store_passes_the_conformance_checks(check, store_section, tmp_path):
    check(lambda: open_event_store(config_from_dict({"store": store_section}, tmp_path)))


#: The optional parts a built-in store leaves to the interface's default on purpose: SQLite
#: is opened by the processes of one machine only, whose model-folder lock already excludes
#: two trainers.
DEFAULTS_KEPT = {(SQLiteStore, "trainer_lock")}


@pytest.mark.parametrize("store_class", [SQLiteStore, PostgresStore], ids=lambda c: c.__name__)
def test_the_built_in_stores_take_no_optional_exit_of_the_checks(store_class):
    """The checks accept a store that keeps an optional method's default (no leadership, no
    retention, no shared limits); the built-in stores implement every one, so each check
    really runs on them."""
    defaults = []
    for part in STORE_CHECKS:
        for name, method in vars(part).items():
            if callable(method) and not name.startswith("_") \
                    and not getattr(method, "__isabstractmethod__", False) \
                    and getattr(store_class, name) is method:
                defaults.append((store_class, name))
    assert set(defaults) == {kept for kept in DEFAULTS_KEPT if kept[0] is store_class}


def test_the_checks_are_grouped_by_part_and_each_runs_on_a_new_store(tmp_path):
    assert [part.__name__ for part in STORE_CHECKS] == ["ImpressionLog", "ClickCounts",
                                                        "Coordination", "Maintenance"]
    assert len(CHECKS) == sum(len(checks) for checks in STORE_CHECKS.values())
    paths = []

    def new_store():
        path = tmp_path / f"e{len(paths)}.sqlite"
        paths.append(path)
        return lambda: SQLiteStore(path)

    check_event_store(new_store, parts=(ClickCounts,))
    assert len(paths) == len(STORE_CHECKS[ClickCounts])


class _Everywhere(Leadership):
    pass


def _counted_twice(self, impression_id, doc_id, now=None):
    result = SQLiteStore.record_click(self, impression_id, doc_id, now)
    return type(result)(result.impression_id, result.doc_id, result.position, False)


def _exchange_unsummed(self, added, since, prune):
    SQLiteStore.exchange_requests(self, added, since, prune)
    return [(scope, client, slot, n) for (scope, client, slot), n in added.items()], since + 1


def _retain_everything(self, before, readers, keep_experiment=None):
    return SQLiteStore.retain(self, before, [], None)


def _without_context(self, impression_id):
    imp = SQLiteStore.get_impression(self, impression_id)
    imp.context = None
    return imp


def _without_clicks(self, cursor, limit, arms=None):
    imps = SQLiteStore.closed_since(self, cursor, limit, arms)
    for imp in imps:
        imp.clicked = []
    return imps


def _read_then_write(self, name, change, now):
    state = change(self.experiment_state(name))
    time.sleep(0.002)  # another thread's change comes between: it is lost
    return SQLiteStore.update_experiment_state(self, name, lambda _: state, now)


#: A store that breaks one guarantee, per check that must catch it: (check, broken method,
#: its replacement).
BROKEN = [
    ("check_a_click_is_validated_and_counted_once", "record_click", _counted_twice),
    ("check_closing_numbers_impressions_in_order", "closed_since",
     lambda self, cursor, limit, arms=None: SQLiteStore.closed_since(
         self, cursor, limit, arms)[::-1]),
    ("check_a_lean_read_leaves_out_only_what_no_click_or_reward_needs", "closed_since_lean",
     lambda self, cursor, limit, arms=None: [  # every page bare, clicked or not
         dataclasses.replace(i, doc_ids=[], features=None, bare=True)
         for i in SQLiteStore.closed_since(self, cursor, limit, arms)]),
    ("check_retention_forgets_the_counts_of_queries_searched_no_more", "_forget_queries",
     lambda self, before: 1),  # says it forgot one, and deletes nothing
    ("check_a_reward_is_replaced_while_open_and_frozen_after", "record_reward",
     lambda self, impression_id, value, now=None: SQLiteStore.record_reward(
         self, impression_id, value + 1.0, now)),
    ("check_click_counts_add_up", "click_counts",  # lifts where counts are due
     lambda self, query, doc_ids: (np.pad(click_lifts(SQLiteStore.click_counts(
         self, query, doc_ids), 5.0), ((0, 0), (0, 2))), (0.0, 0.0))),
    ("check_position_bias_counts_the_randomised_pairs", "position_bias",
     lambda self, max_age=None: PositionBias()),
    ("check_request_counts_are_summed_across_objects", "exchange_requests",
     _exchange_unsummed),
    ("check_trainer_leadership_has_one_holder", "trainer_leadership",
     lambda self: _Everywhere()),
    ("check_the_trainer_lock_excludes_other_objects", "trainer_lock",
     lambda self, name: contextlib.nullcontext()),
    ("check_the_signing_secret_is_one_for_the_store", "signing_secret",
     lambda self: f"{time.monotonic_ns():040d}"),
    ("check_the_trainer_status_is_shared", "trainer_status",
     lambda self: {"last_run": 5.0}),
    ("check_stats_count_the_log", "stats",
     lambda self: {**SQLiteStore.stats(self), "clicks": 0}),
    ("check_retention_removes_only_what_every_reader_has_applied", "retain",
     _retain_everything),
    ("check_impressions_read_back_as_logged", "get_impression", _without_context),
    ("check_a_later_page_counts_positions_in_the_whole_ranking", "record_click",
     lambda self, impression_id, doc_id, now=None: ClickResult(impression_id, doc_id, 2, False)),
    ("check_a_batch_of_clicks_has_an_outcome_per_click", "record_clicks",
     lambda self, clicks: [o for o in SQLiteStore.record_clicks(self, clicks)
                           if isinstance(o, ClickResult)]),
    ("check_closing_with_a_limit_and_reading_by_arm", "close_impressions",
     lambda self, before, limit=None: SQLiteStore.close_impressions(self, before)),
    ("check_first_pages_and_experiment_rows", "first_page",
     lambda self, page_key, since: None),
    ("check_closed_first_pages_are_counted", "closed_first_pages",
     lambda self, name, after, since, limit: (after, 0, 0)),
    ("check_pages_since_reads_the_window", "pages_since",  # the arms left unfiltered
     lambda self, since, arms=None: SQLiteStore.pages_since(self, since)),
    ("check_writes_are_seen_by_every_object", "record_reward",
     lambda self, impression_id, value, now=None: RewardResult(impression_id, value, None)),
    ("check_clicks_racing_the_close_are_counted_or_refused", "closed_since", _without_clicks),
    ("check_experiment_state_changes_are_atomic", "update_experiment_state", _read_then_write),
    ("check_a_sound_store_passes_its_health_checks", "disk_bytes", lambda self: 0),
    ("check_retention_compacts_the_kept_experiment", "retain",
     lambda self, before, readers, keep_experiment=None: SQLiteStore.retain(
         self, before, readers)),
]


@pytest.mark.parametrize("check, method, replacement", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_check_fails_on_a_store_that_breaks_what_it_checks(tmp_path, check, method,
                                                             replacement):
    assert {b[0] for b in BROKEN} == set(CHECKS)  # every check can fail
    broken = type("Broken", (SQLiteStore,), {method: replacement})
    CHECKS[check](lambda: SQLiteStore(tmp_path / "e.sqlite"))  # sound, it passes
    with pytest.raises(AssertionError, match="Broken"):
        CHECKS[check](lambda: broken(tmp_path / "broken.sqlite"))


def test_the_default_pages_since_passes_its_check(tmp_path):
    """A store that keeps the interface's ``pages_since`` (read through ``closed_since``)
    gives what the check asks, and leaves the pages still open out."""
    kept = type("Kept", (SQLiteStore,), {"pages_since": ImpressionLog.pages_since})
    CHECKS["check_pages_since_reads_the_window"](lambda: kept(tmp_path / "kept.sqlite"))
    store = kept(tmp_path / "open.sqlite")
    try:
        store.log_impression(impression("open", 1.0))
        assert list(store.pages_since(0.0)) == []
        assert [page.created for page in SQLiteStore.pages_since(store, 0.0)] == [1.0]
    finally:
        store.close()


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
        # (a turn of the thread may come between the commits and copy only the first ones)
        while database.stat().st_size <= size + 100_000 and time.monotonic() < deadline:
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

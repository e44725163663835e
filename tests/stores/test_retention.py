"""Retention (store.retention), on every built-in store (SQLite and a real PostgreSQL
server): what reads a compacted page says so, the trainer and ``reranker prune`` remove only
what every arm has applied, and a store under steady traffic stays the same size. (That
retention removes only what every reader has applied and compacts the running experiment's
pages instead is the store's conformance check: reranker.stores.conformance, run by
test_events.py.)"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

from reranker.core.config import load_config
from reranker.core.errors import GoneError
from reranker.core.plugins import get_plugin_manager
from reranker.evaluation.logs import pages_from_log
from reranker.experiments.experiment import offline_status
from reranker.serving.explain import explain_impression
from reranker.serving.service import RerankerService
from reranker.stores import Reader, open_event_store
from reranker.stores.conformance import impression
from tests.support.configs import experiment_config, write_config
from tests.support.servers import run_cli
from tests.support.stores import served_like, store_rows
from tests.support.traffic import learn


def test_retention_deletes_the_rows_of_a_removed_page(store):
    """Under the conformance check's counts: a removed page's click and reward rows go with
    it, in the tables themselves, while the click counts the features read stay."""
    for i in range(2):
        store.log_impression(impression(f"i{i}", float(i), arm="a"))
        store.record_click(f"i{i}", "d4")
    store.record_reward("i0", 1.0)
    store.close_impressions(5.0)
    counts = store_rows(store, "SELECT * FROM click_stats ORDER BY query_key, doc_id")
    assert store.retain(100.0, [Reader(("a",), 1)]).deleted == 1
    assert store_rows(store, "SELECT COUNT(*) FROM clicks WHERE impression_id = 'i0'") == [(0,)]
    assert store_rows(store, "SELECT COUNT(*) FROM rewards") == [(0,)]
    assert store_rows(store, "SELECT COUNT(*) FROM clicks WHERE impression_id = 'i1'") == [(1,)]
    assert store_rows(store, "SELECT * FROM click_stats ORDER BY query_key, doc_id") == counts


def test_what_reads_a_compacted_page_says_so(workdir):
    config = load_config(experiment_config(workdir))
    service = RerankerService(config).open()
    try:
        pages = [service.search("tea kettle", 10) for _ in range(3)]
        service.click(pages[0]["impression_id"], pages[0]["hits"][1]["id"])
        service.trainer.run_once(close_all=True)
        done = service.events.retain(time.time() + 1, [
            Reader(tuple(arm.names()), service.events.last_closed_seq())
            for arm in service.arms], keep_experiment="trial")
        assert done.compacted == 3
        with pytest.raises(GoneError, match="older than store.retention: its features were "
                                            "dropped"):
            explain_impression(service, pages[0]["impression_id"])
        logged = pages_from_log(service.events, service.arms[0].model)
        assert logged.pages == [] and logged.skipped == {
            "pages whose features retention dropped (store.retention)": 3}
    finally:
        service.close()
    assert offline_status(config, get_plugin_manager())["impressions"] == 3  # its report


def test_the_trainer_never_removes_a_page_it_has_not_applied(workdir):
    path = write_config(workdir, store={"retention": 1.0, "retention_interval": 0.01})
    service = RerankerService(load_config(path)).open()
    try:
        trainer = service.trainer
        learn(lambda query: service.search(query, 10), service.click, pages=5)
        service.events.close_impressions(time.time() + 1)  # closed, not applied
        trainer.clock = lambda: time.time() + 60  # every page is a minute old
        assert trainer.retain().deleted == 0
        time.sleep(0.05)  # store.retention_interval passes
        assert trainer.run_pass().applied == 5  # ... then applied, and removed in the pass
        assert service.events.stats()["impressions"] == 0
        assert service.events.stats()["closed_seq"] == 5
        trainer.clock = time.time
        service.search("tea kettle", 10)  # newer than store.retention: kept
        trainer.run_once()
        assert trainer.retain().deleted == 0 and service.events.stats()["impressions"] == 1
    finally:
        service.close()


def learned_and_aged(config) -> None:
    """20 pages learned from and trained on, then more than a second old."""
    service = RerankerService(load_config(config)).open()
    try:
        learn(lambda query: service.search(query, 10), service.click, pages=20)
        service.trainer.run_once(close_all=True)
    finally:
        service.close()
    time.sleep(1.1)


def test_reranker_prune(workdir):
    config = workdir / "config.yaml"
    result = run_cli("prune", "-c", str(config), check=False)
    assert result.returncode == 2 and "set store.retention" in result.stderr
    learned_and_aged(config)
    result = run_cli("prune", "-c", str(config), "--older-than", "1")
    assert "deleted 20 impressions older than 1 s that every arm has learned from" in \
        result.stdout
    # a file that did not shrink is explained (the space is reused; --vacuum gives it back)
    now, before = map(float, re.search(r"takes ([\d.]+) MB on disk \(before: ([\d.]+) MB",
                                       result.stdout).groups())
    assert ("--vacuum gives it back" in result.stdout) == (now >= before), result.stdout
    result = run_cli("prune", "-c", str(config), "--older-than", "1", "--vacuum")
    assert "deleted 0 impressions" in result.stdout and "--vacuum gives" not in result.stdout
    assert "the event store takes" in result.stdout
    store = open_event_store(load_config(config))
    try:
        assert store.stats()["impressions"] == 0
    finally:
        store.close()


def test_a_store_under_steady_traffic_stays_the_same_size(store):
    """Rounds of 100 pages of 100 candidates, closed, applied and then removed after five
    rounds: the store stops growing once the first pages go (PostgreSQL: with the vacuum
    that autovacuum runs by itself), where without retention it would grow by a round's
    pages every round."""
    rng = np.random.default_rng(2)
    sizes = []
    for t in range(25):
        for i in range(100):
            imp = impression(f"{t}-{i}", float(t), n=100, shown=10, arm="a")
            imp.features = served_like(100, rng)
            store.log_impression(imp)
            store.record_click(imp.id, imp.shown_ids()[i % 10])
        store.close_impressions(t + 0.5)
        store.retain(t - 4.5, [Reader(("a",), store.last_closed_seq())])
        if store.name == "postgresql":
            store.vacuum()
        sizes.append(store.disk_bytes())
    assert store.stats()["impressions"] == 500
    # over the last 15 rounds, less than what 2 rounds added while nothing was removed
    per_round = (sizes[4] - sizes[0]) / 4
    assert per_round > 0 and max(sizes[10:]) - sizes[9] < 2 * per_round, sizes


def test_reranker_prune_on_postgresql_explains_a_size_that_did_not_change(workdir,
                                                                            postgres_dsn):
    config = write_config(workdir, store={"type": "postgresql", "dsn": postgres_dsn})
    learned_and_aged(config)
    result = run_cli("prune", "-c", str(config), "--older-than", "1")
    assert "deleted 20 impressions older than 1 s" in result.stdout
    now, before = map(float, re.search(r"takes ([\d.]+) MB on disk \(before: ([\d.]+) MB",
                                       result.stdout).groups())
    assert ("only VACUUM FULL" in result.stdout) == (now >= before), result.stdout


def test_a_store_of_searches_of_new_queries_stays_the_same_size(store):
    """Rounds of 50 pages, each of a query never searched before and clicked: retention
    forgets the click counts of the queries of five rounds ago, so the counts stop growing
    once it starts, where without it they would grow by a round's queries every round."""
    rng = np.random.default_rng(3)
    rows, ends = [], []
    for t in range(16):
        for i in range(50):
            imp = impression(f"{t}-{i}", float(t), n=20, shown=10, arm="a",
                             query=f"query {t} {i}")
            imp.features = served_like(20, rng)
            store.log_impression(imp)
            store.record_click(imp.id, imp.shown_ids()[i % 10])
        store.flush()
        ends.append(time.time())
        time.sleep(0.01)
        store.close_impressions(t + 0.5)
        if t >= 5:
            done = store.retain(ends[t - 5], [Reader(("a",), store.last_closed_seq())])
            assert done.forgotten == 50, done
        rows.append(store_rows(store, "SELECT COUNT(*) FROM click_stats")[0][0])
    per_round = (rows[4] - rows[0]) / 4
    assert per_round >= 500 and max(rows[6:]) - rows[5] <= per_round * 0.1, rows
    # the counts over all queries (of the ten documents every page showed) and the total stay
    assert store_rows(store, "SELECT COUNT(*) FROM click_stats WHERE query_key = '*'")[0][0] \
        == 11


def test_a_store_of_schema_4_is_migrated_and_its_counts_age_from_then(open_store):
    store = open_store()
    store.log_impression(impression("i0", 1.0, query="tea"))
    store.flush()
    with store._write() as conn:  # the store as schema 4 left it
        store._run(conn, "ALTER TABLE click_stats DROP COLUMN updated")
        store._run(conn, "UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    store.close()
    migrated_at = time.time()
    store = open_store()
    assert store_rows(store, "SELECT value FROM meta WHERE key = 'schema_version'") == [("5",)]
    updated = [row[0] for row in store_rows(store, "SELECT updated FROM click_stats")]
    assert updated and all(migrated_at - 1 <= value <= time.time() for value in updated)
    assert store.retain(migrated_at - 60, [Reader(("a",), 0)]).forgotten == 0
    assert store.retain(time.time() + 1, [Reader(("a",), 0)]).forgotten == 1
    assert store.click_counts("tea", ["d4"])[0][0, :2].tolist() == [0.0, 0.0]

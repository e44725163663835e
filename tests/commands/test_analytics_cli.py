"""``reranker analytics`` through click's runner on a store filled with known pages: the
tables, CSV and JSON say the same figures; an arm, the window, a file to write; and clear
messages for an empty or missing store, an unknown arm and a bad config."""

from __future__ import annotations

import csv
import io
import json
import time

import pytest
from click.testing import CliRunner

from reranker.commands.main import cli
from reranker.core.config import load_config
from reranker.stores import open_event_store
from tests.support.analytics import ESPRESSO, TEA, ZZZ, fill_pages
from tests.support.configs import write_config


@pytest.fixture
def filled(tmp_path):
    """A config whose SQLite store holds the known pages, logged around now."""
    path = write_config(tmp_path)
    store = open_event_store(load_config(path))
    try:
        fill_pages(store, time.time())
    finally:
        store.close()
    return path


def run(*args: str, ok: bool = True):
    result = CliRunner().invoke(cli, ["analytics", *args])
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_json_is_the_document_of_the_figures(filled):
    report = json.loads(run("-c", str(filled), "--format", "json").stdout)
    assert report["top_queries"] == [TEA, ESPRESSO, ZZZ]
    assert report["no_result"] == [ZZZ] and report["no_click"] == [TEA]
    assert report["moved"] == [ESPRESSO, TEA]
    assert report["totals"]["searches"] == 4 and report["days"] == 7
    assert [entry["clicks"] for entry in report["click_ranks"]] == [2, 0, 1, 0, 1]


def test_csv_has_a_row_per_query_of_each_list_and_per_rank(filled):
    rows = list(csv.DictReader(io.StringIO(run("-c", str(filled), "--format", "csv").stdout)))
    top = [row for row in rows if row["section"] == "top_queries"]
    assert [row["query"] for row in top] == ["tea kettle", "espresso", "zzz"]
    assert top[0]["ctr"] == "0.6667" and top[0]["moved"] == "1.2" and top[2]["ctr"] == ""
    assert [row["query"] for row in rows if row["section"] == "no_result"] == ["zzz"]
    ranks = [(row["rank"], row["clicks"]) for row in rows if row["section"] == "click_ranks"]
    assert ranks == [("1", "2"), ("2", "0"), ("3", "1"), ("4", "0"), ("5", "1")]


def test_tables_show_each_list_and_the_rank_bars(filled):
    out = run("-c", str(filled)).stdout
    for title in ("All queries", "Top queries", "Queries without results",
                  "Queries without clicks", "moved furthest", "Clicks by rank"):
        assert title in out
    tea = next(line for line in out.splitlines() if "tea kettle" in line)
    assert [cell.strip() for cell in tea.strip("│┃ ").split("│")] == [
        "tea kettle", "2", "3", "3", "0.67", "3.00", "0", "1", "1.20"]
    bars = [line for line in out.splitlines() if "#" in line]
    assert len(bars) == 3 and "#" * 40 in bars[0] and "#" * 20 in bars[1]


def test_a_window_a_top_and_a_file(filled, tmp_path):
    out = tmp_path / "figures.json"
    result = run("-c", str(filled), "--format", "json", "--days", "8.5", "--top", "1",
                 "--out", str(out))
    assert result.stdout == "" and f"written: {out}" in result.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["totals"]["searches"] == 5 and len(report["top_queries"]) == 1
    assert report["top_queries"][0]["query"] == "tea kettle"


def test_an_arm_counts_the_pages_it_showed_alone(tmp_path):
    from reranker.core.plugins import get_plugin_manager
    from reranker.models.arms import arms_from_config
    from reranker.stores.conformance import impression

    path = write_config(tmp_path, experiment={
        "mode": "interleave", "name": "trial", "arms": {
            "engine": {"name": "backend_order"}, "learned": {"name": "random"}}})
    config = load_config(path)
    ids = {arm.labels[0]: arm.id for arm in arms_from_config(config, get_plugin_manager())}
    store = open_event_store(config)
    try:
        now = time.time()
        store.log_impression(impression("e", now - 60, query="tea", arm=ids["engine"]))
        store.log_impression(impression("l1", now - 50, query="tea", arm=ids["learned"]))
        store.log_impression(impression("l2", now - 40, query="mugs", arm=ids["learned"]))
        store.log_impression(impression("mixed", now - 30, query="tea", arm=None))
    finally:
        store.close()
    report = json.loads(run("-c", str(path), "--arm", "learned", "--format", "json").stdout)
    assert report["arm"] == "learned" and report["totals"]["searches"] == 2
    assert [(q["query"], q["searches"]) for q in report["top_queries"]] == [("mugs", 1),
                                                                           ("tea", 1)]
    everything = json.loads(run("-c", str(path), "--format", "json").stdout)
    assert everything["totals"]["searches"] == 4
    failed = run("-c", str(path), "--arm", "nope", ok=False)
    assert failed.exit_code == 1 and "Traceback" not in failed.output
    assert "no arm is labelled 'nope'; the configured arms: engine, learned" in failed.stderr


def test_an_empty_or_missing_store_and_a_bad_config_are_said(tmp_path):
    path = write_config(tmp_path)
    missing = run("-c", str(path), ok=False)
    assert missing.exit_code == 1 and "events.sqlite does not exist" in missing.stderr
    open_event_store(load_config(path)).close()
    empty = run("-c", str(path))
    assert "no search was logged in the last 7 days" in empty.stdout
    assert "Traceback" not in empty.output
    as_json = run("-c", str(path), "--format", "json")
    assert json.loads(as_json.stdout)["top_queries"] == []
    assert "no search was logged" in as_json.stderr
    bad = run("-c", str(tmp_path / "nope.yaml"), ok=False)
    assert bad.exit_code == 1 and "nope.yaml" in bad.stderr and "Traceback" not in bad.output
    for option, value, field in (("--days", "0", "'days'"), ("--top", "0", "'top'")):
        refused = run(option, value, ok=False)
        assert refused.exit_code == 1 and field in refused.stderr

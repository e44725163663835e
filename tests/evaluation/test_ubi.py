"""``reranker ubi export``: the logged pages as UBI 1.3 queries and their shown results and
clicks as events, as JSON lines and into the cluster's ``ubi_*`` indices (the Elasticsearch
stand-in); each record holds what the UBI schema requires, in its types and bounds."""

import json
from datetime import datetime

import pytest

from reranker.core.config import load_config
from reranker.serving.service import RerankerService
from tests.support.configs import write_config
from tests.support.es_standin import Standin
from tests.support.servers import run_cli


@pytest.fixture
def logged(workdir):
    """Six pages with clicks, each from a session of its own, all closed; what they
    showed and where they were clicked (impression id -> shown ids, clicked ranks)."""
    service = RerankerService(load_config(workdir / "config.yaml")).open()
    pages = {}
    try:
        for t, query in enumerate(["green tea", "tea cup", "black tea"] * 2):
            page = service.search(query, 10, session_id=f"visitor-{t}")
            ranks = [2, 5] if t % 2 else [1]
            for rank in ranks:
                service.click(page["impression_id"], page["hits"][rank - 1]["id"],
                              session_id=f"visitor-{t}")
            pages[page["impression_id"]] = ([h["id"] for h in page["hits"]], ranks, query)
        service.events.close_impressions(float("inf"))
    finally:
        service.close()
    return pages


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def moment(text: str) -> datetime:
    assert text.endswith("Z"), text  # OpenSearch needs the zone
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def check_query(record: dict) -> None:
    assert isinstance(record["user_query"], str)  # UBI's one required field
    assert 0 < len(record["query_id"]) <= 100 and len(record["client_id"]) <= 100
    assert all(isinstance(hit, str) for hit in record["query_response_hit_ids"])
    assert isinstance(record["query_attributes"], dict)
    moment(record["timestamp"])


def check_event(record: dict) -> None:
    assert record["action_name"] in ("impression", "click")  # required, with timestamp
    moment(record["timestamp"])
    attributes = record["event_attributes"]
    assert isinstance(attributes["position"]["ordinal"], int)  # position is required
    assert isinstance(attributes["object"]["object_id"], str)  # so is object_id


def test_the_log_as_ubi_json_lines(workdir, logged):
    result = run_cli("ubi", "export", "-c", str(workdir / "config.yaml"), "--out-dir",
                     str(workdir / "ubi"))
    queries = lines(workdir / "ubi" / "ubi_queries.jsonl")
    events = lines(workdir / "ubi" / "ubi_events.jsonl")
    clicks = sum(len(ranks) for _, ranks, _ in logged.values())
    assert f"6 UBI queries and {60 + clicks} events" in result.stdout
    for record in queries:
        check_query(record)
        shown, _, query = logged[record["query_id"]]
        assert record["query_response_hit_ids"] == shown and record["user_query"] == query
        assert record["session_id"] and record["client_id"].startswith("session:")
        assert record["query_attributes"]["learner"] == "preference_perceptron"
        assert record["query_attributes"]["reranker"]  # what the learner logged: its pairs
    for record in events:
        check_event(record)
    got = {(e["query_id"], e["event_attributes"]["position"]["ordinal"],
            e["event_attributes"]["object"]["object_id"])
           for e in events if e["action_name"] == "click"}
    assert got == {(page, rank, shown[rank - 1]) for page, (shown, ranks, _) in logged.items()
                   for rank in ranks}
    assert sum(e["action_name"] == "impression" for e in events) == 60
    bare = run_cli("ubi", "export", "-c", str(workdir / "config.yaml"), "--out-dir",
                   str(workdir / "bare"), "--no-impression-events", "--application", "shop")
    assert f"6 UBI queries and {clicks} events" in bare.stdout
    assert all(e["application"] == "shop" for e in lines(workdir / "bare" / "ubi_events.jsonl"))


def test_the_log_into_the_cluster_s_ubi_indices(workdir, logged):
    standin = Standin()
    try:
        path = write_config(workdir, backend={"type": "elasticsearch", "hosts": [standin.url],
                                              "index": "products", "fields": ["title", "body"]})
        result = run_cli("ubi", "export", "-c", str(path), "--to-cluster")
        assert "6 UBI queries" in result.stdout
        stored = standin.indices["ubi_queries"].docs
        assert {doc["query_id"] for doc in stored.values()} == set(logged)
        assert len(standin.indices["ubi_events"].docs) > 60
    finally:
        standin.stop()


def test_export_says_what_it_needs(workdir, logged):
    config = str(workdir / "config.yaml")
    both = run_cli("ubi", "export", "-c", config, check=False)
    assert both.returncode == 2 and "--out-dir FOLDER and --to-cluster" in both.stderr
    embedded = run_cli("ubi", "export", "-c", config, "--to-cluster", check=False)
    assert embedded.returncode == 2 and "use --out-dir" in embedded.stderr


def test_ubi_a_site_collected_counts_in_clicks_and_teaches_no_learner(workdir, logged,
                                                                       tmp_path):
    """Export, then import into a new store: the pages and clicks are there once (also
    after a second import), the clicks count in the click features, and training learns
    nothing from them."""
    run_cli("ubi", "export", "-c", str(workdir / "config.yaml"), "--out-dir",
            str(tmp_path / "ubi"))
    queries, events = tmp_path / "ubi" / "ubi_queries.jsonl", tmp_path / "ubi" / "ubi_events.jsonl"
    with queries.open("a", encoding="utf-8") as handle:  # a second page: not imported
        handle.write('{"query_id": "p2", "user_query": "tea", "timestamp": '
                     '"2026-01-01T00:00:00Z", "query_response_hit_ids": ["d1"], '
                     '"query_attributes": {"offset": 10}}\n')
    with events.open("a", encoding="utf-8") as handle:  # what a site's log also holds
        handle.write('{"action_name": "click", "query_id": "gone", "timestamp": '
                     '"2026-01-01T00:00:00Z", "event_attributes": {"object": {"object_id": '
                     '"d1"}, "position": {"ordinal": 1}}}\n')
        handle.write("not json\n")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "index").symlink_to(workdir / "index")
    path = write_config(fresh)
    result = run_cli("ubi", "import", "-c", str(path), str(queries), str(events))
    clicks = sum(len(ranks) for _, ranks, _ in logged.values())
    assert f"imported 6 UBI queries as pages with {clicks} clicks" in result.stdout
    assert "1 click events of a query not in the queries file" in result.stderr
    assert "skipped 1 queries of a later page" in result.stderr
    assert "ubi_events.jsonl, line" in result.stderr and "not a UBI event" in result.stderr
    again = run_cli("ubi", "import", "-c", str(path), str(queries), str(events))
    assert "imported 0 UBI queries" in again.stdout
    assert "skipped 6 queries imported before" in again.stderr
    service = RerankerService(load_config(path)).open()
    try:
        for impression_id, (shown, ranks, query) in logged.items():
            page = service.events.get_impression(f"ubi:{impression_id}")
            assert page.shown_ids() == shown and page.query == query and page.arm is None
            assert sorted(page.clicked) == sorted(shown[r - 1] for r in ranks)
        shown, ranks, query = next(iter(logged.values()))
        counts, _ = service.events.click_counts(query, [shown[ranks[0] - 1]])
        assert counts[0, 0] >= 1  # the query's clicks on it, for the click features
    finally:
        service.close()
    trained = run_cli("train", "-c", str(path), "--close-all").stdout
    assert "no version was saved" in trained or "nothing to train" in trained, trained

"""Query rules through the real CLI and HTTP API: pins and hides honoured by every arm,
shown in /explain, read by a running service within a second, and kept out of learning."""

from __future__ import annotations

import pytest

from reranker.stores.events import NOT_LEARNED
from tests.support.configs import PERCEPTRON, RANDOM, write_config, write_docs
from tests.support.servers import LiveServer, run_cli, wait_until
from tests.support.shop import FILTER_FIELDS, index_in_process, shop

BACKEND = {"type": "embedded", "path": "index", "fields": ["title", "body"],
           "filter_fields": FILTER_FIELDS}


@pytest.fixture
def shop_config(tmp_path):
    path = write_config(tmp_path, backend=BACKEND,
                        features={"numeric_fields": ["price", "popularity"]})
    index_in_process(path, write_docs(tmp_path, shop()))
    return path


def search(server, **body) -> dict:
    answer = server.post("/search", {"query": "shop tea", "size": 10, **body})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_pin_and_a_hide_through_the_cli_reach_a_running_service(shop_config):
    server = LiveServer(shop_config)
    try:
        before = search(server, user_id="ann")
        ids = [hit["id"] for hit in before["hits"]]
        promoted, hidden = ids[7], ids[0]
        out = run_cli("rules", "add", "-c", str(shop_config), "--query", "Shop TEA",
                      "--pin", f"{promoted}:1", "--hide", hidden, "--note", "launch").stdout
        assert "added rule r1: searches of 'Shop TEA'" in out
        wait_until(lambda: search(server)["hits"][0]["id"] == promoted, timeout=5)
        page = search(server, user_id="bob", size=50)
        assert page["hits"][0] == {**page["hits"][0], "id": promoted, "rank": 1,
                                   "pinned": True}
        assert hidden not in [hit["id"] for hit in page["hits"]]
        assert page["total"] == before["total"] - 1
        assert len({hit["id"] for hit in page["hits"]}) == 50  # (no result shown twice)
        assert "r1" in run_cli("rules", "list", "-c", str(shop_config)).stdout
        # other searches are untouched
        assert hidden in [hit["id"] for hit in search(server, query="shop", size=100)["hits"]]

        imp = server.service.events.get_impression(page["impression_id"])
        assert imp.context[NOT_LEARNED] == "ordered by query rule r1"
        assert imp.context["rules"][0]["pin"] == [{"id": promoted, "rank": 1, "shown_at": 1}]
        explained = server.post("/explain", {"impression_id": page["impression_id"]}).json()
        assert explained["rules"][0]["hide"] == [hidden]
        assert explained["training"]["learns"] is False
        assert "ordered by query rule r1" in explained["training"]["why"]
        live = server.post("/explain", {"query": "shop tea"}).json()
        assert live["hits"][0]["id"] == promoted and live["hits"][0]["pinned"] is True
        assert hidden not in [hit["id"] for hit in live["hits"]]

        # a click on the pinned page teaches neither the learner nor the click counts
        assert server.post("/click", {"impression_id": page["impression_id"],
                                      "doc_id": ids[3], "user_id": "bob"}).status_code == 202
        counts, _ = server.service.events.click_counts("shop tea", [ids[3]])
        assert counts[0, 0] == counts[0, 2] == 0  # (clicks under the query, and over all)
        report = server.service.trainer.run_once(close_all=True)
        assert report.clicks == 0, report

        run_cli("rules", "remove", "-c", str(shop_config), "r1")
        wait_until(lambda: search(server)["hits"][0]["id"] != promoted, timeout=5)
        assert "no query rules" in run_cli("rules", "list", "-c", str(shop_config)).stdout
    finally:
        server.stop()


def test_a_pin_the_learner_agrees_with_leaves_the_page_learned(tmp_path):
    path = write_config(tmp_path, backend=BACKEND, learner={"name": "backend_order"})
    index_in_process(path, write_docs(tmp_path, shop()))
    server = LiveServer(path)  # (the engine's order: the same page every time)
    try:
        top = search(server)["hits"][0]["id"]
        run_cli("rules", "add", "-c", str(path), "-q", "tea", "--match", "contains",
                "--pin", f"{top}:1", "--pin", "no-such-doc:2")
        wait_until(lambda: "rules" in (server.service.events.get_impression(
            search(server)["impression_id"]).context or {}), timeout=5)
        page = search(server)
        imp = server.service.events.get_impression(page["impression_id"])
        assert imp.learned and page["hits"][0]["pinned"] is True
        pins = imp.context["rules"][0]["pin"]
        assert pins[0]["shown_at"] == 1
        assert "nor found by its id" in pins[1]["not_applied"]
    finally:
        server.stop()


def test_every_arm_of_an_experiment_honours_the_rules(tmp_path):
    path = write_config(tmp_path, backend=BACKEND, experiment={
        "mode": "interleave", "name": "trial", "window": 50,
        "arms": {"perceptron": PERCEPTRON, "random": RANDOM}})
    index_in_process(path, write_docs(tmp_path, shop()))
    run_cli("rules", "add", "-c", str(path), "-q", "shop tea", "--pin", "p050:2",
            "--hide", "p000")
    server = LiveServer(path)
    reordered = 0
    try:
        for user in range(12):
            page = search(server, user_id=f"u{user}")
            ids = [hit["id"] for hit in page["hits"]]
            assert "p000" not in ids and ids[1] == "p050", ids
            if server.service.events.get_impression(page["impression_id"]).learned:
                assert page["experiment"] == "trial"  # the mix had put p050 second already
            else:
                assert page["experiment"] is None  # a page a pin ordered counts in no arm
                reordered += 1
            other = search(server, query="shop coffee", user_id=f"u{user}")
            assert other["experiment"] == "trial"  # (the experiment runs)
    finally:
        server.stop()
    assert reordered >= 8  # (the random arm puts p050 second on about 1 page in 90)


def test_a_pin_adds_a_result_the_search_did_not_retrieve(shop_server):
    """As Elasticsearch's pinned query does, on every backend: a kettle pinned for searches
    of 'tea' is shown at its rank (with its document), counted in ``total``, and left out
    when the search's filters exclude it, which /explain says."""
    server, products, _ = shop_server
    kettle = next(p["id"] for p in products if p["category"] == "kettle")
    before = server.post("/search", {"query": "tea", "size": 5}).json()
    assert kettle not in {hit["id"] for hit in before["hits"]}
    config = str(server.config.source)
    run_cli("rules", "add", "-c", config, "-q", "tea", "--pin", f"{kettle}:2")
    wait_until(lambda: server.post("/search", {"query": "tea", "size": 5}).json()["hits"][1][
        "id"] == kettle, timeout=5)
    page = server.post("/search", {"query": "tea", "size": 5}).json()
    hit = page["hits"][1]
    assert hit["rank"] == 2 and hit["pinned"] is True and hit["source"]["category"] == "kettle"
    assert page["total"] == before["total"] + 1
    # the query does not match it: its engine score is 0, the retrieved ones keep theirs
    imp = server.service.events.get_impression(page["impression_id"])
    engine = imp.features[:, imp.feature_names.index("backend_score")]
    added = imp.doc_ids.index(kettle)
    assert added == len(imp.doc_ids) - 1 and engine[added] == 0.0
    assert (engine[:added] > 0).all()
    filtered = server.post("/search", {"query": "tea", "size": 5, "filter": [
        {"term": {"category": "tea"}}]}).json()
    assert kettle not in {h["id"] for h in filtered["hits"]}
    explained = server.post("/explain", {"query": "tea", "filter": [
        {"term": {"category": "tea"}}]}).json()
    (pin,) = explained["rules"][0]["pin"]
    assert "nor found by its id" in pin["not_applied"]

"""POST /clicks: an application's server forwards many clicks in one request; each is checked,
limited, counted and refused alone, and every accepted one is durable when answered, on both
event stores."""

import pytest

from tests.support.configs import write_config
from tests.support.servers import LiveServer


@pytest.fixture
def server(workdir, store_section):
    live = LiveServer(write_config(workdir, store=store_section))
    yield live
    live.stop()


def pages(server, n, **who):
    return [server.post("/search", {"query": query, **who}).json()
            for query in ("tea kettle", "green tea", "espresso grinder", "coffee beans")[:n]]


def stored(server):
    return {(imp.id, doc) for imp in server.service.events.closed_since(0, 10**9)
            for doc in imp.clicked}


def test_a_batch_of_clicks_is_recorded_in_order(server):
    shown = pages(server, 3)
    clicks = [{"impression_id": page["impression_id"], "doc_id": page["hits"][k]["id"]}
              for page in shown for k in (0, 2)]
    answer = server.post("/clicks", {"clicks": clicks})
    assert answer.status_code == 200
    body = answer.json()
    assert body["accepted"] == 6 and body["refused"] == 0
    assert [r["position"] for r in body["results"]] == [1, 3] * 3
    assert [(r["impression_id"], r["doc_id"]) for r in body["results"]] == [
        (c["impression_id"], c["doc_id"]) for c in clicks]
    server.service.events.close_impressions(before=float("inf"))
    assert stored(server) == {(c["impression_id"], c["doc_id"]) for c in clicks}


def test_each_click_is_refused_alone_with_the_answer_click_would_give(server):
    page, other = pages(server, 2, user_id="u1")
    token = page["impression_id"]
    forged = token[:-1] + ("A" if token[-1] != "A" else "B")
    clicks = [{"impression_id": token, "doc_id": page["hits"][1]["id"], "user_id": "u1"},
              {"impression_id": forged, "doc_id": page["hits"][1]["id"], "user_id": "u1"},
              {"impression_id": token, "doc_id": "never-shown", "user_id": "u1"},
              {"impression_id": token, "doc_id": page["hits"][1]["id"], "user_id": "u1"},
              {"impression_id": other["impression_id"], "doc_id": other["hits"][0]["id"],
               "user_id": "someone else"}]
    body = server.post("/clicks", {"clicks": clicks}).json()
    statuses = [r["error"]["status"] if "error" in r else 202 for r in body["results"]]
    assert statuses == [202, 403, 422, 202, 403]
    assert body["results"][3]["duplicate"] is True
    assert body["results"][1]["error"]["field"] == "impression_id"
    assert body["accepted"] == 2 and body["refused"] == 3
    rejected = dict(server.service.trust.rejected_by_reason("click"))
    assert rejected == {"forged": 1, "foreign": 1}
    # the same clicks one by one answer the same
    for click, status in zip(clicks, statuses, strict=True):
        assert server.post("/click", click).status_code == status
    server.service.events.close_impressions(before=float("inf"))
    assert stored(server) == {(token, page["hits"][1]["id"])}


def test_a_click_on_a_page_already_trained_on_is_refused_as_replayed(server):
    (page,) = pages(server, 1)
    server.service.events.close_impressions(before=float("inf"))
    body = server.post("/clicks", {"clicks": [{"impression_id": page["impression_id"],
                                               "doc_id": page["hits"][0]["id"]}]}).json()
    assert body["results"][0]["error"]["status"] == 409 and body["refused"] == 1
    assert dict(server.service.trust.rejected_by_reason("click")) == {"replayed": 1}


@pytest.mark.parametrize("clicks, field, message", [
    ([], "clicks", "'clicks' must be a non-empty list of clicks"),
    ([{"impression_id": "x"}], "clicks[0].doc_id", "must be a non-empty string"),
    ([{"impression_id": "x", "doc_id": "d", "extra": 1}], "clicks[0].extra",
     "unknown field"),
    ("not a list", "clicks", "must be a non-empty list of clicks"),
])
def test_a_malformed_batch_is_400_naming_the_field(server, clicks, field, message):
    answer = server.post("/clicks", {"clicks": clicks})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["field"] == field and message in error["message"]


def test_a_batch_above_the_limit_is_refused_whole(workdir):
    live = LiveServer(write_config(workdir, server={"max_click_batch": 3}))
    try:
        clicks = [{"impression_id": "x", "doc_id": str(i)} for i in range(4)]
        error = live.post("/clicks", {"clicks": clicks}).json()["error"]
        assert error["field"] == "clicks" and "at most 3 (server.max_click_batch)" in \
            error["message"]
    finally:
        live.stop()


def test_the_api_key_guards_the_batch(workdir, monkeypatch):
    monkeypatch.setenv("TEST_KEYS", "key-one")
    live = LiveServer(write_config(workdir, security={"api_keys_env": "TEST_KEYS"}))
    try:
        page = live.post("/search", {"query": "tea"}, headers={"X-API-Key": "key-one"}).json()
        body = {"clicks": [{"impression_id": page["impression_id"],
                            "doc_id": page["hits"][0]["id"]}]}
        assert live.post("/clicks", body).status_code == 401
        answer = live.post("/clicks", body, headers={"X-API-Key": "key-one"})
        assert answer.status_code == 200 and answer.json()["accepted"] == 1
    finally:
        live.stop()

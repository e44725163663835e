"""The HTTP contract, over real HTTP against the real app and a real embedded index."""

import shutil
import time

import pytest

from tests.support.servers import run_cli


def search(live, query="espresso grinder", **extra):
    response = live.post("/search", {"query": query, **extra})
    assert response.status_code == 200, response.text
    return response.json()


def assert_error(response, status, *fragments):
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert error["status"] == status
    for fragment in fragments:
        assert fragment in error["message"], error["message"]
    return error


def test_search_answers_the_contract(live):
    page = search(live, size=5, user_id="u1")
    assert set(page) >= {"impression_id", "learner", "model_version", "hits"}
    assert page["learner"] == "preference_perceptron" and page["model_version"] == 0
    assert [h["rank"] for h in page["hits"]] == [1, 2, 3, 4, 5]
    for hit in page["hits"]:
        assert hit["source"]["id"] == hit["id"]
        assert isinstance(hit["score"], float)
    assert len(search(live)["hits"]) == 10  # server.default_size


def test_scores_follow_the_ranks_except_where_the_page_randomised_a_pair(live):
    """The default learner swaps some adjacent pairs to learn from them: exactly those hits
    are marked, each pair's two scores in the other order; elsewhere a higher rank has a
    score at least as high."""
    marked_any = False
    for _ in range(20):
        page = search(live, size=10)
        hits = page["hits"]
        logged = live.service.events.get_impression(page["impression_id"])
        swapped = {u for u in logged.context["swapped"] for u in (u, u + 1) if u < 10}
        assert {h["rank"] - 1 for h in hits if h.get("randomised")} == swapped
        marked_any |= bool(swapped)
        for upper in swapped:
            if upper in logged.context["swapped"] and upper + 1 < len(hits):
                assert hits[upper]["score"] <= hits[upper + 1]["score"]
        order = [h for h in hits if not h.get("randomised")]
        assert all(a["score"] >= b["score"] for a, b in zip(order, order[1:], strict=False))
    assert marked_any  # (each pair is swapped with probability 1/2)


def test_a_query_without_matches_gives_an_empty_page(live):
    page = search(live, query="zzzz qqqq !!!")
    assert page["hits"] == [] and page["impression_id"]


def test_click_answers_202_and_counts_duplicates_once(live):
    page = search(live)
    doc = page["hits"][3]["id"]
    body = {"impression_id": page["impression_id"], "doc_id": doc}
    first = live.post("/click", body)
    assert first.status_code == 202 and first.json()["duplicate"] is False
    assert first.json()["position"] == 4
    again = live.post("/click", body)
    assert again.status_code == 202 and again.json()["duplicate"] is True
    assert live.service.events.get_impression(page["impression_id"]).clicked == [doc]


@pytest.mark.parametrize("kwargs, fragments", [
    ({"data": "not json", "headers": {"Content-Type": "application/json"}}, ["must be JSON"]),
    ({"data": "{}"}, ["must be JSON"]),  # no JSON content type
    ({"data": '{"query": "tea"', "headers": {"Content-Type": "application/json"}},
     ["must be JSON: Expecting ',' delimiter at line 1, column 16"]),
    ({"data": '{"query": "tea", "size": NaN}', "headers": {"Content-Type": "application/json"}},
     ["must be JSON: NaN is not a JSON value"]),
    ({"data": '{"query": "tea", "user_id": -1e400}',
      "headers": {"Content-Type": "application/json"}},
     ["'user_id' is a number beyond the range of a float (-1e400)"]),
    ({"data": b'{"query": "t\xe9"}', "headers": {"Content-Type": "application/json"}},
     ["must be JSON: it is not UTF-8 text"]),
    ({"json": ["espresso"]}, ["must be a JSON object"]),
    ({"json": {}}, ["'query' must be a non-empty string"]),
    ({"json": {"query": "   "}}, ["'query' must be a non-empty string"]),
    ({"json": {"query": 3}}, ["'query' must be a non-empty string"]),
    ({"json": {"query": "tea", "size": 0}}, ["'size' must be an integer from 1 to 100"]),
    ({"json": {"query": "tea", "size": 101}}, ["'size'", "101"]),
    ({"json": {"query": "tea", "size": "10"}}, ["'size'"]),
    ({"json": {"query": "tea", "size": True}}, ["'size'"]),
    ({"json": {"query": "tea", "user_id": 7}}, ["'user_id' must be a string"]),
    ({"json": {"query": "tea", "sise": 3}}, ["unknown field 'sise'; did you mean 'size'?"]),
    ({"json": {"qeury": "tea"}}, ["unknown field 'qeury'; did you mean 'query'?"]),
])
def test_malformed_searches_are_400(live, kwargs, fragments):
    assert_error(live.post("/search", **kwargs), 400, *fragments)


@pytest.mark.parametrize("body, fragments", [
    ({}, ["'impression_id' must be a non-empty string"]),
    ({"impression_id": "x"}, ["'doc_id' must be a non-empty string"]),
    ({"impression_id": 5, "doc_id": "d"}, ["'impression_id'"]),
    ({"impression_id": "x", "doc_id": "d", "rank": 1}, ["unknown field 'rank'"]),
    # a misspelt field is named as such, not reported as the missing one it stands for
    ({"impression_id": "x", "docid": "d"},
     ["unknown field 'docid'; did you mean 'doc_id'?", "(known: "]),
])
def test_malformed_clicks_are_400(live, body, fragments):
    assert_error(live.post("/click", body), 400, *fragments)


def test_click_on_an_impression_id_the_service_did_not_sign_is_403(live):
    assert_error(live.post("/click", {"impression_id": "feedface", "doc_id": "d0001"}), 403,
                 "'impression_id' is not accepted: it is not a signed impression id")


def test_click_on_a_document_not_shown_is_422(live):
    page = search(live, size=3)
    shown = {h["id"] for h in page["hits"]}
    other = next(h["id"] for h in search(live)["hits"] if h["id"] not in shown)
    error = assert_error(live.post("/click", {"impression_id": page["impression_id"],
                                              "doc_id": other}),
                         422, f"doc_id '{other}' was not shown")
    assert error["field"] == "doc_id"


def test_click_after_the_impression_was_trained_is_409(live):
    page = search(live)
    live.service.trainer.run_once(close_all=True)
    error = assert_error(live.post("/click", {"impression_id": page["impression_id"],
                                              "doc_id": page["hits"][1]["id"]}),
                         409, "no longer accepts clicks")
    assert error["field"] == "impression_id"


def test_unavailable_backend_is_503_and_health_reports_it(live):
    shutil.rmtree(live.config.backend.path)
    assert_error(live.post("/search", {"query": "espresso"}), 503, "unavailable")
    health = live.get("/healthz")
    assert health.status_code == 200
    assert health.json()["status"] == "degraded"
    assert health.json()["backend"]["status"] == "unavailable"
    # the event store is still written: only the backend is named, check after check
    for _ in range(3):
        body = live.get("/healthz").json()
        assert body["problems"] == ["backend"] and body["events"]["status"] == "ok", body
        assert live.get("/readyz").json()["problems"] == ["backend"]


def test_healthz(live):
    health = live.get("/healthz")
    assert health.status_code == 200
    body = health.json()
    assert body["status"] == "ok" and body["model_version"] == 0
    assert body["backend"]["documents"] > 0


def test_unknown_routes_and_methods_answer_json(live):
    assert_error(live.get("/nope"), 404)
    assert_error(live.get("/search"), 405)


def click_to_learn(live, page, first=5):
    """Clicks on ``first`` and three ranks above it: one of them is the lower result of its
    pair whichever pairing the page used, so the next training pass learns and saves a
    version (a pass that learns nothing saves none)."""
    for position in (first, first - 3):
        live.post("/click", {"impression_id": page["impression_id"],
                             "doc_id": page["hits"][position]["id"]})


def test_new_versions_from_another_process_are_served_without_restart(live, workdir):
    click_to_learn(live, search(live))
    run_cli("train", "-c", str(workdir / "config.yaml"))
    assert search(live)["model_version"] == 1


def test_a_corrupt_new_version_is_refused_and_the_last_good_one_serves(live, workdir):
    click_to_learn(live, search(live))
    live.service.trainer.run_once()
    assert search(live)["model_version"] == 1
    bad = live.service.models.path(2)
    bad.write_text('{"format": "reranker-model", "trunc')
    assert search(live)["model_version"] == 1
    health = live.get("/healthz").json()
    assert health["status"] == "degraded"
    assert "model-000002.json" in health["model_errors"][0]
    # the trainer builds on the last good version and never overwrites the bad file
    click_to_learn(live, search(live), first=4)
    report = live.service.trainer.run_once()
    assert report.version == 3
    assert search(live)["model_version"] == 3
    assert live.get("/healthz").json()["status"] == "ok"


def test_health_keeps_the_version_the_trainer_saved_last(live):
    """Most passes save nothing: /healthz still says which version the trainer saved."""
    click_to_learn(live, search(live))
    assert live.service.trainer.run_once().version == 1
    assert live.service.trainer.run_once().version is None  # nothing new to learn
    assert live.get("/healthz").json()["trainer"]["last_saved_version"] == 1


def test_a_trainer_waiting_for_the_lead_says_so_once(live, caplog):
    """Of two processes training one store, the one that waits says so once, then takes
    over when the other stops."""
    import threading

    from reranker.models.trainer import Trainer
    from reranker.stores import open_event_store

    held = live.service.events.trainer_leadership()
    events = open_event_store(live.config)
    stop = threading.Event()
    waiting = Trainer.from_config(live.config, events)
    thread = threading.Thread(target=waiting.run_forever, args=(stop, 0.02),
                              kwargs={"lead": True})
    try:
        with caplog.at_level("INFO", logger="reranker.models.trainer"):
            thread.start()
            time.sleep(0.3)
            said = [r.getMessage() for r in caplog.records]
            assert len([m for m in said if "another process runs the trainer" in m]) == 1
            assert not waiting.leading
            held.release()
            deadline = time.monotonic() + 5.0
            while not waiting.leading and time.monotonic() < deadline:
                time.sleep(0.02)
        assert waiting.leading
        assert any("this process runs the trainer" in r.getMessage() for r in caplog.records)
    finally:
        stop.set()
        thread.join(5.0)
        events.close()


def test_a_trainer_that_cannot_reach_the_store_does_not_say_another_leads(live, caplog,
                                                                          monkeypatch):
    import threading

    from reranker.core.errors import StoreError
    from reranker.models.trainer import Trainer

    def unreachable():
        raise StoreError("the event store is unreachable")

    monkeypatch.setattr(live.service.events, "trainer_leadership", unreachable)
    trainer = Trainer.from_config(live.config, live.service.events)
    stop = threading.Event()
    thread = threading.Thread(target=trainer.run_forever, args=(stop, 0.02),
                              kwargs={"lead": True})
    with caplog.at_level("INFO", logger="reranker.models.trainer"):
        thread.start()
        time.sleep(0.2)
        stop.set()
        thread.join(5.0)
    said = [r.getMessage() for r in caplog.records]
    assert "the event store is unreachable" in said
    assert not [m for m in said if "another process" in m]
    assert trainer.last_error == "the event store is unreachable"


def test_background_server_stops_once_and_for_good():
    """The server the demo and these tests use answers real HTTP, stops without leaving the
    port open, tolerates a second stop, and closes its socket even when its loop has ended
    on its own."""
    import requests
    from flask import Flask

    from reranker.api.app import BackgroundServer

    app = Flask("ping")
    app.get("/ping")(lambda: "pong")
    server = BackgroundServer(app, threads=2)
    assert requests.get(server.url + "/ping", timeout=10).text == "pong"
    server.stop()
    assert not server.thread.is_alive()
    with pytest.raises(requests.ConnectionError):
        requests.get(server.url + "/ping", timeout=10)
    server.stop()  # harmless

    ended = BackgroundServer(app, threads=2)

    def end_the_loop():  # what ends waitress's loop with its sockets still open
        raise SystemExit

    ended.server.trigger.handle_read = end_the_loop
    ended.server.trigger.pull_trigger()
    ended.thread.join(10)
    assert not ended.thread.is_alive()
    ended.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(ended.url + "/ping", timeout=10)

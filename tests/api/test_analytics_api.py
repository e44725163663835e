"""``GET /analytics``, ``/dashboard/analytics``, ``/compare.json`` and ``/compare`` over real
HTTP against the real app and a real embedded index: the figures of the searches and clicks
made through the API, the rankings side by side without logging a page, bad parameters
named, and the reports' guard."""

from __future__ import annotations

import pytest

from tests.support.servers import LiveServer


def search(live, query, **extra):
    response = live.post("/search", {"query": query, **extra})
    assert response.status_code == 200, response.text
    return response.json()


def error_of(response, status):
    assert response.status_code == status, response.text
    return response.json()["error"]


def test_analytics_count_the_searches_and_clicks_made(live):
    pages = [search(live, "Espresso grinder", size=5) for _ in range(3)]
    search(live, "espresso  GRINDER", size=5, user_id="u1", **{"from": 5})
    search(live, "zzzz qqqq")  # finds nothing
    search(live, "tea kettle", size=5)
    for page, rank in zip(pages[:2], (1, 3), strict=True):
        hit = page["hits"][rank - 1]
        assert live.post("/click", {"impression_id": page["impression_id"],
                                    "doc_id": hit["id"]}).status_code == 202
    report = live.get("/analytics").json()
    assert report["totals"]["searches"] == 5 and report["totals"]["pages"] == 6
    assert report["totals"]["clicks"] == 2 and report["totals"]["queries"] == 3
    top = report["top_queries"][0]
    assert (top["query"], top["searches"], top["pages"], top["clicks"]) == (
        "espresso grinder", 3, 4, 2)
    assert top["ctr"] == 0.5 and top["mean_click_rank"] == 2.0
    assert [q["query"] for q in report["no_result"]] == ["zzzz qqqq"]
    assert {q["query"] for q in report["no_click"]} == {"espresso grinder", "tea kettle"}
    assert report["click_ranks"] == [{"rank": 1, "clicks": 1}, {"rank": 2, "clicks": 0},
                                     {"rank": 3, "clicks": 1}]
    arm = live.service.arms[0].label
    assert live.get("/analytics", params={"arm": arm, "top": 1}).json()["top_queries"] == [top]


@pytest.mark.parametrize("params, field", [({"days": "0"}, "days"), ({"top": "x"}, "top"),
                                           ({"days": "9007199254740992.0"}, "days"),
                                           ({"arm": "nope"}, "arm"),
                                           ({"day": "7"}, "day")])
def test_bad_analytics_parameters_are_named(live, params, field):
    assert error_of(live.get("/analytics", params=params), 400)["field"] == field


def test_compare_shows_the_engine_and_the_arm_without_logging(live):
    before = live.service.events.stats()["impressions"]
    answer = live.get("/compare.json", params={"query": "espresso grinder", "size": 4}).json()
    assert live.service.events.stats()["impressions"] == before  # nothing logged
    assert answer["query"] == "espresso grinder" and answer["size"] == 4
    assert answer["features"] == list(live.service.spec.names)
    engine, arm = answer["columns"]
    assert engine["label"] == "engine" and engine["learner"] is None
    assert arm["label"] == live.service.arms[0].label
    assert arm["learner"] == "preference_perceptron"
    assert [hit["engine_rank"] for hit in engine["hits"]] == [1, 2, 3, 4]
    explained = live.post("/explain", {"query": "espresso grinder", "size": 4}).json()
    assert [hit["id"] for hit in arm["hits"]] == [hit["id"] for hit in explained["hits"]]
    for index, column in enumerate(answer["columns"]):
        for hit in column["hits"]:
            assert hit["ranks"][index] == hit["rank"]
            assert set(hit["features"]) == set(answer["features"])
            assert hit["title"]
    for hit in arm["hits"]:  # where the arm's hits sit in the engine's top 4
        assert hit["ranks"][0] == (hit["engine_rank"] if hit["engine_rank"] <= 4 else None)
    assert error_of(live.get("/compare.json"), 400)["field"] == "query"
    # the page /compare takes ?q=; its data, ?query=: the other name is said
    error = error_of(live.get("/compare.json", params={"q": "tea"}), 400)
    assert error["field"] == "q" and "did you mean 'query'?" in error["message"]
    assert error_of(live.get("/compare.json", params={"query": "tea", "size": "x"}),
                    400)["field"] == "size"


def test_the_pages_are_self_contained_html(live):
    for path, marker in (("/dashboard/analytics", "click-ranks"), ("/compare", "query-form")):
        response = live.get(path)
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/html")
        assert marker in response.text and "/* reports." not in response.text
        assert "--bar:" in response.text and "function readJSON" in response.text
        assert "http" not in response.text.split("<script>")[0]  # nothing fetched elsewhere


def test_the_reports_guard_keeps_them_to_the_operator(workdir):
    from tests.support.configs import write_config

    live = LiveServer(write_config(workdir, security={"reports_access": "operator"},
                                   server={"admin_token": "ops-token"}))
    try:
        for path in ("/analytics", "/dashboard/analytics", "/compare", "/compare.json?query=t"):
            error = error_of(live.get(path), 401)
            assert error["field"] == "Authorization" and "operator's token" in error["message"]
            assert live.get(path, headers={"Authorization": "Bearer ops-token"}
                            ).status_code == 200, path
        document = live.get("/openapi.json").json()
        for path in ("/analytics", "/dashboard/analytics", "/compare", "/compare.json"):
            assert {"adminToken": []} in document["paths"][path]["get"]["security"]
    finally:
        live.stop()

"""reranker as a library: reranking the application's own candidates, the blueprint in an
existing Flask app, and the endpoints in a FastAPI app."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from reranker.core.errors import BadRequestError
from reranker.library import Reranker
from tests.support.configs import write_config
from tests.support.servers import wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "frameworks"
sys.path.insert(0, str(EXAMPLES))


def no_engine(tmp_path, **sections):
    """A configuration without a search engine: the application brings the candidates."""
    return write_config(tmp_path, backend={"type": "none", "fields": ["title"]},
                        features={"numeric_fields": ["popularity"]}, **sections)


#: For the framework examples, whose trainer runs in the background: their pages stay open to
#: the test's clicks, however busy the machine (the default of the tests closes them at once).
OPEN_PAGES = {"trainer": {"feedback_window": 600.0}}


CANDIDATES = [{"id": f"d{i}", "score": 10.0 - i, "field_scores": {"title": 1.0 + i % 2},
               "source": {"title": f"item {i}", "popularity": i}} for i in range(12)]


def test_rerank_ranks_logs_and_learns_from_the_applications_candidates(tmp_path):
    with Reranker(no_engine(tmp_path)) as reranker:
        page = reranker.rerank("tea", CANDIDATES, size=5, user_id="u1")
        assert [hit["rank"] for hit in page["hits"]] == [1, 2, 3, 4, 5]
        assert {hit["id"] for hit in page["hits"]} <= {c["id"] for c in CANDIDATES}
        assert page["hits"][0]["source"]["title"].startswith("item")
        imp = reranker.service.events.get_impression(page["impression_id"])
        assert imp.doc_ids == [c["id"] for c in CANDIDATES]
        assert imp.features[:, 0].tolist() == [c["score"] for c in CANDIDATES]
        assert imp.features[:, 2].tolist() == [float(i) for i in range(12)]  # popularity
        # clicks come back the same way, and the trainer learns from them
        for _ in range(3):
            page = reranker.rerank("tea", CANDIDATES, size=10)
            for hit in (page["hits"][4], page["hits"][7]):
                reranker.click(page["impression_id"], hit["id"])
        result = reranker.reward(page["impression_id"], 12.5)  # a purchase worth 12.50
        assert result.value == 12.5 and result.replaced is None
        report = reranker.train(close_all=True)
        assert report.applied == 4 and report.clicks == 6 and report.versions
        assert reranker.service.events.get_impression(page["impression_id"]).reward == 12.5
        page2 = reranker.rerank("tea", CANDIDATES, size=10, user_id="u1", offset=5)
        assert page2["hits"][0]["rank"] == 6


@pytest.mark.parametrize("candidates, message", [
    ({"id": "a"}, "'candidates' must be a list"),
    ([{"name": "a"}], "'candidates'[0]: unknown field 'name'"),
    ([{"id": ""}], "'candidates'[0].id must be a non-empty string or integer"),
    ([{"id": "a", "score": "high"}], "'candidates'[0].score must be a finite number"),
    ([{"id": "a", "field_scores": {"body": 1}}], "'candidates'[0].field_scores must map"),
    ([{"id": "a"}, {"id": "a"}], "'candidates' holds an id twice"),
])
def test_bad_candidates_are_refused_naming_the_item(tmp_path, candidates, message):
    with Reranker(no_engine(tmp_path)) as reranker:
        with pytest.raises(BadRequestError, match=message.replace("[", r"\[")
                           .replace("]", r"\]").replace(".", r"\.")):
            reranker.rerank("tea", candidates)


def test_without_an_engine_search_says_where_candidates_come_from(tmp_path):
    with Reranker(no_engine(tmp_path)) as reranker:
        with pytest.raises(BadRequestError, match="the application passes its candidates"):
            reranker.search("tea")


def test_the_blueprint_mounts_in_an_existing_flask_app(tmp_path):
    import flask_app

    shop = flask_app.create_shop(no_engine(tmp_path, **OPEN_PAGES))
    client = shop.test_client()
    try:
        assert client.get("/").status_code == 200  # the shop's own routes are untouched
        page = client.get("/products?q=green tea").get_json()
        assert {hit["id"] for hit in page["hits"]} == {p["id"] for p in
                                                       flask_app.own_search("green tea")}
        click = client.post("/rr/click", json={"impression_id": page["impression_id"],
                                               "doc_id": page["hits"][-1]["id"]})
        assert click.status_code == 202
        assert click.get_json()["position"] == len(page["hits"])
        # (a probe's checks have 0.8 s: on a loaded machine the first may report one stuck)
        wait_until(lambda: client.get("/rr/healthz").get_json()["status"] == "ok")
        assert client.get("/rr/reranker.js").status_code == 200
        # reranker's JSON errors stay on its routes; the shop's own 404 is the shop's
        bad = client.post("/rr/click", json={"impression_id": "nope", "doc_id": "x"})
        assert bad.status_code == 403 and bad.get_json()["error"]["status"] == 403
        assert client.get("/nowhere").status_code == 404
        assert not client.get("/nowhere").is_json
    finally:
        shop.extensions["reranker"].close()


def test_the_endpoints_mount_in_a_fastapi_app(tmp_path):
    pytest.importorskip("fastapi")
    import fastapi_app
    from fastapi.testclient import TestClient

    app = fastapi_app.create_app(no_engine(tmp_path, **OPEN_PAGES))
    try:
        with TestClient(app) as client:
            page = client.get("/products", params={"q": "tea", "uid": "u7"}).json()
            assert {hit["id"] for hit in page["hits"]} == {"p0", "p1", "p2"}
            click = client.post("/rr/click", json={"impression_id": page["impression_id"],
                                                   "doc_id": page["hits"][0]["id"],
                                                   "user_id": "u7"})
            assert click.status_code == 202
            wait_until(lambda: client.get("/rr/healthz").json()["status"] == "ok")
    finally:
        app.state.reranker.close()


def test_numeric_fields_of_the_applications_candidates_read_as_elasticsearch_reads_them():
    """Numbers, and numbers as text (as an Elasticsearch document may hold them); anything
    else is missing (NaN here, features.missing_value in the features)."""
    from reranker.backends.application import candidates_from

    items = [{"id": str(i), "source": {"popularity": value}}
             for i, value in enumerate([12, "12.5", " 3 ", "abc", True, None, "nan", 1e308])]
    numeric = candidates_from(items, ["title"], ["popularity"]).numeric[:, 0]
    assert numeric[:3].tolist() == [12.0, 12.5, 3.0]
    assert np.isnan(numeric[3:7]).all() and numeric[7] == 1e308

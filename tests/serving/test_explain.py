"""POST /explain: features, scores and their parts for a search, and what an impression's
clicks taught."""

from __future__ import annotations

import numpy as np
import pytest

from reranker.core.config import load_config
from reranker.core.plugins import backend_class, get_plugin_manager
from reranker.serving.trust import Binding
from tests.support.configs import write_config
from tests.support.servers import LiveServer


def test_explain_a_search_gives_features_scores_and_parts(live):
    answer = live.post("/explain", {"query": "tea kettle", "size": 5})
    assert answer.status_code == 200
    body = answer.json()
    assert body["learner"] == "preference_perceptron" and len(body["hits"]) == 5
    names = list(body["weights"])
    assert names[:3] == ["backend_score", "field_score:title", "field_score:body"]
    # the general model leaves the query's own click lift out; the search has it
    assert "click_lift:query_doc" not in names and "click_lift:doc" in names
    scores = [hit["score"] for hit in body["hits"]]
    assert scores == sorted(scores, reverse=True)  # the model's own order
    # a new model keeps the engine's order, and no click specialises the query
    assert body["decided_by"]["by"] == "engine" and body["decided_by"]["engine_share"] == 1.0
    for hit in body["hits"]:
        assert set(hit["features"]) == set(names) | {"click_lift:query_doc"}
        assert set(hit["normalized"]) == set(names)
        assert hit["general_parts"] == {"engine": pytest.approx(hit["score"]), "learned": 0.0}
        # the score is the sum of its parts, each a total weight times a normalised feature
        assert sum(hit["parts"].values()) == pytest.approx(hit["score"])
        for name, part in hit["parts"].items():
            assert part == pytest.approx(body["weights"][name]["total"]
                                         * hit["normalized"][name])
        assert hit["engine_score"] == hit["features"]["backend_score"]
    # a new model ranks by the engine's order: its first hit is the engine's first
    assert body["hits"][0]["engine_rank"] == 1
    assert live.service.events.stats()["impressions"] == 0  # explaining logs nothing


def test_explain_an_impression_says_what_its_clicks_taught(live):
    page = live.post("/search", {"query": "tea kettle", "size": 10}).json()
    imp_id = page["impression_id"]
    nothing = live.post("/explain", {"impression_id": imp_id}).json()
    assert nothing["training"] == {"learns": False, "why": "no click"}
    assert [hit["id"] for hit in nothing["hits"]] == [hit["id"] for hit in page["hits"]]
    assert [hit["rank"] for hit in nothing["hits"]] == list(range(1, 11))
    imp = live.service.events.get_impression(imp_id)
    offset = imp.context["pair_offset"]
    lower = offset + 1  # 0-based lower position of this page's first randomised pair
    live.post("/click", {"impression_id": imp_id, "doc_id": page["hits"][lower]["id"]})
    taught = live.post("/explain", {"impression_id": imp_id}).json()
    assert taught["training"]["learns"] is True
    (preference,) = taught["training"]["preferences"]
    assert preference == {"preferred": page["hits"][lower]["id"],
                          "over": page["hits"][lower - 1]["id"], "over_rank": lower}
    assert [hit["clicked"] for hit in taught["hits"]].count(True) == 1
    # a click on the upper result of a pair teaches nothing, and says why
    page = live.post("/search", {"query": "tea kettle", "size": 10}).json()
    upper = live.service.events.get_impression(page["impression_id"]).context["pair_offset"]
    live.post("/click", {"impression_id": page["impression_id"],
                         "doc_id": page["hits"][upper]["id"]})
    why = live.post("/explain", {"impression_id": page["impression_id"]}).json()["training"]
    assert why["learns"] is False and "lower result of a randomised pair" in why["why"]


def test_explain_a_mixed_page_gives_every_arms_ranking_probability_and_lesson(workdir):
    """A multileaved page of a perceptron, pdgd and the random floor: each arm's own
    ranking as it asked for it, its probability under the arm's policy, the clicks
    credited to it, and what the page teaches it; after a training pass, which arms applied
    it."""
    from tests.support.configs import PERCEPTRON, RANDOM, experiment_config
    from tests.support.servers import LiveServer

    path = experiment_config(workdir, mode="multileave", arms={
        "perceptron": PERCEPTRON, "pdgd": {"name": "pdgd"}, "random": RANDOM})
    live = LiveServer(path)
    try:
        page = live.post("/search", {"query": "tea kettle", "size": 10}).json()
        assert page["arm"] is None and page["learner"] == "multileave"
        imp = live.service.events.get_impression(page["impression_id"])
        for doc in (page["hits"][1]["id"], page["hits"][4]["id"]):
            live.post("/click", {"impression_id": page["impression_id"], "doc_id": doc})
        body = live.post("/explain", {"impression_id": page["impression_id"]}).json()
        assert body["mixed"] is True and body["model_version"] is None
        assert body["learner"] == "multileave" and body["closed"] is False
        assert [hit["id"] for hit in body["hits"]] == [hit["id"] for hit in page["hits"]]
        assert [hit["team"] for hit in body["hits"]] == imp.teams
        assert [hit["clicked"] for hit in body["hits"]].count(True) == 2
        assert set(body["arms"]) == {"perceptron", "pdgd", "random"}
        for label, arm in body["arms"].items():
            logged = imp.context["arms"][label]
            assert arm["ranking"] == [imp.doc_ids[i] for i in logged["ranking"]]
            assert arm["model_version"] == 0 and arm["serving_version"] == 0
            assert arm["probability"] == pytest.approx(np.exp(logged["log_prob"]))
            assert arm["credited_clicks"] == sum(hit["clicked"] and hit["team"] == label
                                                 for hit in body["hits"])
            for hit in body["hits"]:  # each result's rank in the arm's own ranking
                rank = hit["arm_ranks"][label]
                assert rank is None or arm["ranking"][rank - 1] == hit["id"]
            assert arm["applied"] is False
        # each a draw of its policy: the perceptron's randomised pairs, pdgd's
        # Plackett-Luce ranking, the floor's uniform one
        assert all(0 < arm["probability"] < 1 for arm in body["arms"].values())
        assert sum(arm["credited_clicks"] for arm in body["arms"].values()) == 2
        assert body["arms"]["random"]["training"] == {
            "learns": False, "why": "random is a floor: it never learns"}
        pdgd = body["arms"]["pdgd"]["training"]
        assert pdgd["learns"] is True and "randomised pairs" in pdgd["why"]
        # the perceptron learns the page's pair feedback when a click is the lower result
        # of one of the mixed page's randomised pairs, and says why not otherwise
        perceptron = body["arms"]["perceptron"]["training"]
        if perceptron["learns"]:
            assert perceptron["preferences"]
        else:
            assert "lower result of a randomised pair" in perceptron["why"]
        # once trained on, the learning arms have applied it
        live.service.trainer.run_once(close_all=True)
        after = live.post("/explain", {"impression_id": page["impression_id"]}).json()
        assert after["closed"] is True
        assert after["arms"]["pdgd"]["applied"] is True
        assert after["arms"]["pdgd"]["serving_version"] == 1
        assert after["arms"]["pdgd"]["model_version"] == 0  # the version that ranked it
    finally:
        live.stop()


@pytest.mark.parametrize("body, status, message", [
    ({"impression_id": "nope"}, 403, "'impression_id' is not accepted"),
    ({"impression_id": 3}, 400, "'impression_id' must be a non-empty string"),
    ({"query": ""}, 400, "'query' must be a non-empty string"),
    ({"query": "tea", "from": 3}, 400, "unknown field 'from'"),
])
def test_explain_refuses_bad_requests(live, body, status, message):
    answer = live.post("/explain", body)
    assert answer.status_code == status and message in answer.json()["error"]["message"]


def test_a_signed_id_of_no_logged_page_is_404(live):
    token = live.service.trust.signer.sign(Binding.of(None, None))
    answer = live.post("/explain", {"impression_id": token})
    error = answer.json()["error"]
    assert answer.status_code == 404 and "unknown impression_id" in error["message"]
    assert error["field"] == "impression_id"


def test_explain_numbers_are_finite(live):
    body = live.post("/explain", {"query": "green tea"}).json()
    assert all(np.isfinite(v) for hit in body["hits"] for v in hit["normalized"].values())


def test_the_trainer_counts_clicks_that_taught_nothing_with_the_reason(live, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="reranker.models.trainer")
    # four queries, one click each: no query's clicks judge a result yet, so every page is
    # the general model's own
    for query in ("tea kettle", "green tea", "tea cup", "black tea"):
        page = live.post("/search", {"query": query, "size": 10}).json()
        imp = live.service.events.get_impression(page["impression_id"])
        upper = imp.context["pair_offset"]  # the upper result of the first pair: no lesson
        live.post("/click", {"impression_id": page["impression_id"],
                             "doc_id": page["hits"][upper]["id"]})
    # (a fifth query: a query's second page among four queries searched once each would be
    # learned from only by the query balance's coin, learner.query_balance)
    page = live.post("/search", {"query": "kettle", "size": 10}).json()
    lower = live.service.events.get_impression(page["impression_id"]).context["pair_offset"] + 1
    live.post("/click", {"impression_id": page["impression_id"],
                         "doc_id": page["hits"][lower]["id"]})
    report = live.service.trainer.run_pass()
    assert report.uninformative == {
        "not on the lower result of a randomised pair with its upper unclicked": 4}
    assert report.updates == 1
    assert "clicks that taught nothing: 4 not on the lower result" in caplog.text


def test_explain_a_click_on_the_last_candidate_in_a_randomised_pair(tmp_path):
    """A query with two candidates whose pair was randomised, the second clicked: the
    improved ranking moves the last candidate, and the explanation names that preference
    (an explanation once looked past the end of the ranking here)."""
    config = load_config(write_config(tmp_path))
    backend = backend_class(get_plugin_manager(), "embedded")(config)
    backend.index_documents(iter([("a", {"id": "a", "title": "tea kettle", "body": "steel"}),
                                  ("b", {"id": "b", "title": "tea pot", "body": "kettle"})]),
                            recreate=True)
    backend.close()
    live = LiveServer(tmp_path / "config.yaml")
    try:
        for _ in range(50):  # a page whose randomised pair is its two results
            page = live.post("/search", {"query": "tea kettle"}).json()
            if live.service.events.get_impression(page["impression_id"]).context[
                    "pair_offset"] == 0:
                break
        else:
            pytest.fail("no page randomised the pair of its two results")
        assert [hit["rank"] for hit in page["hits"]] == [1, 2]
        live.post("/click", {"impression_id": page["impression_id"],
                             "doc_id": page["hits"][1]["id"]})
        answer = live.post("/explain", {"impression_id": page["impression_id"]})
        assert answer.status_code == 200, answer.text
        training = answer.json()["training"]
        assert training["learns"] is True
        assert training["preferences"] == [{"preferred": page["hits"][1]["id"],
                                            "over": page["hits"][0]["id"], "over_rank": 1}]
    finally:
        live.stop()

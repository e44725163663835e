"""Scenarios run against an Elasticsearch server: the stand-in (test_es_backend.py) or a real
cluster when RERANKER_TEST_ES_URL is set (test_real_clusters.py); and the same against
OpenSearch (``backend.type: opensearch``, :func:`backend_type`): the stand-in in its
OpenSearch mode (test_opensearch_backend.py) or RERANKER_TEST_OPENSEARCH_URL."""

from __future__ import annotations

import contextlib
import uuid

import numpy as np
import pytest
import requests

from reranker.core.config import load_config
from reranker.core.errors import BackendError
from reranker.core.plugins import backend_class, get_plugin_manager
from reranker.serving.service import RerankerService
from tests.support.configs import write_config, write_docs
from tests.support.servers import ServeProcess, run_cli, wait_until

#: The backend.type the scenarios configure (:func:`backend_type`).
BACKEND = {"type": "elasticsearch"}


@contextlib.contextmanager
def backend_type(kind: str):
    """Run the scenarios in the block with ``backend.type: kind``."""
    before, BACKEND["type"] = BACKEND["type"], kind
    try:
        yield
    finally:
        BACKEND["type"] = before


def es_config(folder, url, index, sections=None, **backend):
    return write_config(folder, backend={"type": BACKEND["type"], "hosts": [url],
                                         "index": index, "request_timeout": 5.0, **backend},
                        **(sections or {}))


def backend_for(path):
    config = load_config(path)
    return backend_class(get_plugin_manager(), config.backend.type)(config)


def unique_index() -> str:
    return f"{TEST_PREFIX}{uuid.uuid4().hex[:10]}"


#: The prefix of every index the scenarios of this test run create, and the stored
#: template's id (another run against the same cluster has its own).
#: The scenarios of a search (``scenario_<name>(tmp_path, url, corpus)``) that run against
#: the stand-in and a real cluster alike.
SEARCH_SCENARIOS = ("features_come_from_one_search", "user_text_is_only_a_parameter",
                    "template_parameters_are_never_rendered_again",
                    "template_and_stored_template", "template_aggregations_are_kept",
                    "start_up_checks_name_the_problem", "service_uses_elasticsearch_features")

RUN = uuid.uuid4().hex[:6]
TEST_PREFIX = f"reranker-test-{RUN}-"
TEST_TEMPLATE = f"reranker-test-template-{RUN}"


def clean_up(url: str) -> None:
    """Delete what this run's scenarios left on a cluster: their indices (by name: a real
    cluster refuses a wildcard delete by default) and the stored template."""
    answer = requests.get(f"{url}/_cat/indices/{TEST_PREFIX}*", params={"format": "json",
                                                                        "h": "index"},
                          timeout=10)
    answer.raise_for_status()
    for row in answer.json():
        requests.delete(f"{url}/{row['index']}", timeout=30).raise_for_status()
    requests.delete(f"{url}/_scripts/{TEST_TEMPLATE}", timeout=10)  # (404 when none)


def index_corpus(folder, url, corpus, index=None, **backend):
    index = index or unique_index()
    path = es_config(folder, url, index, **backend)
    out = run_cli("index", "-c", str(path), str(write_docs(folder, corpus.documents))).stdout
    assert f"indexed {len(corpus.documents)} documents" in out
    return index, path


def scenario_features_come_from_one_search(tmp_path, url, corpus):
    index, path = index_corpus(tmp_path, url, corpus)
    backend = backend_for(path)
    backend.open()
    candidates = backend.search("espresso grinder", 50)
    assert len(candidates) > 5
    assert (np.diff(candidates.scores) <= 1e-9).all()  # the retrieval query's order
    titles = candidates.field_scores[:, 0]
    bodies = candidates.field_scores[:, 1]
    assert (titles > 0).any() and (bodies > 0).any()
    docs = {d["id"]: d for d in corpus.documents}
    for i, doc_id in enumerate(candidates.ids):
        assert candidates.numeric[i, 0] == pytest.approx(docs[doc_id]["popularity"])
        if "espresso" not in docs[doc_id]["title"] and "grinder" not in docs[doc_id]["title"]:
            assert titles[i] == 0.0
    assert candidates.load_sources([0])[0]["id"] == candidates.ids[0]
    backend.close()


def scenario_user_text_is_only_a_parameter(tmp_path, url, corpus):
    index, path = index_corpus(tmp_path, url, corpus)
    backend = backend_for(path)
    backend.open()
    nasty = 'espresso "}}, {"match_all": {}} {{query}} \\ \u00e9'
    body = backend.request_body(nasty, 10)
    assert keys(body).count("match_all") == 1  # only our own, in the filter
    retrieval = body["query"]["bool"]["must"][0]["bool"]["must"][0]
    assert retrieval["multi_match"]["query"] == nasty  # the text, exactly, as a value
    features = body["query"]["bool"]["filter"][0]["bool"]["should"]
    assert [f["bool"]["must"][0]["match"] for f in features[:2]] == [
        {"title": {"query": nasty}}, {"body": {"query": nasty}}]
    backend.search(nasty, 10)  # the cluster accepts it as plain text
    backend.close()


def keys(node) -> list[str]:
    """Every key of every object in a JSON structure."""
    if isinstance(node, dict):
        return list(node) + [k for v in node.values() for k in keys(v)]
    if isinstance(node, list):
        return [k for v in node for k in keys(v)]
    return []


def scenario_template_parameters_are_never_rendered_again(tmp_path, url, corpus):
    """Elasticsearch's toJson and plain parameters: the user's text is data, even when it
    looks like Mustache."""
    index, _ = index_corpus(tmp_path, url, corpus)
    template = ('{"bool": {"must": [{"match": {"title": {{#toJson}}query{{/toJson}}}}], '
                '"should": [{"match": {"body": "{{query}}"}}]{{#extra}}, "x": 1{{/extra}}}}')
    path = es_config(tmp_path, url, index, template=template, template_params={"size": 5})
    backend = backend_for(path)
    backend.open()
    for text in ("{{size}}", "{{nope}}", '{{#extra}}"x"{{/extra}}', 'espresso "quoted"'):
        query, aggs = backend._retrieval(text)
        assert aggs == {}
        assert query["bool"]["must"][0]["match"]["title"] == text
        assert query["bool"]["should"][0]["match"]["body"] == text
        assert "x" not in query["bool"]  # a missing section renders empty, as in Elasticsearch
        backend.search(text, 5)
    backend.close()


def scenario_template_and_stored_template(tmp_path, url, corpus):
    index, path = index_corpus(tmp_path, url, corpus)
    template = '{"query": {"match": {"title": {"query": "{{query}}", "operator": "{{op}}"}}}}'
    path = es_config(tmp_path, url, index, template=template, template_params={"op": "or"})
    backend = backend_for(path)
    backend.open()
    nasty = 'espresso "quoted"'
    candidates = backend.search(nasty, 20)
    assert len(candidates) > 0
    assert (candidates.field_scores[:, 0] > 0).all()  # every hit matched the title query
    backend.close()
    requests.put(f"{url}/_scripts/{TEST_TEMPLATE}", timeout=10,
                 json={"script": {"lang": "mustache", "source": template}}).raise_for_status()
    path = es_config(tmp_path, url, index, template_id=TEST_TEMPLATE,
                     template_params={"op": "or"})
    backend = backend_for(path)
    backend.open()
    assert backend.search("espresso", 20).ids == backend_for_template_ids(tmp_path, url, index,
                                                                           template)
    backend.close()


def scenario_template_aggregations_are_kept(tmp_path, url, corpus):
    """A site's search template that renders aggregations beside its query: the query
    retrieves, the aggregations go with the same request and come back in the answer."""
    index, _ = index_corpus(tmp_path, url, corpus)
    template = ('{"query": {"match": {"title": {{#toJson}}query{{/toJson}}}}, '
                '"aggs": {"popular": {"terms": {"field": "popularity", "size": 3}}}}')
    path = es_config(tmp_path, url, index, template=template)
    service = RerankerService(load_config(path)).open()
    try:
        answer = service.search("espresso grinder", 10)
        buckets = answer["aggregations"]["popular"]["buckets"]
        assert 0 < len(buckets) <= 3 and answer["hits"]
        assert sum(b["doc_count"] for b in buckets) <= answer["total"]
        assert "facets" not in answer
    finally:
        service.close()
    reserved = template.replace('"popular"', '"reranker_facet:popular"')
    path = es_config(tmp_path, url, index, template=reserved)
    with pytest.raises(BackendError, match="reserved for the facets"):
        RerankerService(load_config(path)).open()


def backend_for_template_ids(tmp_path, url, index, template):
    path = es_config(tmp_path, url, index, template=template, template_params={"op": "or"})
    backend = backend_for(path)
    backend.open()
    ids = backend.search("espresso", 20).ids
    backend.close()
    return ids


def scenario_start_up_checks_name_the_problem(tmp_path, url, corpus):
    index, _ = index_corpus(tmp_path, url, corpus)
    cases = [
        ({"index": "no-such-index-here"}, "no-such-index-here"),
        ({"feature_queries": {"broken": {"no_such_query": {"x": "{{query}}"}}}},
         "feature query 'query_score:broken'"),
        ({"query": {"no_such_query": {"title": "{{query}}"}}}, "retrieval query"),
        ({"query": {"match": {"title": "fixed text"}}}, "no {{query}} placeholder"),
        ({"template": '{"query": {"match": {"title": "{{query}}", "x": "{{missing}}"}}}'},
         "the template uses {{missing}}, which backend.template_params does not give"),
        ({"template": '{"query": {"match": {"title": "{{query}}"}}, "sort": ["_doc"]}'},
         "render the query, and aggregations if any, alone"),
        ({"template": '{"query": {"match": {"title": "{{query}"}}}'}, "does not render"),
        ({"template_id": "no-such-template"}, "no-such-template"),
    ]
    for settings, message in cases:
        settings = {"index": index, **settings}
        with pytest.raises(BackendError) as info:
            backend = backend_for(es_config(tmp_path, url, **settings))
            backend.open()
        assert message in info.value.message, info.value.message
    # a parameter with a default (an inverted section) may be left out
    backend = backend_for(es_config(tmp_path, url, index=index, template=(
        '{"query": {"match": {"title": {"query": "{{query}}", "boost": '
        '{{boost}}{{^boost}}1{{/boost}}}}}}')))
    backend.open()
    backend.close()


def scenario_bulk_failures_name_the_documents(tmp_path, url):
    index = unique_index()
    path = es_config(tmp_path, url, index)
    docs = [{"id": "a", "title": "tea", "body": "green tea", "popularity": 3},
            {"id": "b", "title": "kettle", "body": "steel", "popularity": "very"},
            {"title": "no id"}]
    result = run_cli("index", "-c", str(path), str(write_docs(tmp_path, docs)), check=False)
    assert result.returncode == 1
    assert "indexed 1 documents" in result.stdout
    assert "line 2 (id b)" in result.stderr and "popularity" in result.stderr
    assert "line 3" in result.stderr and "'id'" in result.stderr


def scenario_clicked_result_moves_up(tmp_path, url, corpus):
    index, _ = index_corpus(tmp_path, url, corpus)
    # the background trainer waits; `reranker train --close-all` applies the clicks
    # the default learner perturbs what it shows; a seed makes the pages reproducible
    path = es_config(tmp_path, url, index, sections={"trainer": {"feedback_window": 3600.0},
                                                      "learner": {"seed": 11}})
    server = ServeProcess(path)
    try:
        for query, topic in corpus.queries:
            page = server.post("/search", {"query": query}).json()
            low = [h for h in page["hits"] if h["rank"] >= 5 and corpus.label(topic, h["id"]) > 0]
            if low:
                break
        target = low[-1]["id"]
        before = {h["id"]: h["rank"] for h in page["hits"]}[target]
        clicks = 0
        for _ in range(8):
            page = server.post("/search", {"query": query}).json()
            if target in {h["id"] for h in page["hits"]}:  # the 11th may take its place
                assert server.post("/click", {"impression_id": page["impression_id"],
                                              "doc_id": target}).status_code == 202
                clicks += 1
        assert clicks >= 5
        run_cli("train", "-c", str(path), "--close-all")
        # (the service's own trainer may apply the pages the command closed before it does:
        # either saves version 1, which the service then serves)
        wait_until(lambda: server.post("/search", {"query": "x"}).json()["model_version"] >= 1)
        after_page = server.post("/search", {"query": query}).json()
        assert after_page["model_version"] >= 1
        after = {h["id"]: h["rank"] for h in after_page["hits"]}.get(target, 99)
        assert after < before, (before, after)
        health = requests.get(server.url + "/healthz", timeout=10).json()
        assert health["backend"]["type"] == BACKEND["type"]
        assert health["backend"]["status"] == "ok"
    finally:
        server.stop()


def scenario_service_uses_elasticsearch_features(tmp_path, url, corpus):
    """The same feature names whichever backend serves."""
    index, path = index_corpus(tmp_path, url, corpus)
    service = RerankerService(load_config(path)).open()
    try:
        assert list(service.spec.names) == [
            "backend_score", "field_score:title", "field_score:body",
            "field_value:popularity", "click_lift:query_doc", "click_lift:doc"]
        # (the general model's: all but the query's own click lift)
        assert "click_lift:query_doc" not in service.model.feature_names
        page = service.search("espresso grinder", 10)
        imp = service.events.get_impression(page["impression_id"])
        assert imp.features.shape[1] == 6 and imp.features[:, 1:3].max() > 0
        # the click features work on this backend too: a click raises the document's lift
        # for the query, and for the other queries it is shown for
        clicked = page["hits"][3]["id"]
        service.click(page["impression_id"], clicked)
        again = service.search("espresso grinder", 10)
        imp = service.events.get_impression(again["impression_id"])
        row = imp.doc_ids.index(clicked)
        others = [i for i in range(len(imp.doc_ids)) if i != row]
        assert imp.features[row, 4] > imp.features[others, 4].max()
        other_query = service.search("grinder", 100)
        imp = service.events.get_impression(other_query["impression_id"])
        row = imp.doc_ids.index(clicked)
        others = [i for i in range(len(imp.doc_ids)) if i != row]
        assert imp.features[row, 5] > imp.features[others, 5].max()
    finally:
        service.close()

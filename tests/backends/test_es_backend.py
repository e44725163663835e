"""The Elasticsearch backend through the official client, against the protocol-level
stand-in (8.x and 9.x answers, errors, timeouts, dropped connections)."""

import time

import numpy as np
import pytest
import requests

from reranker.core.config import load_config
from reranker.core.errors import BackendError, BackendUnavailableError
from reranker.serving.service import RerankerService
from tests.support import es_scenarios as scenarios
from tests.support.configs import write_config, write_docs
from tests.support.es_standin import Index, Standin
from tests.support.servers import LiveServer, run_cli


@pytest.fixture(params=["8.15.1", "9.1.0"])
def standin(request):
    server = Standin(request.param)
    yield server
    server.stop()


@pytest.fixture
def es8():
    server = Standin("8.15.1")
    yield server
    server.stop()


@pytest.mark.parametrize("name", scenarios.SEARCH_SCENARIOS)
def test_scenario(standin, tmp_path, corpus, name):
    getattr(scenarios, f"scenario_{name}")(tmp_path, standin.url, corpus)


def test_the_clean_up_after_a_real_cluster_s_scenarios_leaves_nothing(es8, tmp_path, corpus):
    es8.indices["products"] = Index("products", {})  # not the scenarios': kept
    es8.indices["reranker-test-other-run"] = Index("reranker-test-other-run", {})  # kept too
    scenarios.scenario_template_and_stored_template(tmp_path, es8.url, corpus)
    assert len(es8.indices) == 3 and es8.scripts
    scenarios.clean_up(es8.url)
    assert list(es8.indices) == ["products", "reranker-test-other-run"] and not es8.scripts
    scenarios.clean_up(es8.url)  # nothing left to delete: no error


def test_bulk_failures(standin, tmp_path):
    scenarios.scenario_bulk_failures_name_the_documents(tmp_path, standin.url)


def test_end_to_end_clicked_result_moves_up(standin, tmp_path, corpus):
    scenarios.scenario_clicked_result_moves_up(tmp_path, standin.url, corpus)


def test_talks_to_each_major_version_in_its_own_mode(standin, tmp_path, corpus):
    index, path = scenarios.index_corpus(tmp_path, standin.url, corpus)
    accept = [h.get("accept", "") for _, _, h in standin.requests if h.get("accept")]
    assert all(f"compatible-with={standin.major}" in a for a in accept[1:]), accept
    assert "compatible-with=8" in accept[0]  # the version probe speaks 8, which both accept


def test_older_servers_are_refused(tmp_path):
    old = Standin("8.6.2")
    try:
        with pytest.raises(BackendError, match="8.6.2 .* too old: .* 8.8 or later"):
            scenarios.backend_for(scenarios.es_config(tmp_path, old.url, "x")).open()
    finally:
        old.stop()


def test_one_request_per_search(es8, tmp_path, corpus):
    _, path = scenarios.index_corpus(tmp_path, es8.url, corpus)
    backend = scenarios.backend_for(path)
    backend.open()
    before = len(es8.requests)
    backend.search("espresso grinder", 100)
    assert len(es8.requests) == before + 1
    assert es8.requests[-1][1].endswith("/_search")


def test_bulk_failures_with_repeated_ids_name_the_right_lines(es8, tmp_path):
    path = scenarios.es_config(tmp_path, es8.url, scenarios.unique_index())
    docs = [{"id": "x1", "title": "tea", "body": "hot", "popularity": "bad"},
            {"id": "x1", "title": "tea", "body": "hot", "popularity": 2},
            {"id": "x1", "title": "tea", "body": "hot", "popularity": "worse"}]
    result = run_cli("index", "-c", str(path), str(write_docs(tmp_path, docs)), check=False)
    failed = [line for line in result.stderr.splitlines() if line.startswith("failed:")]
    assert len(failed) == 2
    assert "line 1 (id x1)" in failed[0] and "line 3 (id x1)" in failed[1]


def test_unreachable_cluster(tmp_path):
    path = scenarios.es_config(tmp_path, "http://127.0.0.1:9", "x", request_timeout=1.0,
                               max_retries=0)
    started = time.perf_counter()
    with pytest.raises(BackendUnavailableError, match="unreachable"):
        scenarios.backend_for(path).open()
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize("fault, message", [("delay", "did not answer within 0.5s"),
                                            ("drop", "Elasticsearch"),
                                            ("fail_status", "unavailable")])
def test_faults_at_search_time_are_503_within_the_timeout(es8, tmp_path, corpus, fault, message):
    index, _ = scenarios.index_corpus(tmp_path, es8.url, corpus)
    # with the default retries: a timed-out search is not retried, so it fails in time
    path = scenarios.es_config(tmp_path, es8.url, index, request_timeout=0.5)
    live = LiveServer(path)
    try:
        assert live.post("/search", {"query": "tea"}).status_code == 200
        setattr(es8, fault, {"delay": 3.0, "drop": True, "fail_status": 503}[fault])
        started = time.perf_counter()
        response = live.post("/search", {"query": "tea"})
        elapsed = time.perf_counter() - started
        assert response.status_code == 503, response.text
        assert message in response.json()["error"]["message"]
        assert elapsed < 0.95
        health = live.get("/healthz")
        assert health.status_code == 200
        setattr(es8, fault, {"delay": 0.0, "drop": False, "fail_status": None}[fault])
        assert live.post("/search", {"query": "tea"}).status_code == 200
        assert live.get("/healthz").json()["backend"]["status"] == "ok"
    finally:
        live.stop()


def test_health_reports_an_unreachable_cluster(es8, tmp_path, corpus):
    index, path = scenarios.index_corpus(tmp_path, es8.url, corpus)
    live = LiveServer(path)
    try:
        es8.stop()
        health = live.get("/healthz").json()
        assert health["status"] == "degraded" and health["backend"]["status"] == "unavailable"
        assert live.post("/search", {"query": "tea"}).status_code == 503
    finally:
        live.stop()


def test_secrets_come_from_the_environment(es8, tmp_path, corpus, monkeypatch):
    index, _ = scenarios.index_corpus(tmp_path, es8.url, corpus)
    path = scenarios.es_config(tmp_path, es8.url, index, api_key_env="RERANKER_TEST_API_KEY")
    with pytest.raises(BackendError, match="RERANKER_TEST_API_KEY is not set"):
        scenarios.backend_for(path).open()
    monkeypatch.setenv("RERANKER_TEST_API_KEY", "c2VjcmV0LWtleQ==")
    backend = scenarios.backend_for(path)
    backend.open()
    assert es8.requests[-1][2].get("authorization") == "ApiKey c2VjcmV0LWtleQ=="
    backend.close()
    path = scenarios.es_config(tmp_path, es8.url, index, username="reranker",
                               password_env="RERANKER_TEST_PASSWORD")
    monkeypatch.setenv("RERANKER_TEST_PASSWORD", "pw")
    backend = scenarios.backend_for(path)
    backend.open()
    assert es8.requests[-1][2].get("authorization", "").startswith("Basic ")
    backend.close()


def test_an_alias_can_be_wrapped(es8, tmp_path, corpus):
    index, _ = scenarios.index_corpus(tmp_path, es8.url, corpus)
    es8.aliases["products"] = index
    backend = scenarios.backend_for(scenarios.es_config(tmp_path, es8.url, "products"))
    backend.open()
    assert len(backend.search("espresso", 10)) > 0


def test_learning_to_rank_feature_set(es8, tmp_path, corpus):
    index, _ = scenarios.index_corpus(tmp_path, es8.url, corpus)
    es8.featuresets["docs_features"] = [
        {"name": "title_match", "template": {"match": {"title": "{{keywords}}"}}},
        {"name": "body_match", "template": {"match": {"body": "{{keywords}}"}}},
    ]
    path = scenarios.es_config(tmp_path, es8.url, index, ltr_featureset="docs_features",
                               ltr_features=["title_match", "body_match"])
    service = RerankerService(load_config(path)).open()
    try:
        assert list(service.model.feature_names)[1:3] == ["ltr:title_match", "ltr:body_match"]
        page = service.search("espresso grinder", 10)
        X = service.events.get_impression(page["impression_id"]).features
        assert X[:, 1:3].max() > 0
    finally:
        service.close()
    path = scenarios.es_config(tmp_path, es8.url, index, ltr_featureset="docs_features",
                               ltr_features=["body_match", "title_match"])
    with pytest.raises(BackendError, match="has \\['title_match', 'body_match'\\]"):
        scenarios.backend_for(path).open()


def test_a_changed_feature_query_starts_from_the_shared_weights(es8, tmp_path, corpus,
                                                                 caplog):
    """A model trained with one feature set is kept apart when the features change; the new
    one starts from its weights on the features both share."""
    index, path = scenarios.index_corpus(tmp_path, es8.url, corpus)
    service = RerankerService(load_config(path)).open()
    page = service.search("espresso grinder", 10)
    for position in (4, 1):  # one of them teaches whichever pairing the page used
        service.click(page["impression_id"], page["hits"][position]["id"])
    service.trainer.run_once(close_all=True)
    old = service.model
    service.close()
    path = scenarios.es_config(tmp_path, es8.url, index,
                               feature_queries={"title": {"match": {"title": "{{query}}"}}})
    service = RerankerService(load_config(path)).open()
    try:
        model = service.model
        assert model.version == 1 and model.feature_names != old.feature_names
        shared = [name for name in model.feature_names if name in old.feature_names]
        assert shared and "query_score:title" in model.feature_names
        new_w = dict(zip(model.feature_names, model.learner.learned_weights(), strict=True))
        old_w = dict(zip(old.feature_names, old.learner.learned_weights(), strict=True))
        assert all(new_w[name] == old_w[name] for name in shared)
        assert any("the feature set changed" in r.getMessage() for r in caplog.records)
        assert service.search("espresso grinder", 10)["hits"]
    finally:
        service.close()


def test_embedded_only_options_are_refused_on_the_embedded_backend(tmp_path):
    path = write_config(tmp_path, backend={"feature_queries": {"t": {"match": {"title": "x"}}}})
    with pytest.raises(BackendError, match="only supported by the elasticsearch backend"):
        RerankerService(load_config(path))


def test_stand_in_refuses_mismatched_compatibility_headers(es8):
    response = requests.get(es8.url, timeout=10, headers={
        "Accept": "application/vnd.elasticsearch+json; compatible-with=9"})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "media_type_header_exception"


def test_the_walkthrough_example_is_valid():
    from pathlib import Path

    from reranker.backends.elasticsearch import TemplateQuery

    folder = Path(__file__).resolve().parents[2] / "examples" / "elasticsearch"
    config = load_config(folder / "config.yaml", environ={})
    assert config.backend.type == "elasticsearch" and config.backend.template_id
    template = TemplateQuery((folder / "products-search.mustache").read_text(),
                             dict(config.backend.template_params), "example")
    query = template.render('red "running" shoes')
    assert query["multi_match"]["query"] == 'red "running" shoes'
    assert query["multi_match"]["fields"][0] == "title^2"
    import json
    mapping = json.loads((folder / "mapping.json").read_text())
    assert set(mapping["mappings"]["properties"]) >= {"title", "description", "rating"}


def test_a_failed_connection_is_retried_on_another_node(es8, tmp_path, corpus):
    index, _ = scenarios.index_corpus(tmp_path, es8.url, corpus)
    path = scenarios.es_config(tmp_path, "http://127.0.0.1:9", index, max_retries=2)
    config = load_config(path, {"backend.hosts": ["http://127.0.0.1:9", es8.url]})
    backend = RerankerService(config).backend
    backend.open()  # the dead node is skipped, the live one answers
    assert len(backend.search("espresso", 10)) > 0
    no_retry = load_config(path, {"backend.hosts": ["http://127.0.0.1:9"],
                                  "backend.max_retries": 0})
    with pytest.raises(BackendUnavailableError):
        RerankerService(no_retry).backend.open()


def test_cloud_id_and_tls_settings(tmp_path):
    import base64

    cloud = "reranker:" + base64.b64encode(b"es.example.test:443$abc123$def456").decode()
    path = scenarios.es_config(tmp_path, "http://unused:9200", "x", cloud_id=cloud)
    client = scenarios.backend_for(path)._connect()  # no request is made
    node = next(iter(client.transport.node_pool.all()))
    assert node.config.host == "abc123.es.example.test" and node.config.scheme == "https"
    path = scenarios.es_config(tmp_path, "https://localhost:9200", "x", ca_certs="missing-ca.crt")
    with pytest.raises(BackendError, match="backend.ca_certs: .*missing-ca.crt does not exist"):
        scenarios.backend_for(path)._connect()


def test_fields_are_checked_against_the_mapping_at_start_up(es8, tmp_path, corpus):
    index, _ = scenarios.index_corpus(tmp_path, es8.url, corpus)
    misspelt = scenarios.es_config(tmp_path, es8.url, index, fields=["title", "bdy"])
    with pytest.raises(BackendError, match="backend.fields: the mapping of .* has no field "
                                           "'bdy'; did you mean 'body'"):
        scenarios.backend_for(misspelt).open()
    numeric = scenarios.es_config(tmp_path, es8.url, index,
                                  sections={"features": {"numeric_fields": ["popularty"]}})
    with pytest.raises(BackendError, match="did you mean 'popularity'"):
        scenarios.backend_for(numeric).open()
    # a number kept as a keyword is refused at start-up, not served as a feature that is 0
    mapping = tmp_path / "mapping.json"
    mapping.write_text('{"properties": {"id": {"type": "keyword"}, "title": {"type": "text"},'
                       ' "body": {"type": "text"}, "popularity": {"type": "keyword"}}}')
    other = scenarios.unique_index()
    path = scenarios.es_config(tmp_path, es8.url, other, mapping=str(mapping))
    run_cli("index", "-c", str(path), str(write_docs(tmp_path, corpus.documents[:5])),
            check=False)
    result = run_cli("serve", "-c", str(path), "--port", "0", check=False, timeout=60)
    assert result.returncode != 0
    assert "maps 'popularity' as keyword, not as a number" in result.stderr


def test_a_key_that_may_only_search_the_index_serves(es8, tmp_path, corpus):
    """A key without the monitor privilege (the server's version) nor view_index_metadata
    (the mapping, the index's existence) starts, searches and reports itself healthy: the
    start-up checks read the field capabilities, which the read privilege allows."""
    index, path = scenarios.index_corpus(tmp_path, es8.url, corpus)
    es8.forbidden = {"info", "exists", "mapping"}
    before = len(es8.requests)
    service = RerankerService(load_config(path)).open()
    try:
        page = service.search("espresso grinder", 10)
        assert page["hits"] and page["hits"][0]["source"]["id"] == page["hits"][0]["id"]
        assert service.backend.health()["status"] == "ok"
        assert service.backend.server_version is None
        refused = [(m, p) for m, p, _ in es8.requests[before:]
                   if p == "/" or p.endswith("/_mapping") or m == "HEAD"]
        assert refused == [("GET", "/")]  # asked once, then never again
    finally:
        service.close()
    es8.forbidden = set()  # a key that may not even search is refused at start-up
    es8.fail_status = 403
    with pytest.raises(BackendError, match="Elasticsearch refused"):
        scenarios.backend_for(path).open()


def test_an_old_server_that_does_not_tell_its_version_is_refused_at_start_up(tmp_path,
                                                                              corpus):
    old = Standin("8.6.2")
    try:
        index = scenarios.unique_index()  # loaded by the site's own pipeline
        old.indices[index] = Index(index, {"properties": {
            "id": {"type": "keyword"}, "title": {"type": "text"}, "body": {"type": "text"},
            "popularity": {"type": "double"}}})
        for doc in corpus.documents[:20]:
            old.indices[index].put(doc["id"], doc)
        path = scenarios.es_config(tmp_path, old.url, index)
        old.forbidden = {"info"}
        with pytest.raises(BackendError, match="include_named_queries_score.*need "
                                               "Elasticsearch 8.8 or later"):
            scenarios.backend_for(path).open()
    finally:
        old.stop()


def test_an_index_of_a_remote_cluster_can_be_wrapped(es8, tmp_path, corpus):
    """``cluster:index``: the start-up checks use only what cross-cluster search allows
    (field capabilities and searches; the validate API refuses remote indices)."""
    index, _ = scenarios.index_corpus(tmp_path, es8.url, corpus)
    path = scenarios.es_config(tmp_path, es8.url, f"remote:{index}")
    service = RerankerService(load_config(path)).open()
    try:
        page = service.search("espresso grinder", 10)
        assert len(page["hits"]) == 10 and all(hit["source"] for hit in page["hits"])
    finally:
        service.close()
    assert not [p for _, p, _ in es8.requests if "_validate" in p and "remote:" in p]
    misspelt = scenarios.es_config(tmp_path, es8.url, f"remote:{index}", fields=["title", "bdy"])
    with pytest.raises(BackendError, match="has no field 'bdy'; did you mean 'body'"):
        scenarios.backend_for(misspelt).open()
    missing = scenarios.es_config(tmp_path, es8.url, "remote:nothing-here")
    with pytest.raises(BackendError, match="no index or alias 'remote:nothing-here'"):
        scenarios.backend_for(missing).open()


def test_a_date_field_is_a_numeric_feature_in_days(es8, tmp_path):
    """A date is usually text in ``_source``: it is read from the doc values as epoch
    milliseconds instead, and given in days since 1970 (in milliseconds every date after 2001
    would be clipped to the features' bound, one value for all); a number the document holds
    as text (which Elasticsearch indexes as a number) counts as that number."""
    name = scenarios.unique_index()  # the site's own index, loaded by its own pipeline
    mapping = {"properties": {"id": {"type": "keyword"}, "title": {"type": "text"},
                              "published": {"type": "date"}, "price": {"type": "double"}}}
    requests.put(f"{es8.url}/{name}", json={"mappings": mapping}, timeout=10).raise_for_status()
    docs = [{"id": "a", "title": "green tea", "published": "2024-03-01T12:00:00Z",
             "price": "4.5"},
            {"id": "b", "title": "black tea", "published": "2024-03-02", "price": 3},
            {"id": "c", "title": "tea pot"}]
    for doc in docs:
        es8.indices[name].put(doc["id"], doc)
    path = scenarios.es_config(tmp_path, es8.url, name, fields=["title"],
                               sections={"features": {"numeric_fields": ["published", "price"]}})
    backend = scenarios.backend_for(path)
    backend.open()
    try:
        assert backend.date_fields == ("published",)
        candidates = backend.search("tea", 10)
        values = dict(zip(candidates.ids, candidates.numeric.tolist(), strict=True))
        assert values["a"] == [19783.5, 4.5]  # 2024-03-01 at noon
        assert values["b"] == [19784.0, 3.0]
        assert all(v != v for v in values["c"])  # missing: NaN, then features.missing_value
        from reranker.core.config import load_config
        from reranker.features.extraction import FeatureSpec

        spec = FeatureSpec.from_config(load_config(path))
        column = spec.names.index("field_value:published")
        X = spec.build(candidates, np.zeros((len(candidates), 2)) if spec.click_features
                       else None)
        assert len(set(X[:2, column].tolist())) == 2  # newer and older, told apart
        body = backend.request_body("tea", 10)
        assert body["docvalue_fields"] == [{"field": "published", "format": "epoch_millis"}]
        assert body["_source"] == ["price"]
        assert candidates.load_sources([0])[0]["title"]
    finally:
        backend.close()


def test_hits_of_one_id_from_two_indices_are_shown_once(es8, tmp_path, corpus):
    """An alias or pattern over two indices may find a document of the same id in each:
    the better hit stands for it."""
    index, path = scenarios.index_corpus(tmp_path, es8.url, corpus)
    backend = scenarios.backend_for(path)
    backend.open()
    try:
        response = {"hits": {"total": {"value": 3}, "hits": [
            {"_index": "a", "_id": "d1", "_score": 3.0, "_source": {"popularity": 1},
             "matched_queries": {"backend_score": 3.0}},
            {"_index": "b", "_id": "d1", "_score": 2.0, "_source": {"popularity": 2},
             "matched_queries": {"backend_score": 2.0}},
            {"_index": "b", "_id": "d2", "_score": 1.0, "_source": {"popularity": 5},
             "matched_queries": {"backend_score": 1.0}}]}}
        candidates = backend.candidates_from_response(response)
        assert candidates.ids == ["d1", "d2"]
        assert candidates.scores.tolist() == [3.0, 1.0]
        assert candidates.numeric[:, 0].tolist() == [1.0, 5.0]
    finally:
        backend.close()


def test_a_search_answered_in_part_is_served_and_logged_once_a_minute(es8, tmp_path, corpus,
                                                                       caplog):
    index, path = scenarios.index_corpus(tmp_path, es8.url, corpus)
    backend = scenarios.backend_for(path)
    backend.open()
    hit = {"_index": index, "_id": "d1", "_score": 1.0, "_source": {},
           "matched_queries": {"backend_score": 1.0}}
    partial = {"_shards": {"total": 5, "successful": 4, "failed": 1, "failures": [
        {"shard": 2, "reason": {"type": "node_not_connected_exception",
                                "reason": "[node-2] disconnected"}}]},
        "hits": {"total": {"value": 1}, "hits": [hit]}}
    try:
        with caplog.at_level("WARNING", logger="reranker.backends.elasticsearch"):
            assert backend.candidates_from_response(partial).ids == ["d1"]
            backend.candidates_from_response(partial)
            backend.candidates_from_response({"timed_out": True, **partial, "_shards": {}})
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1
        assert "1 of 5 shards failed: node_not_connected_exception" in lines[0]
        backend._partial_logged -= 61.0  # a minute later: the time-out is told
        with caplog.at_level("WARNING", logger="reranker.backends.elasticsearch"):
            backend.candidates_from_response({**partial, "timed_out": True, "_shards": {}})
        assert "the search timed out" in caplog.records[-1].getMessage()
    finally:
        backend.close()


def test_a_missing_feature_set_is_named(es8, tmp_path, corpus):
    """The Learning to Rank plugin answers a feature set as its stored document, and 404
    when there is none."""
    index, _ = scenarios.index_corpus(tmp_path, es8.url, corpus)
    path = scenarios.es_config(tmp_path, es8.url, index, ltr_featureset="nothing",
                               ltr_features=["a"])
    with pytest.raises(BackendError, match="no feature set 'nothing' in the Learning to Rank"):
        scenarios.backend_for(path).open()


@pytest.mark.parametrize("tag", ["{{#join}}tags{{/join}}",
                                 "{{#join delimiter='||'}}tags{{/join delimiter='||'}}",
                                 "{{#url}}{{query}}{{/url}}"])
def test_mustache_functions_reranker_cannot_render_are_refused(tmp_path, tag):
    path = write_config(tmp_path, backend={
        "type": "elasticsearch", "hosts": ["http://127.0.0.1:1"], "index": "x",
        "template": '{"match": {"title": "' + tag + '"}}'})
    with pytest.raises(BackendError, match="backend.template: the template uses "
                                           "\\{\\{#(join|url)\\}\\}"):
        scenarios.backend_for(path)


def test_reranker_index_maps_numbers_as_doubles(es8, tmp_path):
    """A float would widen 67.3 to 67.30000305175781 in facets and lose integers above
    2**24 in filters."""
    docs = [{"id": "a", "title": "tea", "price": 67.3, "brand": "x"}]
    path = scenarios.es_config(tmp_path, es8.url, scenarios.unique_index(), fields=["title"],
                               filter_fields=["price", "brand"],
                               sections={"features": {"numeric_fields": ["price"]}})
    run_cli("index", "-c", str(path), str(write_docs(tmp_path, docs)))
    index = next(iter(es8.indices.values()))
    assert index.properties["price"] == {"type": "double"}
    assert index.properties["brand"] == {"type": "keyword"}
    path = scenarios.es_config(tmp_path, es8.url, scenarios.unique_index(), fields=["title"],
                               filter_fields=["rating"],
                               sections={"features": {"numeric_fields": []}})
    run_cli("index", "-c", str(path), str(write_docs(tmp_path, [{"id": "b", "title": "tea",
                                                                 "rating": 4.5}])))
    assert es8.indices[load_config(path).backend.index].properties["rating"] == {
        "type": "double"}


def test_health_asks_the_index_so_a_missing_index_or_alias_shows(es8, tmp_path):
    """/healthz and /readyz ask the index, not the server: an alias removed, or the index
    deleted, while the cluster answers, makes every search fail, and health says so."""
    name = scenarios.unique_index()
    requests.put(f"{es8.url}/{name}", json={"mappings": {"properties": {
        "id": {"type": "keyword"}, "title": {"type": "text"}}}}, timeout=10).raise_for_status()
    es8.indices[name].put("a", {"id": "a", "title": "green tea"})
    backend = scenarios.backend_for(scenarios.es_config(
        tmp_path, es8.url, name, fields=["title"],
        sections={"features": {"numeric_fields": []}}))
    backend.open()
    try:
        assert backend.health()["status"] == "ok"
        del es8.indices[name]
        health = backend.health()
        assert health["status"] == "unavailable" and "no such index" in health["error"]
    finally:
        backend.close()


def test_an_unreachable_cluster_is_named_without_its_connection_details(tmp_path):
    """The client's own text names the host and port, and a URL may hold a password: the
    message keeps the configured hosts without credentials, and says why in a few words."""
    import socket

    from reranker.core.errors import BackendUnavailableError

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = scenarios.backend_for(scenarios.es_config(
        tmp_path, f"http://elastic:s3cret-pw@127.0.0.1:{port}", "products", fields=["title"]))
    with pytest.raises(BackendUnavailableError) as info:
        backend.open()
    message = info.value.message
    assert "connection refused" in message and "s3cret-pw" not in message
    assert f"http://127.0.0.1:{port}" in message and "port=" not in message


@pytest.mark.parametrize("backend_extra, numeric, words", [
    ({"filter_fields": ["color_text"]}, [],
     "backend.filter_fields: {index!r} maps 'color_text' as text; filters and facets need a "
     "keyword, number, boolean or date field (a text field often has a keyword sub-field, "
     "such as 'color_text.keyword')"),
    ({"filter_fields": ["variants.color"]}, [],
     "'variants.color' is inside a nested field of {index!r}"),
    ({}, ["variants.stock"], "'variants.stock' is inside a nested field of {index!r}"),
    ({"fields": ["titel"], "feature_queries": {
        "phrase": {"match_phrase": {"title": "{{query}}"}}}}, [],
     "backend.fields: the mapping of {index!r} has no field 'titel'; did you mean 'title'?"),
])
def test_fields_that_filters_features_or_the_retrieval_cannot_use_are_refused_at_start_up(
        es8, tmp_path, backend_extra, numeric, words):
    """A text field as a filter, a field inside a nested object (a filter or a feature), or
    a misspelt field of the default retrieval beside feature queries: each fails at every
    search or matches nothing, so start-up names it."""
    name = scenarios.unique_index()
    mapping = {"properties": {
        "id": {"type": "keyword"}, "title": {"type": "text"},
        "color_text": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
        "variants": {"type": "nested", "properties": {"color": {"type": "keyword"},
                                                      "stock": {"type": "integer"}}}}}
    requests.put(f"{es8.url}/{name}", json={"mappings": mapping}, timeout=10).raise_for_status()
    es8.indices[name].put("a", {"id": "a", "title": "green tea", "color_text": "green"})
    backend = scenarios.backend_for(scenarios.es_config(
        tmp_path, es8.url, name, **{"fields": ["title"], **backend_extra},
        sections={"features": {"numeric_fields": numeric}}))
    with pytest.raises(BackendError) as info:
        backend.open()
    assert words.format(index=name) in info.value.message, info.value.message


def test_reranker_index_takes_dates_and_numbers_as_text_as_elasticsearch_does(es8, tmp_path):
    """Into Elasticsearch, a numeric feature may be a number held as text, or a date where
    the given mapping maps it as one; other text is still refused by name."""
    import json as json_module

    mapping = tmp_path / "mapping.json"
    mapping.write_text(json_module.dumps({"properties": {
        "id": {"type": "keyword"}, "title": {"type": "text"}, "price": {"type": "double"},
        "released": {"type": "date"}}}))
    docs = [{"id": "a", "title": "green tea", "price": "4.50", "released": "2023-09-16"},
            {"id": "b", "title": "black tea", "price": 3, "released": "2024-01-02T10:00:00Z"},
            {"id": "c", "title": "tea pot", "price": "cheap", "released": "2024-02-01"}]
    name = scenarios.unique_index()
    path = scenarios.es_config(tmp_path, es8.url, name, fields=["title"],
                               mapping=str(mapping),
                               sections={"features": {"numeric_fields": ["price",
                                                                         "released"]}})
    result = run_cli("index", "-c", str(path), str(write_docs(tmp_path, docs)), check=False)
    assert "indexed 2 documents" in result.stdout, result.stdout + result.stderr
    assert "numeric field 'price' holds 'cheap'" in result.stderr
    backend = scenarios.backend_for(path)
    backend.open()
    try:
        values = dict(zip(backend.search("tea", 10).ids,
                          backend.search("tea", 10).numeric.tolist(), strict=True))
        assert values["a"] == [4.5, 19616.0]  # 2023-09-16, in days
    finally:
        backend.close()

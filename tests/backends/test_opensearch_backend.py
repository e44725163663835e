"""The OpenSearch backend (``backend.type: opensearch``) through the official opensearch-py
client, against the protocol-level stand-in answering as OpenSearch 2.x and 3.x: every search
scenario of the Elasticsearch backend, indexing, a clicked result that moves up through the
service, and what it says of a server that is not one it can use."""

import pytest

from reranker.core.errors import BackendError
from tests.support import es_scenarios as scenarios
from tests.support.es_standin import Standin


@pytest.fixture(params=["2.19.1", "3.1.0"])
def opensearch(request):
    server = Standin(request.param, distribution="opensearch")
    with scenarios.backend_type("opensearch"):
        yield server
    server.stop()


@pytest.mark.parametrize("name", scenarios.SEARCH_SCENARIOS)
def test_scenario(opensearch, tmp_path, corpus, name):
    getattr(scenarios, f"scenario_{name}")(tmp_path, opensearch.url, corpus)


def test_bulk_failures(opensearch, tmp_path):
    scenarios.scenario_bulk_failures_name_the_documents(tmp_path, opensearch.url)


def test_end_to_end_clicked_result_moves_up(opensearch, tmp_path, corpus):
    scenarios.scenario_clicked_result_moves_up(tmp_path, opensearch.url, corpus)


def test_it_speaks_opensearch_s_own_media_types(opensearch, tmp_path, corpus):
    scenarios.index_corpus(tmp_path, opensearch.url, corpus)
    types = {h.get(name, "") for _, _, h in opensearch.requests
             for name in ("accept", "content-type", "Accept", "Content-Type")}
    assert not any("vnd.elasticsearch" in t for t in types), types


def open_backend(tmp_path, url, kind, **backend):
    with scenarios.backend_type(kind):
        path = scenarios.es_config(tmp_path, url, "products", **backend)
    scenarios.backend_for(path).open()


@pytest.mark.parametrize("version, kind, words", [
    ("2.11.0", "opensearch", "OpenSearch 2.11.0 at http://127.0.0.1"),
    ("8.15.1", "opensearch", "is Elasticsearch 8.15.1: set backend.type to elasticsearch"),
])
def test_a_server_it_cannot_use_is_named(tmp_path, version, kind, words):
    server = Standin(version, distribution="elasticsearch" if version.startswith("8")
                     else "opensearch")
    try:
        with pytest.raises(BackendError) as info:
            open_backend(tmp_path, server.url, kind)
        assert words in info.value.message
        if version == "2.11.0":
            assert "2.13 or later" in info.value.message
    finally:
        server.stop()


def test_the_elasticsearch_backend_cannot_talk_to_opensearch(opensearch, tmp_path):
    """What the OpenSearch backend is for: the Elasticsearch client's media types are
    refused by an OpenSearch server."""
    with pytest.raises(BackendError) as info:
        open_backend(tmp_path, opensearch.url, "elasticsearch")
    assert "Elasticsearch refused" in info.value.message


@pytest.mark.parametrize("backend, words", [
    ({"cloud_id": "deployment:abc"}, "backend.cloud_id is Elastic Cloud's"),
    ({"api_key_env": "KEY"}, "not Elasticsearch API keys"),
    ({"username": "admin"}, "backend.password_env"),
])
def test_credentials_it_cannot_use_are_named(opensearch, tmp_path, backend, words):
    with pytest.raises(BackendError) as info:
        open_backend(tmp_path, opensearch.url, "opensearch", **backend)
    assert words in info.value.message


def test_basic_authentication_goes_with_every_request(opensearch, tmp_path, corpus,
                                                      monkeypatch):
    monkeypatch.setenv("OS_PASSWORD", "s3cret")
    scenarios.index_corpus(tmp_path, opensearch.url, corpus, username="admin",
                           password_env="OS_PASSWORD")
    assert all(h.get("authorization", h.get("Authorization", "")).startswith("Basic ")
               for _, _, h in opensearch.requests)


def test_the_log_goes_into_opensearch_s_ubi_indices(opensearch, tmp_path, corpus):
    from reranker.core.config import load_config
    from reranker.serving.service import RerankerService
    from tests.support.servers import run_cli

    _, path = scenarios.index_corpus(tmp_path, opensearch.url, corpus)
    service = RerankerService(load_config(path)).open()
    try:
        page = service.search("tea kettle", 10, session_id="s1")
        service.click(page["impression_id"], page["hits"][2]["id"], session_id="s1")
        service.events.close_impressions(float("inf"))
    finally:
        service.close()
    assert "1 UBI queries" in run_cli("ubi", "export", "-c", str(path), "--to-cluster").stdout
    (query,) = opensearch.indices["ubi_queries"].docs.values()
    assert query["query_id"] == page["impression_id"]
    clicks = [e for e in opensearch.indices["ubi_events"].docs.values()
              if e["action_name"] == "click"]
    assert [c["event_attributes"]["position"]["ordinal"] for c in clicks] == [3]


def test_amazon_opensearch_requests_are_signed(opensearch, tmp_path, corpus, monkeypatch):
    """backend.aws_region: every request carries an AWS Signature Version 4 for the region
    and service, from the credentials the AWS SDK finds (here, the environment's)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    scenarios.index_corpus(tmp_path, opensearch.url, corpus, aws_region="eu-west-1",
                           aws_service="aoss")
    signatures = [h.get("authorization", h.get("Authorization", ""))
                  for _, _, h in opensearch.requests]
    assert signatures and all(s.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
                              and "/eu-west-1/aoss/aws4_request" in s for s in signatures)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(BackendError) as info:
        open_backend(tmp_path, opensearch.url, "opensearch", aws_region="eu-west-1")
    assert "found no credentials" in info.value.message

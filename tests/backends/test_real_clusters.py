"""The Elasticsearch and OpenSearch scenarios against real clusters, when they are configured:

    RERANKER_TEST_ES_URL=http://localhost:9200 make test
    RERANKER_TEST_OPENSEARCH_URL=https://admin:password@localhost:9200 make test

(credentials may go in the URL, http://user:password@host:9200). Each scenario creates its
own index named reranker-test-<run>-<random>, deleted after the test with the stored
template it may have made (another test run against the same cluster keeps its own).
Without a variable, its cluster's tests are skipped.
"""

import os

import pytest

from tests.support import es_scenarios as scenarios

#: backend.type -> the variable that names a real cluster of it
CLUSTERS = {"elasticsearch": "RERANKER_TEST_ES_URL", "opensearch": "RERANKER_TEST_OPENSEARCH_URL"}


@pytest.fixture(params=sorted(CLUSTERS))
def cluster(request):
    """A real cluster's URL, its scenarios configured with its backend.type."""
    url = os.environ.get(CLUSTERS[request.param])
    if not url:
        pytest.skip(f"{CLUSTERS[request.param]} is not set: no real {request.param} cluster "
                    f"to test against")
    with scenarios.backend_type(request.param):
        yield url
    scenarios.clean_up(url)


@pytest.mark.parametrize("name", [*scenarios.SEARCH_SCENARIOS, "clicked_result_moves_up"])
def test_scenario_on_a_real_cluster(cluster, tmp_path, corpus, name):
    getattr(scenarios, f"scenario_{name}")(tmp_path, cluster, corpus)


def test_bulk_failures_on_a_real_cluster(cluster, tmp_path):
    scenarios.scenario_bulk_failures_name_the_documents(tmp_path, cluster)

"""The Elasticsearch scenarios against a real cluster, when one is configured:

    RERANKER_TEST_ES_URL=http://localhost:9200 make test

(credentials may go in the URL, http://user:password@host:9200). Each scenario creates its
own index named reranker-test-<run>-<random>, deleted after the test with the stored
template it may have made (another test run against the same cluster keeps its own).
Without the variable these tests are skipped.
"""

import os

import pytest

from tests.support import es_scenarios as scenarios

URL = os.environ.get("RERANKER_TEST_ES_URL")

pytestmark = pytest.mark.skipif(not URL, reason="RERANKER_TEST_ES_URL is not set: no real "
                                                "Elasticsearch cluster to test against")


@pytest.fixture(autouse=True)
def clean_cluster():
    yield
    scenarios.clean_up(URL)


@pytest.mark.parametrize("name", [*scenarios.SEARCH_SCENARIOS, "clicked_result_moves_up"])
def test_scenario_on_a_real_cluster(tmp_path, corpus, name):
    getattr(scenarios, f"scenario_{name}")(tmp_path, URL, corpus)


def test_bulk_failures_on_a_real_cluster(tmp_path):
    scenarios.scenario_bulk_failures_name_the_documents(tmp_path, URL)

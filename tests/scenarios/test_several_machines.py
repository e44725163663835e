"""Several machines on one host, sharing nothing but the PostgreSQL database
(``store.model_store: database``): two ``reranker serve --workers 2`` groups in working
directories of their own, a follower trainer in a third, Elasticsearch through the stand-in.
Clicks on any machine are applied once, a new version, a pin and a query rule reach every
machine, and a machine restarted mid-traffic serves what the others serve."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import requests

from reranker.testing import cli_env, reranker_command
from tests.support.es_scenarios import es_config, index_corpus
from tests.support.es_standin import Standin
from tests.support.servers import ServeProcess, run_cli
from tests.support.traffic import learn


@pytest.fixture
def es8():
    server = Standin("8.15.1")
    yield server
    server.stop()


def machine(folder, url, index, dsn):
    """A machine's working directory with its own configuration (the same settings on
    every machine; nothing on disk is shared)."""
    folder.mkdir()
    return es_config(folder, url, index, sections={
        "store": {"type": "postgresql", "dsn": dsn, "model_store": "database"},
        "trainer": {"enabled": False, "feedback_window": 1.0, "interval": 0.2},
        "learner": {"query_balance": False}})


def served_version(server, query="tea kettle") -> int:
    answer = requests.post(server.url + "/search", json={"query": query}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["model_version"]


def every_worker_serves(server, version, seconds=10.0) -> float:
    """Seconds until twenty searches in a row (each on a connection of its own, which
    either worker may take) are ranked by ``version``; fails after ``seconds``."""
    started = time.monotonic()
    while True:
        if all(served_version(server) == version for _ in range(20)):
            return time.monotonic() - started
        assert time.monotonic() - started < seconds, \
            f"{server.url} does not serve version {version}: {server.log_path.read_text()}"
        time.sleep(0.05)


def listing(config) -> dict:
    return json.loads(run_cli("models", "list", "--json", "-c", str(config)).stdout)[0]


def test_machines_that_share_only_the_database(tmp_path, es8, corpus, postgres_dsn):
    (tmp_path / "indexing").mkdir()
    index, _ = index_corpus(tmp_path / "indexing", es8.url, corpus)
    one = machine(tmp_path / "one", es8.url, index, postgres_dsn)
    two = machine(tmp_path / "two", es8.url, index, postgres_dsn)
    trainer_config = machine(tmp_path / "trainer", es8.url, index, postgres_dsn)
    servers = [ServeProcess(one, "--workers", "2"), ServeProcess(two, "--workers", "2")]
    follower = subprocess.Popen(reranker_command() + ["train", "--follow", "-c",
                                                      str(trainer_config)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=cli_env())
    try:
        for server in servers:
            server.wait_ready()

        def search_on(server):
            def search(query):
                answer = requests.post(server.url + "/search", json={"query": query},
                                       timeout=30)
                assert answer.status_code == 200, answer.text
                return answer.json()
            return search

        def click_on(server):
            def click(impression_id, doc_id):
                answer = requests.post(server.url + "/click", json={
                    "impression_id": impression_id, "doc_id": doc_id}, timeout=30)
                assert answer.status_code == 202, answer.text
            return click

        # searched on one machine, clicked on the other, and the other way round
        learn(search_on(servers[0]), click_on(servers[1]), pages=3)
        learn(search_on(servers[1]), click_on(servers[0]), pages=3)
        deadline = time.monotonic() + 90
        while True:
            info = listing(trainer_config)
            rows = [row for row in info["versions"] if "error" not in row]
            if rows and rows[-1]["impressions"] >= 6:
                break
            assert time.monotonic() < deadline, follower.stdout
            time.sleep(0.3)
        newest = rows[-1]
        assert newest["clicks"] == 12  # each click applied once, whichever machine took it
        assert info["folder"] is None and "store.model_store: database" in info["location"]
        for server in servers:  # a new version reaches every machine
            every_worker_serves(server, newest["version"])

        # a pin from a third working directory reaches every machine
        first = rows[0]["version"]
        run_cli("models", "pin", str(first), "-c", str(trainer_config))
        for server in servers:
            every_worker_serves(server, first, seconds=5.0)

        # a query rule added from the third directory reaches every machine
        top = search_on(servers[0])("tea kettle")["hits"][0]["id"]
        run_cli("rules", "add", "-q", "tea kettle", "--hide", top, "-c", str(trainer_config))
        for server in servers:
            deadline = time.monotonic() + 5.0
            while any(top in [hit["id"] for hit in search_on(server)("tea kettle")["hits"]]
                      for _ in range(10)):
                assert time.monotonic() < deadline, f"{server.url} shows the hidden {top}"
                time.sleep(0.05)

        # a machine restarted mid-traffic serves the pin the others serve
        servers[1].stop()
        learn(search_on(servers[0]), click_on(servers[0]), pages=2)
        servers[1] = ServeProcess(two, "--workers", "2")
        servers[1].wait_ready()
        every_worker_serves(servers[1], first, seconds=5.0)
        run_cli("models", "unpin", "-c", str(trainer_config))
        deadline = time.monotonic() + 90
        while True:  # the restarted machine's pages are learned from too
            info = listing(trainer_config)
            rows = [row for row in info["versions"] if "error" not in row]
            if rows[-1]["impressions"] >= 8:
                break
            assert time.monotonic() < deadline, follower.stdout
            time.sleep(0.3)
        assert rows[-1]["clicks"] == 16
        for server in servers:
            every_worker_serves(server, rows[-1]["version"])
    finally:
        for server in servers:
            server.stop()
        follower.terminate()
        follower.communicate(timeout=30)
    for folder in ("one", "two", "trainer"):  # no machine wrote a model or rule to its disk
        assert not (tmp_path / folder / "models").exists()

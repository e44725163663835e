"""The production set-up (docs/how-to/production.md), run as written: its configuration
(Elasticsearch, PostgreSQL holding the events and the models, keys and API keys from the
environment, a trusted proxy header, JSON logs, retention, the trainer apart), `reranker
index`, `reranker serve` with gunicorn workers and `reranker train --follow` beside it, on a
real PostgreSQL server and the Elasticsearch stand-in."""

import re
import subprocess
import time

import requests
import yaml

from reranker.core.config import load_config
from reranker.testing import cli_env, reranker_command
from tests.support.configs import write_docs
from tests.support.es_standin import Standin
from tests.support.paths import ROOT
from tests.support.servers import ServeProcess, follow, stop_following
from tests.support.traffic import learn

MARK = "<!-- production-example -->"


def production_example() -> dict:
    """The YAML block that follows the mark in docs/how-to/production.md."""
    page = (ROOT / "docs" / "how-to" / "production.md").read_text(encoding="utf-8")
    block = re.search(re.escape(MARK) + r"\s*```yaml\n(.*?)```", page, re.S)
    assert block, "the production example of docs/how-to/production.md is gone"
    return yaml.safe_load(block.group(1))


def test_the_production_example_is_a_valid_configuration(tmp_path):
    example = production_example()
    path = tmp_path / "production.yaml"
    path.write_text(yaml.safe_dump(example), encoding="utf-8")
    config = load_config(path)
    assert config.store.type == "postgresql" and config.server.workers >= 2
    assert config.trainer.enabled is False and config.store.retention
    assert config.store.model_store == "database" and config.backend.type == "elasticsearch"


def test_the_production_example_serves_learns_and_reports(tmp_path, corpus, postgres_dsn):
    example = production_example()
    # Where this machine finds the cluster and the database, and a trainer that closes pages
    # after a second, not after the default window; everything else as written.
    standin = Standin("8.15.1")
    example["backend"]["hosts"] = [standin.url]
    example["store"].update(dsn=postgres_dsn)
    example["trainer"].update(feedback_window=1.0, interval=0.2)
    path = tmp_path / "production.yaml"
    path.write_text(yaml.safe_dump(example), encoding="utf-8")
    env = {"RERANKER_SIGNING_KEYS": "k2:" + "a" * 64, "RERANKER_API_KEYS": "app-key-1234567890",
           "RERANKER_SERVER_ADMIN_TOKEN": "operator-token-123456", "ES_API_KEY": "c2VjcmV0"}
    command_env = {**cli_env(), **env}
    subprocess.run(reranker_command() + ["index", "-c", str(path),
                                         str(write_docs(tmp_path, corpus.documents))],
                   check=True, env=command_env, capture_output=True, timeout=300)
    server = ServeProcess(path, "--workers", "2", env=env)
    follower = follow(path, env=command_env)
    try:
        server.wait_ready()
        app = {"X-API-Key": env["RERANKER_API_KEYS"], "X-Forwarded-For": "203.0.113.7"}

        def search(query):
            answer = requests.post(server.url + "/search", json={"query": query},
                                   headers=app, timeout=30)
            assert answer.status_code == 200, answer.text
            return answer.json()

        def click(impression_id, doc_id):  # from the browser: no API key
            answer = requests.post(server.url + "/click", json={
                "impression_id": impression_id, "doc_id": doc_id},
                headers={"X-Forwarded-For": "203.0.113.7"}, timeout=30)
            assert answer.status_code == 202, answer.text

        assert requests.post(server.url + "/search", json={"query": "tea"},
                             timeout=30).status_code == 401  # the API key is asked for
        page = search("tea kettle")
        assert page["impression_id"].startswith("k2.")  # signed with the environment's key
        learn(search, click, pages=3)
        deadline = time.monotonic() + 90
        while search("tea kettle")["model_version"] < 1:  # the follower trained
            assert time.monotonic() < deadline, server.log_path.read_text()
            time.sleep(0.3)
        metrics = requests.get(server.url + "/metrics", timeout=30).text
        assert "reranker_impressions_queued" in metrics
        assert "reranker_store_writable 1.0" in metrics
        detail = requests.get(server.url + "/healthz?detail=1", timeout=30, headers={
            "Authorization": f"Bearer {env['RERANKER_SERVER_ADMIN_TOKEN']}"})
        assert detail.status_code == 200 and detail.json()["status"] == "ok", detail.text
        # JSON log lines, one per request, with the client behind the proxy
        lines = [line for line in server.log_path.read_text().splitlines()
                 if line.startswith("{") and '"/search"' in line]
        assert lines, server.log_path.read_text()
    finally:
        server.stop()
        output = stop_following(follower)
        standin.stop()
    assert follower.returncode == 0, output
    assert not (tmp_path / "models").exists()  # the models are in the database

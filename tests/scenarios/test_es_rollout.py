"""The Elasticsearch rollout guide (examples/elasticsearch/ROLLOUT.md) and what it relies on:
the stand-in launcher, the feature-cost script, the shadow-mode and rollout configs, the
fallback snippet, and a log without client noise (no per-search lines, no tracebacks)."""

from __future__ import annotations

import logging
import re
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from reranker.backends import elasticsearch as es_backend
from reranker.core.config import load_config
from reranker.testing import cli_env
from tests.support.configs import write_docs
from tests.support.es_scenarios import backend_for, es_config, index_corpus, unique_index
from tests.support.es_standin import Standin
from tests.support.servers import LiveServer, ServeProcess, run_cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "elasticsearch"
ROLLOUT = EXAMPLE / "ROLLOUT.md"
WITH_SEARCH = "reranker, sources with the search"  # a row of feature_cost.py's table


@pytest.fixture
def es8():
    server = Standin("8.15.1")
    yield server
    server.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def blocks(language: str) -> list[str]:
    """The fenced code blocks of ROLLOUT.md in ``language``."""
    text = ROLLOUT.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def yaml_block(predicate) -> dict:
    found = [data for data in map(yaml.safe_load, blocks("yaml")) if predicate(data)]
    assert len(found) == 1, found
    return found[0]


# -- the launcher and the cost script -----------------------------------------------------------


def test_launcher_serves_in_the_foreground_until_terminated():
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(EXAMPLE / "standin.py"), "--port", str(port),
                             "--version", "9.1.0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=cli_env())
    try:
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}" in line, line
        answer = requests.get(f"http://127.0.0.1:{port}/", timeout=10)
        assert answer.status_code == 200
        assert answer.json()["version"]["number"] == "9.1.0"
        assert answer.headers["X-Elastic-Product"] == "Elasticsearch"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "stand-in stopped" in out and "Traceback" not in out


def test_launcher_refuses_a_port_in_use():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, str(EXAMPLE / "standin.py"), "--port",
                                 str(port)], capture_output=True, text=True, timeout=60,
                                env=cli_env())
    assert result.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_feature_cost_prints_the_table():
    result = subprocess.run([sys.executable, str(EXAMPLE / "feature_cost.py"), "--searches", "3",
                             "--copies", "1"], capture_output=True, text=True, timeout=300,
                            env=cli_env())
    assert result.returncode == 0, result.stderr
    assert "stand-in, not a cluster" in result.stdout
    rows = {}
    for line in result.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] in ("plain _search", "reranker", WITH_SEARCH):
            rows[cells[0], int(cells[1])] = cells
    assert set(rows) == {(name, size) for name in ("plain _search", "reranker", WITH_SEARCH)
                         for size in (10, 100)}

    def number(cell: str) -> float:
        return float(cell.split()[0].replace(",", ""))

    for size in (10, 100):
        plain, shown = rows["plain _search", size], rows["reranker", size]
        with_search = rows[WITH_SEARCH, size]
        assert plain[3:5] == with_search[3:5] == ["1", "1"]  # one request, one _search each
        assert shown[3:5] == ["2", "2"]  # the candidates, then the documents of the page shown
        for reranked in (shown, with_search):
            assert number(reranked[5]) > number(plain[5])  # the feature queries are sent
            assert "(x" in reranked[5] and "(x" in reranked[6]
        assert number(with_search[6]) > number(plain[6])  # and their scores come back
    # Reading the shown documents alone: fewer bytes than every candidate's document
    assert number(rows["reranker", 100][6]) < number(rows[WITH_SEARCH, 100][6])


def test_the_guide_quotes_the_scripts_it_documents():
    text = ROLLOUT.read_text(encoding="utf-8")
    assert "python examples/elasticsearch/feature_cost.py --searches 200" in text
    assert "python examples/elasticsearch/standin.py --port 9200" in text
    readme = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    assert "(ROLLOUT.md)" in readme and "(standin.py)" in readme


# -- shadow mode and the guarded rollout, as ROLLOUT.md configures them ---------------------------


def shadow_section() -> dict:
    return yaml_block(lambda data: "experiment" not in data
                      and data.get("learner", {}).get("name") == "backend_order")


def serving(tmp_path, url, corpus, sections):
    """The corpus indexed in the stand-in, the config with ``sections``, an opened backend
    (the engine's own order) and the live service."""
    index, _ = index_corpus(tmp_path, url, corpus)
    path = es_config(tmp_path, url, index, sections=sections)
    engine = backend_for(path)
    engine.open()
    return path, engine, LiveServer(path)


def test_shadow_mode_serves_the_engines_order_and_logs_it(tmp_path, es8, corpus):
    shadow = shadow_section()
    assert shadow == {"learner": {"name": "backend_order"}}
    path, engine, server = serving(tmp_path, es8.url, corpus, shadow)
    try:
        clicked = 0
        for query, _ in corpus.queries[:8]:
            expected = engine.search(query, 100).ids
            page = server.post("/search", {"query": query, "size": 10,
                                           "user_id": "u1"}).json()
            assert page["learner"] == "backend_order"
            assert [h["id"] for h in page["hits"]] == expected[:10]
            later = server.post("/search", {"query": query, "size": 10, "from": 10,
                                            "user_id": "u1"}).json()
            assert [h["id"] for h in later["hits"]] == expected[10:20]
            if len(page["hits"]) > 3:
                answer = server.post("/click", {"impression_id": page["impression_id"],
                                                "doc_id": page["hits"][3]["id"],
                                                "user_id": "u1"})
                assert answer.status_code == 202
                clicked += 1
        # a click carries the hit's id, the Elasticsearch _id; anything else is refused
        wrong = server.post("/click", {"impression_id": page["impression_id"],
                                       "doc_id": page["hits"][0]["source"]["title"],
                                       "user_id": "u1"})
        assert wrong.status_code == 422
        # a page after the clicks: still the engine's order
        query = corpus.queries[0][0]
        again = server.post("/search", {"query": query}).json()
        assert [h["id"] for h in again["hits"]] == engine.search(query, 100).ids[:10]
    finally:
        server.stop()
        engine.close()
    store = load_config(path).store.path
    with sqlite3.connect(store) as db:  # the guide's query over the event store runs
        rows = db.execute(blocks("sql")[0]).fetchall()
    assert sum(r[1] for r in rows) == 8 * 2 + 1 and sum(r[2] for r in rows) == clicked
    assert all(r[3] == 4 for r in rows if r[2])  # every click was on rank 4


def test_guarded_rollout_config_serves_the_engine_outside_its_share(tmp_path, es8, corpus):
    rollout = yaml_block(lambda data: "experiment" in data)
    experiment = rollout["experiment"]
    assert experiment["control"] == "engine" and experiment["share"] == 0.05
    assert experiment["promote"] == "auto"
    assert experiment["arms"]["engine"] == {"name": "backend_order"}
    path, engine, server = serving(tmp_path, es8.url, corpus, rollout)
    try:
        outside = 0
        for user in range(40):
            query = corpus.queries[user % len(corpus.queries)][0]
            page = server.post("/search", {"query": query, "user_id": f"user-{user}"}).json()
            if page["arm"] == "engine":
                outside += 1
                assert [h["id"] for h in page["hits"]] == engine.search(query, 100).ids[:10]
        assert outside >= 30  # 95% expected
        status = server.get("/experiments").json()
        assert set(status["arms"]) == {"engine", "perceptron"}
    finally:
        server.stop()
        engine.close()


# -- the fallback ---------------------------------------------------------------------------------


def test_python_fallback_serves_the_engines_page_when_reranker_is_down(tmp_path, es8, corpus):
    """The guide's Python snippet, pointed at a reranker that is not running: the page comes
    from Elasticsearch, in reranker's shape, and equals the shadow mode's page."""
    index, _ = index_corpus(tmp_path, es8.url, corpus)
    snippet = blocks("python")[0]
    for old, new in (('"http://127.0.0.1:8000"', f'"http://127.0.0.1:{free_port()}"'),
                     ('"https://localhost:9200"', f'"{es8.url}"'), ('"products"', f'"{index}"'),
                     ('["title", "description"]', '["title", "body"]')):
        assert old in snippet
        snippet = snippet.replace(old, new)
    namespace: dict = {}
    exec(compile(snippet, str(ROLLOUT), "exec"), namespace)
    query = corpus.queries[0][0]
    started = time.monotonic()
    page = namespace["search"](query, 10, user_id="u1")
    assert time.monotonic() - started < 5
    assert page["impression_id"] is None and page["total"] > 10
    assert [h["rank"] for h in page["hits"]] == list(range(1, 11))
    path = es_config(tmp_path, es8.url, index, sections=shadow_section())
    server = LiveServer(path)
    try:
        shadow = server.post("/search", {"query": query, "size": 10}).json()
        assert [h["id"] for h in page["hits"]] == [h["id"] for h in shadow["hits"]]
        # reranker up: its own page, with an impression to report clicks against
        namespace["RERANKER"] = server.url
        served = namespace["search"](query, 10)
        assert served["impression_id"] and served["learner"] == "backend_order"
    finally:
        server.stop()


# -- logs: one clean line per failure, no line per search -----------------------------------------


def test_unreachable_cluster_is_one_clean_line(tmp_path, corpus):
    """`reranker index` and `reranker serve` against a host nobody listens on print the
    backend's error once, without the client's retries and tracebacks."""
    path = es_config(tmp_path, f"http://127.0.0.1:{free_port()}", unique_index(),
                     max_retries=2)
    docs = write_docs(tmp_path, corpus.documents[:5])
    for args in (("index", "-c", str(path), str(docs)), ("serve", "-c", str(path), "--port", "0")):
        result = run_cli(*args, check=False, timeout=60)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, (args, result.stderr)
        assert lines[0].startswith("Error: Elasticsearch at http://127.0.0.1:")
        assert "is unreachable" in lines[0]
        assert "Traceback" not in result.stdout + result.stderr


def test_serve_logs_no_line_per_search_and_one_per_failure(tmp_path, corpus):
    standin = Standin("8.15.1")
    try:
        index, path = index_corpus(tmp_path, standin.url, corpus)
        server = ServeProcess(path)
        try:
            for query, _ in corpus.queries[:6]:
                assert server.post("/search", {"query": query}).status_code == 200
            time.sleep(0.5)
            quiet = server.log_path.read_text(encoding="utf-8")
            assert "elastic_transport" not in quiet and "_search" not in quiet, quiet
            standin.stop()  # the cluster goes away while serving
            for query, _ in corpus.queries[:2]:
                answer = server.post("/search", {"query": query})
                assert answer.status_code == 503
                assert "unreachable" in answer.json()["error"]["message"]
            health = requests.get(server.url + "/healthz", timeout=30)
            assert health.status_code == 200
            assert health.json()["status"] == "degraded"
            assert "backend" in health.json()["problems"]
        finally:
            server.stop()
    finally:
        standin.stop()
    log = server.log_path.read_text(encoding="utf-8")[len(quiet):]
    assert "Traceback" not in log and "elastic_transport" not in log, log
    failures = [line for line in log.splitlines() if "is unreachable while searching" in line]
    assert len(failures) == 2, log
    assert all(" WARNING reranker.api.app: " in line for line in failures)


def test_the_backend_leaves_levels_an_application_has_set(tmp_path):
    names = es_backend.CLIENT_LOGGERS
    saved = {name: logging.getLogger(name).level for name in names}
    root = logging.getLogger()
    root_before = (root.level, list(root.handlers))
    try:
        for name in names:
            logging.getLogger(name).setLevel(logging.NOTSET)
        logging.getLogger("elastic_transport.transport").setLevel(logging.INFO)
        backend_for(es_config(tmp_path, "http://127.0.0.1:9", "products"))
        assert logging.getLogger("elastic_transport.transport").level == logging.INFO
        assert logging.getLogger("elastic_transport.node_pool").level == logging.ERROR
        logging.getLogger("elastic_transport.node_pool").setLevel(logging.NOTSET)
        backend_for(es_config(tmp_path, "http://127.0.0.1:9", "products",
                              hosts=["http://127.0.0.1:9", "http://127.0.0.1:10"]))
        # with several nodes, a failing node's one-line warnings are kept
        assert logging.getLogger("elastic_transport.node_pool").level == logging.WARNING
        assert (root.level, list(root.handlers)) == root_before  # the root is left alone
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)

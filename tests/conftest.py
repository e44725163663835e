"""Shared fixtures: a generated corpus indexed in a real embedded index, configs written to
disk, a live HTTP server around the real Flask app, and helpers to run the real CLI."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml

from reranker import testing
from reranker.api.app import BackgroundServer, create_app
from reranker.core.config import config_from_dict, load_config
from reranker.core.plugins import backend_class, get_plugin_manager
from reranker.offline.democorpus import generate_corpus
from reranker.serving.service import RerankerService
from reranker.stores import open_event_store
from reranker.testing import cli_env, reranker_command
from tests.support.postgres_server import ENV_DSN, Databases, ThrowawayCluster, server_binaries

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def corpus():
    return generate_corpus(seed=7)


#: The tests simulate many users from one address, faster than any person: without limits
#: per client, nor the per-client budget of training, unless a test sets them (or passes
#: ``security=None`` for the defaults).
UNLIMITED = {"searches_per_minute": 0, "clicks_per_minute": 0, "client_budget": 0,
             "address_searches_per_minute": 0, "address_clicks_per_minute": 0,
             "address_budget": 0}


def write_config(folder: Path, **sections) -> Path:
    """A config file in ``folder`` for the generated corpus, with section overrides (None:
    the section's defaults)."""
    data = {
        "backend": {"type": "embedded", "path": "index", "fields": ["title", "body"]},
        "features": {"numeric_fields": ["popularity"]},
        "learner": {"name": "preference_perceptron", "params": {}},
        "store": {"path": "events.sqlite", "models": "models"},
        "trainer": {"feedback_window": 0.0, "interval": 0.1},
        "security": dict(UNLIMITED),
    }
    for name, values in sections.items():
        if values is None:
            data.pop(name, None)
        else:
            data.setdefault(name, {}).update(values)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


#: The queries :func:`learn` searches in turn: each is clicked on a page or two, so that no
#: query's own clicks judge one of its results (its pages stay the general model's, which
#: learns from their clicks; a query clicked again and again is specialised, and teaches
#: the general model only the pairs its clicks judge: tests/learners/test_specialization.py).
LEARNING_QUERIES = itertools.cycle([query for query, _ in generate_corpus(seed=7).queries])


def learn(search, click, pages: int = 1, query: str | None = None) -> None:
    """Pages the perceptron learns from: clicks on ranks 6 and 3, one of which is the lower
    result of its pair whichever random pairing the page used (of the next queries of
    :data:`LEARNING_QUERIES`, or of ``query``)."""
    for _ in range(pages):
        page = search(query or next(LEARNING_QUERIES))
        for position in (5, 2):
            click(page["impression_id"], page["hits"][position]["id"])


def wait_for_version(search, version: int, log_path: Path, timeout: float = 60) -> dict:
    """Search until a page is ranked by model ``version`` or newer (the trainer runs in the
    background); the page. Fails with the server's log after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        page = search("tea kettle")
        if page["model_version"] >= version:
            return page
        assert time.monotonic() < deadline, log_path.read_text()
        time.sleep(0.2)


def wait_until(check, timeout: float = 30.0) -> None:
    """Call ``check`` every 0.1 s until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def write_docs(folder: Path, documents) -> Path:
    path = folder / "docs.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        for doc in documents:
            handle.write(json.dumps(doc) + "\n")
    return path


@pytest.fixture(scope="session")
def built_index(tmp_path_factory, corpus):
    """The generated corpus indexed once; tests copy the folder."""
    folder = tmp_path_factory.mktemp("built")
    config = load_config(write_config(folder))
    backend = backend_class(get_plugin_manager(), "embedded")(config)
    backend.index_documents(((str(i), d) for i, d in enumerate(corpus.documents)), recreate=True)
    return folder / "index"


@pytest.fixture
def workdir(tmp_path, built_index):
    """A folder with a config file and a copy of the indexed corpus."""
    shutil.copytree(built_index, tmp_path / "index")
    write_config(tmp_path)
    return tmp_path


class LiveServer:
    """The real Flask app behind a real HTTP server on a free loopback port."""

    def __init__(self, config_path: Path):
        self.config = load_config(config_path)
        self.service = RerankerService(self.config).open()
        self.server = BackgroundServer(create_app(service=self.service))
        self.url = self.server.url

    def post(self, path: str, body=None, **kwargs) -> requests.Response:
        if body is not None:
            kwargs["json"] = body
        return requests.post(self.url + path, timeout=30, **kwargs)

    def get(self, path: str, **kwargs) -> requests.Response:
        return requests.get(self.url + path, timeout=30, **kwargs)

    def stop(self) -> None:
        self.server.stop()
        self.service.close()


@pytest.fixture
def live(workdir):
    server = LiveServer(workdir / "config.yaml")
    yield server
    server.stop()


def run_cli(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run(reranker_command() + list(args), capture_output=True, text=True,
                            timeout=timeout, env=cli_env())
    if check and result.returncode != 0:
        raise AssertionError(f"reranker {' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


class ServeProcess(testing.ServeProcess):
    """``reranker serve`` in a subprocess on a free port, with a JSON POST helper."""

    def post(self, path: str, body: dict) -> requests.Response:
        return requests.post(self.url + path, json=body, timeout=30)

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, timeout=30)


# -- event stores: every store test runs on SQLite and on a real PostgreSQL server ------------

STORE_TYPES = ("sqlite", "postgresql")


@pytest.fixture(scope="session")
def postgres_databases():
    """Databases on the server RERANKER_TEST_POSTGRES_DSN names, else on a throwaway cluster
    started for the session."""
    dsn, cluster = os.environ.get(ENV_DSN), None
    if not dsn:
        binaries = server_binaries()
        if binaries is None:
            pytest.skip("no PostgreSQL server (initdb, pg_ctl) installed: `make test` installs "
                        f"Debian's postgresql package when it runs as root; or set {ENV_DSN}")
        cluster = ThrowawayCluster(binaries)
        dsn = cluster.dsn
    try:
        yield Databases(dsn)
    finally:
        if cluster is not None:
            cluster.stop()


@pytest.fixture
def postgres_dsn(postgres_databases):
    """The connection string of a new, empty database, dropped after the test."""
    dsn = postgres_databases.create()
    yield dsn
    postgres_databases.drop(dsn)


@pytest.fixture(params=STORE_TYPES)
def store_section(request, tmp_path) -> dict:
    """The ``store`` section of a config naming a new, empty store of each type."""
    if request.param == "postgresql":
        return {"type": "postgresql", "dsn": request.getfixturevalue("postgres_dsn")}
    return {"type": "sqlite", "path": str(tmp_path / "events.sqlite")}


@pytest.fixture
def open_store(store_section, tmp_path):
    """Opens another instance of the test's store (as another process would: connections of
    its own); every instance is closed at the end."""
    opened = []

    def open_():
        opened.append(open_event_store(config_from_dict({"store": store_section}, tmp_path)))
        return opened[-1]

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store):
    return open_store()


def store_rows(store, sql: str, args=()) -> list[tuple]:
    """Rows of a query run on the store's own database (``?`` placeholders)."""
    with store._reading() as conn:
        return [tuple(row) for row in store._run(conn, sql, args).fetchall()]


# -- the fast lane: `make test-fast` leaves out what starts a server, a process or a database --

#: Fixtures that start the real parts: an index built on disk, a live server, PostgreSQL.
HEAVY_FIXTURES = {"built_index", "workdir", "live", "postgres_databases", "postgres_dsn",
                  "store_section", "open_store", "store"}
#: What a test module calls to start a server or a process of its own.
HEAVY_CALLS = ("LiveServer(", "ServeProcess(", "run_cli(", "subprocess.", "BackgroundServer(",
               "Reranker(", "headless")


def pytest_collection_modifyitems(config, items):
    """Mark ``integration`` every test that uses a heavy fixture, or whose module starts a
    server or a process (``pytest -m "not slow and not integration"`` is the fast lane)."""
    heavy_modules: dict[str, bool] = {}
    for item in items:
        path = str(item.path)
        if path not in heavy_modules:
            text = Path(path).read_text(encoding="utf-8")
            heavy_modules[path] = any(call in text for call in HEAVY_CALLS)
        if heavy_modules[path] or HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)

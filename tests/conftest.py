"""The fixtures every test folder shares: a generated corpus indexed in a real embedded index,
a folder with its config, a live HTTP server around the real Flask app, and an event store of
each built-in type; and the marking of the fast lane. Helpers that are not fixtures are in
tests/support (nothing imports from this file)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from reranker.core.config import config_from_dict, load_config
from reranker.core.plugins import backend_class, get_plugin_manager
from reranker.offline.democorpus import generate_corpus
from reranker.stores import open_event_store
from tests.support.configs import write_config
from tests.support.postgres_server import ENV_DSN, Databases, ThrowawayCluster, server_binaries
from tests.support.servers import LiveServer


@pytest.fixture(scope="session")
def corpus():
    return generate_corpus(seed=7)


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


@pytest.fixture
def live(workdir):
    """The live server of the workdir's config."""
    server = LiveServer(workdir / "config.yaml")
    yield server
    server.stop()


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

"""Shared fixtures: a generated corpus indexed in a real embedded index, configs written to
disk, a live HTTP server around the real Flask app, and helpers to run the real CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import requests
import yaml

from reranker import testing
from reranker.app import BackgroundServer, create_app
from reranker.config import load_config
from reranker.democorpus import generate_corpus
from reranker.plugins import backend_class, get_plugin_manager
from reranker.service import RerankerService
from reranker.testing import cli_env, reranker_command

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def corpus():
    return generate_corpus(seed=7)


def write_config(folder: Path, **sections) -> Path:
    """A config file in ``folder`` for the generated corpus, with section overrides."""
    data = {
        "backend": {"type": "embedded", "path": "index", "fields": ["title", "body"]},
        "features": {"numeric_fields": ["popularity"]},
        "learner": {"name": "preference_perceptron", "params": {}},
        "store": {"path": "events.sqlite", "models": "models"},
        "trainer": {"feedback_window": 0.0, "interval": 0.1},
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def learn(search, click, pages: int = 1, query: str = "tea kettle") -> None:
    """Pages the perceptron learns from: clicks on ranks 6 and 3, one of which is the lower
    result of its pair whichever random pairing the page used."""
    for _ in range(pages):
        page = search(query)
        for position in (5, 2):
            click(page["impression_id"], page["hits"][position]["id"])


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

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, timeout=30)

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

"""The real service for the tests: the Flask app behind a real HTTP server in this process,
``reranker serve`` and the other commands in subprocesses, and waiting for what they do in
the background."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from reranker import testing
from reranker.api.app import BackgroundServer, create_app
from reranker.core.config import load_config
from reranker.serving.service import RerankerService
from reranker.testing import cli_env, reranker_command


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


class ServeProcess(testing.ServeProcess):
    """``reranker serve`` in a subprocess on a free port, with a JSON POST helper."""

    def post(self, path: str, body: dict) -> requests.Response:
        return requests.post(self.url + path, json=body, timeout=30)

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, timeout=30)


def run_cli(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run(reranker_command() + list(args), capture_output=True, text=True,
                            timeout=timeout, env=cli_env())
    if check and result.returncode != 0:
        raise AssertionError(f"reranker {' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def follow(path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """``reranker train --follow -c PATH ARGS`` started in the background, its output (both
    streams) kept for :func:`stop_following`."""
    return subprocess.Popen(reranker_command() + ["train", "--follow", *args, "-c", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=cli_env() if env is None else env)


def stop_following(follower: subprocess.Popen, timeout: float = 60) -> str:
    """Stop a :func:`follow` trainer as a service manager does (SIGTERM: it ends after its
    pass) and return its output; its return code is then ``follower.returncode``."""
    follower.send_signal(signal.SIGTERM)
    output, _ = follower.communicate(timeout=timeout)
    return output


def samples(server) -> dict[tuple[str, tuple], float]:
    """The server's ``/metrics``: each sample's value by its name and labels."""
    answer = server.get("/metrics")
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


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

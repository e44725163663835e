"""A closed-loop HTTP load generator for the serving benchmarks, and the set-up they share.

``run_load`` keeps ``clients`` connections busy for ``seconds``: each is a keep-alive
connection that sends the next request as soon as the previous one is answered, all of them
driven by one asyncio loop (far cheaper per request than threads with ``requests`` or
``http.client``). It reports the requests answered per second,
their latency percentiles, and the CPU the load generator itself used (this process's CPU
time over the run), which matters when it shares a small machine with the server.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import yaml

#: A request body, made by the thread that sends it (``next_body(thread, n)``), or None to
#: stop that thread.
NextBody = Callable[[int, int], "dict | None"]


@dataclass
class LoadResult:
    answered: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    client_cpu: float = 0.0  # CPU seconds the load generator used over the run

    @property
    def per_second(self) -> float:
        return self.answered / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else 0.0

    @property
    def client_cores(self) -> float:
        """The load generator's CPU, in cores busy over the run."""
        return self.client_cpu / self.seconds if self.seconds else 0.0


async def _post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes,
                body: bytes) -> tuple[int, bytes]:
    """One request on a keep-alive connection: the status and the body of the answer."""
    writer.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("the server closed the connection")
    status = int(status_line.split(b" ", 2)[1])
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


def run_load(url: str, path: str, next_body: NextBody, *, clients: int, seconds: float,
             on_answer: Callable[[dict, int, dict], None] | None = None) -> LoadResult:
    """``clients`` connections POST ``next_body(client, n)`` to ``url + path`` one after the
    other for ``seconds`` (a client stops early when ``next_body`` says None, or when its
    connection fails: the server went away); ``on_answer(body, status, answer)`` sees every
    answer. One asyncio loop drives them all, so the load generator costs a fraction of a
    core (measured: :attr:`LoadResult.client_cores`)."""
    parts = urlsplit(url)
    head = (f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: ").encode()
    result = LoadResult()

    async def client(index: int, deadline: float) -> None:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        n = 0
        try:
            while time.perf_counter() < deadline:
                body = next_body(index, n)
                if body is None:
                    break
                n += 1
                sent = time.perf_counter()
                try:
                    status, payload = await _post(reader, writer, head,
                                                  json.dumps(body).encode("utf-8"))
                except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                    result.statuses[0] = result.statuses.get(0, 0) + 1  # no answer
                    break
                result.latencies_ms.append((time.perf_counter() - sent) * 1000.0)
                result.statuses[status] = result.statuses.get(status, 0) + 1
                if on_answer is not None:
                    on_answer(body, status, json.loads(payload) if payload else {})
        finally:
            writer.close()

    async def main() -> None:
        deadline = time.perf_counter() + seconds
        await asyncio.gather(*(client(i, deadline) for i in range(clients)))

    cpu = time.process_time()
    began = time.perf_counter()
    asyncio.run(main())
    result.seconds = time.perf_counter() - began
    result.client_cpu = time.process_time() - cpu
    result.answered = sum(c for s, c in result.statuses.items() if s)
    return result


# -- set-up: an indexed corpus and a served configuration -------------------------------------


def prepare_workdir(folder: Path, store: dict | None = None, **sections) -> Path:
    """The generated demo corpus indexed in ``folder/index`` and a config file beside it (the
    event store in ``folder``, or the ``store`` section given); returns the config's path."""
    from reranker.core.config import load_config
    from reranker.core.plugins import backend_class, get_plugin_manager
    from reranker.offline.democorpus import generate_corpus

    data = {"backend": {"type": "embedded", "path": "index", "fields": ["title", "body"]},
            "features": {"numeric_fields": ["popularity"]},
            "learner": {"name": "preference_perceptron", "params": {}},
            "store": store or {"path": "events.sqlite", "models": "models"},
            "trainer": {"feedback_window": 3600.0, "interval": 1.0},
            # the load comes from one client, far faster than a person: no per-client limits
            "security": {"searches_per_minute": 0, "clicks_per_minute": 0,
                         "client_budget": 0, "address_searches_per_minute": 0,
                         "address_clicks_per_minute": 0, "address_budget": 0}}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    if not (folder / "index").exists():
        corpus = generate_corpus(seed=7)
        backend_class(get_plugin_manager(), "embedded")(load_config(path)).index_documents(
            ((str(i), d) for i, d in enumerate(corpus.documents)), recreate=True)
    return path


def demo_queries() -> list[str]:
    from reranker.offline.democorpus import generate_corpus

    return [query for query, _ in generate_corpus(seed=7).queries]


class Served:
    """``reranker serve`` with extra arguments in a subprocess on a free port; its log goes to
    ``serve.log`` beside the config."""

    def __init__(self, config: Path, *extra: str):
        from reranker.testing import cli_env, reranker_command

        self.log = open(config.parent / "serve.log", "a", encoding="utf-8")
        self.proc = subprocess.Popen([*reranker_command(), "serve", "-c", str(config),
                                      "--port", "0", *extra], stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=cli_env())
        line = self.proc.stdout.readline()
        match = re.search(r"http://[\d.]+:(\d+)", line)
        if not match:
            self.stop()
            sys.exit(f"reranker serve did not start: {line!r}; see {config.parent}/serve.log")
        self.url = f"http://127.0.0.1:{match.group(1)}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
        self.proc.stdout.close()
        self.log.close()

"""Memory and time per request at and beyond the request limits, over real HTTP.

The demo corpus (460 documents) in the embedded engine, the real app behind the real
waitress server in this process, with the default limits (``server.max_body_bytes`` 1 MiB,
``max_json_depth`` 32, ``max_query_bytes`` 2048, ``max_query_terms`` 64). Cases, in one run:

  * a normal two-word search;
  * a search at the limits: 64 distinct words in at most 2048 bytes;
  * 2 million distinct words (16 MB): over HTTP, refused by the body limit (413), and
    through the library (``Reranker``-style ``service.search``), refused by the byte limit;
  * 2048 bytes of 400 one-letter-and-digit words: refused by the term limit;
  * a body nested 100,000 levels deep: refused before parsing;
  * the worst body for the nesting scan: an unterminated string of escaped quotes followed
    by 40 brackets, 1 MB (the body limit), sent to /click: refused 400;
  * for contrast, 20,000 distinct words on a second service whose limits are lifted: what
    one request costs when nothing bounds it (the cost grows with the words).

For each: the median and slowest wall time, the peak of Python's allocations during the
request (tracemalloc, the server's threads included) and the growth of the process's
resident memory above its level before the request (sampled every millisecond; it also sees
the engine's native allocations, which tracemalloc does not).

Run: python benchmarks/bench_request_limits.py [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import requests

from reranker.api.app import BackgroundServer, create_app
from reranker.core.config import config_from_dict
from reranker.core.errors import RerankerError
from reranker.core.plugins import backend_class, get_plugin_manager
from reranker.offline.democorpus import generate_corpus
from reranker.serving.service import RerankerService

PAGE = 4096  # bytes per page of /proc/self/statm


class RssPeak:
    """The highest resident set size seen while it runs, sampled every millisecond."""

    def __init__(self):
        self.peak = self.base = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, _rss())

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def measure(request: Callable[[], object], repeats: int) -> dict:
    """Time every call; the memory figures are the largest over the calls."""
    times, traced, grown, answer = [], 0, 0, None
    for _ in range(repeats):
        tracemalloc.start()
        with RssPeak() as rss:
            start = time.perf_counter()
            answer = request()
            times.append(time.perf_counter() - start)
        traced = max(traced, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        grown = max(grown, rss.peak - rss.base)
    return {"median_ms": statistics.median(times) * 1e3, "max_ms": max(times) * 1e3,
            "traced_mb": traced / 1e6, "rss_mb": grown / 1e6, "answer": answer}


def post(url: str, body: bytes) -> str:
    answer = requests.post(url, data=body, headers={"Content-Type": "application/json"},
                           timeout=300)
    if answer.status_code == 200:
        return "200"
    return f"{answer.status_code} {answer.json()['error']['message'][:60]}"


def library(service: RerankerService, query: str) -> str:
    try:
        service.search(query, 10)
    except RerankerError as exc:
        return f"{exc.status} {exc.message[:60]}"
    return "200"


def words(n: int) -> str:
    return " ".join(f"w{i:07d}" for i in range(n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="calls per small case")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    try:
        corpus = generate_corpus(seed=7)
        sections = {"backend": {"path": str(folder / "index")},
                    "store": {"path": str(folder / "events.sqlite"),
                              "models": str(folder / "models")},
                    "trainer": {"enabled": False}}
        config = config_from_dict(sections)
        backend = backend_class(get_plugin_manager(), "embedded")(config)
        backend.index_documents(((str(i), d) for i, d in enumerate(corpus.documents)),
                                recreate=True)
        backend.close()
        service = RerankerService(config).open()
        server = BackgroundServer(create_app(service=service))
        lifted = config_from_dict({**sections, "server": {
            "max_body_bytes": 1 << 30, "max_query_bytes": 1 << 30,
            "max_query_terms": 1 << 30}})
        open_service = RerankerService(lifted).open()
        open_server = BackgroundServer(create_app(service=open_service))
        try:
            search = server.url + "/search"
            at_limit = " ".join(f"w{i:02d}x{'y' * 24}" for i in range(63)) + " espresso"
            assert len(at_limit.encode()) <= 2048
            huge = words(2_000_000)
            huge_body = json.dumps({"query": huge}).encode()
            many_terms = " ".join(f"a{i % 10}" for i in range(682))[:2048]
            deep = b'{"query": "tea", "filter": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
            worst = ('"' + '\\"' * 524_000 + "[" * 40).encode()
            unbounded = json.dumps({"query": words(20_000)}).encode()
            cases = [
                ("normal search, 2 words", lambda: post(
                    search, b'{"query": "espresso grinder"}'), args.repeats),
                ("at the limits: 64 words, 2,000 bytes", lambda: post(
                    search, json.dumps({"query": at_limit}).encode()), args.repeats),
                (f"2,000,000 words ({len(huge_body) / 1e6:.0f} MB) over HTTP",
                 lambda: post(search, huge_body), 3),
                ("2,000,000 words through the library", lambda: library(service, huge), 3),
                ("2,048 bytes of 682 words", lambda: post(
                    search, json.dumps({"query": many_terms}).encode()), args.repeats),
                ("body nested 100,000 levels", lambda: post(search, deep), 3),
                (f"unterminated string, {len(worst) / 1e6:.1f} MB, to /click",
                 lambda: post(server.url + "/click", worst), 5),
                ("limits lifted: 20,000 words", lambda: post(
                    open_server.url + "/search", unbounded), 3),
            ]
            print(f"{'case':42} {'answer':50} {'median ms':>10} {'x normal':>9} "
                  f"{'max ms':>9} {'traced MB':>10} {'RSS +MB':>8}")
            normal = None
            for label, request, repeats in cases:
                result = measure(request, repeats)
                normal = normal or result["median_ms"]  # the first case: a normal search
                print(f"{label:42} {result['answer']:50} {result['median_ms']:10.2f} "
                      f"{result['median_ms'] / normal:9.2f} {result['max_ms']:9.2f} "
                      f"{result['traced_mb']:10.2f} {result['rss_mb']:8.1f}")
        finally:
            open_server.stop()
            open_service.close()
            server.stop()
            service.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

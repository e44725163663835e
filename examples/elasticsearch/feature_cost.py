"""What the feature queries add to each search, measured on the Elasticsearch stand-in.

Indexes generated demo corpora into the stand-in (see ``standin.py``), then runs the same
searches two ways, for a page of 10 and a window of 100 candidates:

* **plain**: one ``_search`` with the retrieval query alone (the default ``multi_match`` over
  the text fields), ``size`` and ``track_total_hits``, as a site's own search sends it;
* **reranker**: the real backend's ``_search``: the same retrieval query plus a named
  ``match`` query per text field in a non-scoring filter, with
  ``include_named_queries_score``, and the candidates' numeric fields alone for their
  ``_source``; then one ``_search`` of the ids of the page of 10 shown, for their
  documents (``backend.fetch_sources: shown``, the default);
* **reranker, sources with the search**: the same with ``backend.fetch_sources:
  candidates``: every candidate's ``_source`` comes with the one ``_search``.

It prints, per search, the HTTP requests and ``_search`` requests the server received, the
bytes it received and sent (HTTP headers included) and the time, with the ratios to the plain
search of the same size. The stand-in is not a cluster: the bytes are indicative of a real
cluster's (the same requests, the same kind of answers), the times are not::

    python examples/elasticsearch/feature_cost.py --searches 200
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from standin import start_standin  # noqa: E402

from reranker.core.config import load_config  # noqa: E402
from reranker.core.plugins import backend_class, get_plugin_manager  # noqa: E402
from reranker.offline.democorpus import generate_corpus  # noqa: E402

FIELDS = ["title", "body"]
PAGE = 10  # results a page shows, whose documents the reranked search reads
WITH_SEARCH = "reranker, sources with the search"
INDEX = "feature-cost"


class Counter:
    """Bytes the stand-in read and wrote, and the requests it answered."""

    def __init__(self) -> None:
        self.received = 0
        self.sent = 0

    def reset(self) -> None:
        self.received = self.sent = 0


class _CountingReader:
    def __init__(self, raw: Any, counter: Counter):
        self._raw, self._counter = raw, counter

    def read(self, *args: Any) -> bytes:
        data = self._raw.read(*args)
        self._counter.received += len(data)
        return data

    def readline(self, *args: Any) -> bytes:
        data = self._raw.readline(*args)
        self._counter.received += len(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _CountingWriter:
    def __init__(self, raw: Any, counter: Counter):
        self._raw, self._counter = raw, counter

    def write(self, data: bytes) -> Any:
        self._counter.sent += len(data)
        return self._raw.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def count_bytes(standin: Any) -> Counter:
    """Make the stand-in count every byte of every request and answer from now on."""
    counter = Counter()
    handler = standin.server.RequestHandlerClass

    class CountingHandler(handler):  # type: ignore[misc, valid-type]
        def setup(self) -> None:
            super().setup()
            self.rfile = _CountingReader(self.rfile, counter)
            self.wfile = _CountingWriter(self.wfile, counter)

    standin.server.RequestHandlerClass = CountingHandler
    return counter


@dataclass
class Row:
    """What one way of searching cost, per search."""

    name: str
    size: int
    hits: float
    requests: float
    searches: float
    received: float  # bytes the server received
    sent: float  # bytes the server sent
    millis: float


def measure(name: str, size: int, run: Callable[[str], int], queries: list[str], n: int,
            standin: Any, counter: Counter) -> Row:
    """Run ``n`` searches (cycling through ``queries``; ``run`` returns the number of hits)
    and average what the server saw."""
    run(queries[0])  # a warm connection, not counted
    standin.requests.clear()
    counter.reset()
    hits = 0
    start = time.perf_counter()
    for text in itertools.islice(itertools.cycle(queries), n):
        hits += run(text)
    elapsed = time.perf_counter() - start
    searches = sum(1 for _, path, _ in standin.requests if path.endswith("/_search"))
    return Row(name, size, hits / n, len(standin.requests) / n, searches / n, counter.received / n,
               counter.sent / n, 1000 * elapsed / n)


def documents(copies: int) -> tuple[list[dict[str, Any]], list[str]]:
    """``copies`` generated corpora (different seeds, the same topics and queries) as one, so
    that a query matches enough documents to fill 100 candidates."""
    docs: list[dict[str, Any]] = []
    queries: list[str] = []
    for seed in range(7, 7 + copies):
        corpus = generate_corpus(seed=seed)
        docs += [{**doc, "id": f"s{seed}-{doc['id']}"} for doc in corpus.documents]
        queries = queries or [text for text, _ in corpus.queries]
    return docs, queries


def run_measurements(n: int, version: str = "8.15.1", copies: int = 5) -> list[Row]:
    """Start a stand-in, index the generated corpus and measure both ways for 10 and 100."""
    docs, queries = documents(copies)
    standin = start_standin(version)
    counter = count_bytes(standin)  # before the first connection: a connection keeps its handler
    try:
        with tempfile.TemporaryDirectory() as folder:
            rows: list[Row] = []
            backend_indexed = False
            for size in (10, 100):
                for name, fetch in (("reranker", "shown"), (WITH_SEARCH, "candidates")):
                    config_path = Path(folder) / f"config-{size}-{fetch}.yaml"
                    config_path.write_text(yaml.safe_dump({
                        "backend": {"type": "elasticsearch", "hosts": [standin.url],
                                    "index": INDEX, "fields": FIELDS, "candidates": size,
                                    "fetch_sources": fetch},
                        "features": {"numeric_fields": ["popularity"]},
                        "store": {"path": "events.sqlite", "models": "models"}}),
                        encoding="utf-8")
                    backend = backend_class(get_plugin_manager(), "elasticsearch")(
                        load_config(config_path))
                    if backend_indexed is False:
                        report = backend.index_documents(
                            ((f"document {i + 1}", d) for i, d in enumerate(docs)),
                            recreate=True)
                        if report.failed:
                            raise SystemExit(f"indexing failed: {report.failed[:3]}")
                        backend_indexed = True
                    backend.open()
                    if fetch == "shown":
                        es = backend.es

                        def plain(text: str, size: int = size, es: Any = es) -> int:
                            response = es.search(index=INDEX, size=size,
                                                 track_total_hits=True,
                                                 query={"multi_match": {"query": text,
                                                                        "fields": FIELDS}})
                            return len(response["hits"]["hits"])

                        rows.append(measure("plain _search", size, plain, queries, n, standin,
                                            counter))

                    def reranked(text: str, size: int = size, backend: Any = backend) -> int:
                        candidates = backend.search(text, size)
                        candidates.load_sources(range(min(PAGE, len(candidates))))
                        return len(candidates)

                    rows.append(measure(name, size, reranked, queries, n, standin, counter))
                    backend.close()
            return rows
    finally:
        standin.stop()


def format_table(rows: list[Row]) -> str:
    """The rows as a Markdown table, with each reranker row's ratios to the plain row of the
    same size."""
    lines = ["| search | size | hits | requests | `_search` | bytes to the server | "
             "bytes from the server | ms (stand-in) |",
             "|---|---|---|---|---|---|---|---|"]
    plain = {row.size: row for row in rows if row.name == "plain _search"}
    for row in rows:
        base = plain.get(row.size)
        if row.name == "plain _search" or base is None:
            sent, received, millis = (f"{row.received:,.0f}", f"{row.sent:,.0f}",
                                      f"{row.millis:.2f}")
        else:
            sent = f"{row.received:,.0f} (x{row.received / base.received:.2f})"
            received = f"{row.sent:,.0f} (x{row.sent / base.sent:.2f})"
            millis = f"{row.millis:.2f} (x{row.millis / base.millis:.2f})"
        lines.append(f"| {row.name} | {row.size} | {row.hits:.1f} | {row.requests:g} | "
                     f"{row.searches:g} | {sent} | {received} | {millis} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description="Measure what the feature queries add to "
                                                 "each search, on the Elasticsearch stand-in.")
    parser.add_argument("--searches", type=int, default=200,
                        help="searches per row (default 200)")
    parser.add_argument("--copies", type=int, default=5,
                        help="generated corpora indexed together (default 5: 2,300 "
                             "documents, about 115 matches per query)")
    parser.add_argument("--version", default="8.15.1",
                        help="Elasticsearch version the stand-in answers as (default 8.15.1)")
    args = parser.parse_args(argv)
    if args.searches < 1 or args.copies < 1:
        parser.error("--searches and --copies must be at least 1")
    rows = run_measurements(args.searches, args.version, args.copies)
    print(f"Per search, averaged over {args.searches} searches of the demo queries in "
          f"{args.copies} generated corpora, 2 text fields ({', '.join(FIELDS)}); on the "
          f"Elasticsearch stand-in, not a cluster:")
    print()
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

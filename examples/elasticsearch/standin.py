"""Run the Elasticsearch stand-in in the foreground, to try the walkthrough without a cluster.

The stand-in is the protocol-level server the project's tests use (``tests/support/es_standin.py``):
it answers the part of the Elasticsearch REST API that reranker uses (version, index
create/exists/delete, ``_bulk``, ``_search`` with named-query scores, ``_validate/query``,
stored templates) from an in-memory index with real BM25 scores. It is not Elasticsearch:
nothing is kept on disk, there is no TLS and no authentication, and only that part of the
Query DSL is understood. Run it from a checkout of the repository, with reranker installed::

    python examples/elasticsearch/standin.py --port 9200
    # stand-in Elasticsearch 8.15.1 listening on http://127.0.0.1:9200

then use ``hosts: ["http://127.0.0.1:9200"]`` (and no ``api_key_env`` or ``ca_certs``) in the
config. Ctrl-C or SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[2] / "tests" / "support"


def load_standin_class() -> type:
    """The ``Standin`` class from the repository's tests (``tests/support``)."""
    if not (TESTS / "es_standin.py").is_file():
        raise SystemExit(f"the stand-in is not here: {TESTS / 'es_standin.py'} (run this "
                         f"script from a checkout of the repository)")
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from es_standin import Standin

    return Standin


def start_standin(version: str = "8.15.1", host: str = "127.0.0.1", port: int = 0) -> Any:
    """Start a stand-in answering as Elasticsearch ``version`` on ``host:port`` (0: any free
    port); its ``url`` says where it listens and ``stop()`` stops it."""
    standin = load_standin_class()(version)
    if port or host != "127.0.0.1":
        # The stand-in listens on a free loopback port; move its handler to the address asked.
        handler = standin.server.RequestHandlerClass
        standin.server.shutdown()
        standin.server.server_close()
        try:
            server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise SystemExit(f"cannot listen on {host}:{port}: {exc}") from None
        server.daemon_threads = True
        standin.server = server
        shown = f"[{host}]" if ":" in host else host
        standin.url = f"http://{shown}:{server.server_port}"
        standin.thread = threading.Thread(target=server.serve_forever, daemon=True)
        standin.thread.start()
    return standin


def main(argv: list[str] | None = None) -> int:
    """Serve until Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(description="Run the Elasticsearch stand-in in the "
                                                 "foreground (in memory; not Elasticsearch).")
    parser.add_argument("--port", type=int, default=9200,
                        help="port to listen on (0: any free port; default 9200)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--version", default="8.15.1",
                        help="Elasticsearch version to answer as (default 8.15.1)")
    args = parser.parse_args(argv)
    standin = start_standin(args.version, args.host, args.port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"stand-in Elasticsearch {args.version} listening on {standin.url} "
          f"(Ctrl-C stops it)", flush=True)
    try:
        while not stop.wait(1.0):
            # The tests read what was sent; a long-running stand-in need not keep it.
            standin.requests.clear()
            standin.bodies.clear()
    except KeyboardInterrupt:
        pass
    standin.stop()
    print("stand-in stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

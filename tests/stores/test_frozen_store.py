"""A frozen database (every PostgreSQL process stopped, as a stalled disk or a paused virtual
machine leaves it: connections open, nothing answered, no server-side timeout running) holds
no request past its deadline: a click is answered 503 after store.timeout and a grace, a
search after server.search_timeout, /healthz and /readyz within a second naming the store;
once the database runs again, the click sent again is counted once and all is well."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from reranker.serving.service import STORE_CALL_GRACE
from tests.support.configs import write_config
from tests.support.postgres_server import Databases, ThrowawayCluster, server_binaries
from tests.support.servers import LiveServer, wait_until

STORE_TIMEOUT = 1.0
SEARCH_TIMEOUT = 2.0


@pytest.fixture
def cluster():
    """A PostgreSQL server of this test's own: stopping it stops no other test's."""
    binaries = server_binaries()
    if binaries is None:
        pytest.skip("no PostgreSQL server (initdb, pg_ctl) installed: `make test` installs "
                    "Debian's postgresql package when it runs as root")
    server = ThrowawayCluster(binaries)
    yield server
    thaw(server)
    server.stop()


def server_processes(cluster) -> list[int]:
    """The postmaster and its children."""
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True,
                              text=True).stdout.split()
    return [postmaster, *map(int, children)]


def signal_all(pids, signum) -> None:
    """Send ``signum`` to each of ``pids``; one that ended since it was listed (a backend
    whose connection closed) needs it no more."""
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def freeze(cluster) -> None:
    signal_all(reversed(server_processes(cluster)), signal.SIGSTOP)


def thaw(cluster) -> None:
    signal_all(server_processes(cluster), signal.SIGCONT)


def timed(call):
    started = time.monotonic()
    answer = call()
    return answer, time.monotonic() - started


def test_a_frozen_database_holds_no_request_past_its_deadline(workdir, cluster):
    dsn = Databases(cluster.dsn).create()
    config = write_config(workdir, store={"type": "postgresql", "dsn": dsn,
                                          "timeout": STORE_TIMEOUT},
                          server={"search_timeout": SEARCH_TIMEOUT},
                          trainer={"feedback_window": 600})
    live = LiveServer(config)
    try:
        pages = [live.post("/search", {"query": f"tea kettle {i}"}).json() for i in range(3)]
        live.service.events.flush()
        page, doc = pages[0], pages[0]["hits"][2]["id"]
        freeze(cluster)
        try:
            answer, took = timed(lambda: live.post(
                "/click", {"impression_id": page["impression_id"], "doc_id": doc}))
            assert answer.status_code == 503, answer.text
            assert took < STORE_TIMEOUT + STORE_CALL_GRACE + 1.0
            assert "store.timeout" in answer.json()["error"]["message"]
            batch, took = timed(lambda: live.post("/clicks", {"clicks": [
                {"impression_id": pages[1]["impression_id"],
                 "doc_id": pages[1]["hits"][0]["id"]}]}))
            assert batch.status_code == 503 and took < STORE_TIMEOUT + STORE_CALL_GRACE + 1.0
            search, took = timed(lambda: live.post("/search", {"query": "espresso grinder"}))
            assert search.status_code in (200, 503) and took < SEARCH_TIMEOUT + 1.0
            # stuck, or unreachable once a connection was waited for in vain
            health, took = timed(lambda: live.get("/healthz"))
            assert took < 1.5 and health.json()["events"]["status"] in ("stuck", "unavailable")
            ready, took = timed(lambda: live.get("/readyz"))
            assert took < 1.5 and ready.status_code == 503
            assert "events" in ready.json()["problems"]
            assert 'reranker_store_calls_timed_out_total{endpoint="click"} 1.0' in \
                live.get("/metrics").text
        finally:
            thaw(cluster)
        # sent again once the database runs: counted once, whether or not the first landed
        wait_until(lambda: live.get("/readyz").status_code == 200)
        answer = live.post("/click", {"impression_id": page["impression_id"], "doc_id": doc})
        assert answer.status_code == 202, answer.text
        assert live.service.events.get_impression(page["impression_id"]).clicked == [doc]
        wait_until(lambda: live.get("/healthz").json()["events"]["status"] == "ok")
    finally:
        live.stop()

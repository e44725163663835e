"""Slow and idle clients against the real `reranker serve`, from one process and from two
gunicorn workers: connections that trickle their headers in are closed by the request read
deadline, silent ones by the idle timeout, and meanwhile everyone else's searches answer at
once; the connection limit, and the limit on open files that makes room for it."""

from __future__ import annotations

import json
import re
import selectors
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests

from tests.support.configs import write_config
from tests.support.servers import ServeProcess, run_cli

READ_TIMEOUT = 5.0  # server.request_read_timeout in these tests
IDLE_TIMEOUT = 7  # server.idle_timeout
#: What a slow client sends a byte at a time: a request whose headers never end.
TRICKLE = (b"POST /search HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
           b"X-Slow: " + b"s" * 4000)


class Connection:
    """One raw client connection: when it opened, when it first sent, what it was answered
    and when the server closed it."""

    def __init__(self, url: str, trickles: bool):
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.setblocking(False)
        self.trickles = trickles
        self.opened = time.monotonic()
        self.first_byte: float | None = None
        self.closed: float | None = None
        self.sent = 0
        self.answer = b""

    def send_next(self) -> None:
        try:
            self.sent += self.sock.send(TRICKLE[self.sent:self.sent + 1])
        except OSError:  # closed by the server: the reader sees it
            return
        if self.first_byte is None:
            self.first_byte = time.monotonic()

    def read(self) -> None:
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        except ConnectionResetError:  # closed with our unread bytes in its buffer
            data = b""
        if data:
            self.answer += data
        else:
            self.closed = time.monotonic()


class SlowClients:
    """``trickling`` connections that each send one byte every ``interval`` seconds (spread
    over the interval), and ``idle`` ones that send nothing, all served by one thread until
    the server has closed every one of them or :meth:`close`."""

    def __init__(self, url: str, trickling: int, idle: int, interval: float = 0.5):
        self.interval = interval
        self.connections = [Connection(url, True) for _ in range(trickling)]
        self.connections += [Connection(url, False) for _ in range(idle)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started = time.monotonic()  # no trickling connection sent before
        self._thread.start()

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        for connection in self.connections:
            selector.register(connection.sock, selectors.EVENT_READ, connection)
        trickling = [c for c in self.connections if c.trickles]
        turn = 0  # sends made so far, round-robin over the trickling connections
        while not self._stop.is_set() and selector.get_map():
            for key, _ in selector.select(timeout=0.02):
                key.data.read()
                if key.data.closed is not None:
                    selector.unregister(key.fileobj)
            due = int((time.monotonic() - self.started) / self.interval * len(trickling))
            while turn < due:
                connection = trickling[turn % len(trickling)]
                if connection.closed is None:
                    connection.send_next()
                turn += 1
        selector.close()

    def open_count(self) -> int:
        return sum(c.closed is None for c in self.connections)

    def wait_all_closed(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.open_count()} connections still open"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for connection in self.connections:
            connection.sock.close()


def timed_search(url: str, query: str = "tea kettle") -> float:
    """Seconds a search on a new connection took to answer 200."""
    started = time.monotonic()
    response = requests.post(url + "/search", json={"query": query}, timeout=30)
    assert response.status_code == 200, response.text
    return time.monotonic() - started


@pytest.mark.parametrize("workers", [0, 2])
def test_trickling_and_idle_connections_do_not_shut_other_clients_out(workdir, workers):
    """200 connections trickle a header byte every half second and 50 stay silent (a
    slowloris, beyond waitress's old limit of 100 connections and past the old timeout of
    two minutes); meanwhile another client's searches each answer within a second. The
    request read deadline closes the trickling connections (with 408) however steadily they
    send, the idle timeout the silent ones, and the server answers as before."""
    path = write_config(workdir, server={"request_read_timeout": READ_TIMEOUT,
                                         "idle_timeout": IDLE_TIMEOUT})
    server = ServeProcess(path, "--no-trainer", "--workers", str(workers))
    clients = None
    try:
        server.wait_ready()
        for _ in range(6):  # warm every worker up
            timed_search(server.url)
        clients = SlowClients(server.url, trickling=200, idle=50)
        time.sleep(1.0)  # every trickling connection has a request under way
        assert clients.open_count() == 250
        took = []  # another client's searches, each begun 2 s or more before a deadline
        while time.monotonic() < clients.started + READ_TIMEOUT - 2:
            took.append(timed_search(server.url, f"tea kettle {len(took)}"))
            assert took[-1] < 1.0, took
            time.sleep(0.1)
        assert len(took) >= 5, took
        assert clients.open_count() == 250, "the searches were made while all were held"

        clients.wait_all_closed(timeout=IDLE_TIMEOUT + 10)
        for connection in clients.connections:
            if connection.trickles:
                held = connection.closed - connection.first_byte
                assert READ_TIMEOUT - 0.2 < held < READ_TIMEOUT + 3, held
                # Closed with the trickled bytes unread, the server resets the connection,
                # which may overtake its 408; any answer that arrived is that.
                assert connection.answer == b"" or connection.answer.startswith(
                    b"HTTP/1.0 408 Request Timeout"), connection.answer[:200]
            else:
                held = connection.closed - connection.opened
                assert IDLE_TIMEOUT - 0.5 < held < IDLE_TIMEOUT + 3, held
                assert connection.answer == b""
        assert timed_search(server.url) < 1.0
    finally:
        if clients is not None:
            clients.close()
        server.stop()


def test_a_stalled_request_is_answered_408_at_its_deadline(workdir):
    """A request that stops half-way is answered 408 with the error JSON when its read
    deadline passes, well before the idle timeout, and its connection closes; a whole
    request on a kept-alive connection is answered as ever."""
    path = write_config(workdir, server={"request_read_timeout": 1.5, "idle_timeout": 30})
    server = ServeProcess(path, "--no-trainer")
    try:
        with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])),
                                      timeout=10) as sock:
            body = json.dumps({"query": "tea kettle"}).encode()
            sock.sendall(b"POST /search HTTP/1.1\r\nHost: localhost\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += sock.recv(65536)
            head, _, payload = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK"), head
            length = int(re.search(rb"Content-Length: (\d+)", head)[1])
            while len(payload) < length:
                payload += sock.recv(65536)
            started = time.monotonic()
            sock.sendall(b"POST /search HTTP/1.1\r\nHost: localhost\r\n")  # and no more
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
            held = time.monotonic() - started
        assert 1.4 < held < 4, held
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 408 Request Timeout"), head
        assert json.loads(payload) == {"error": {"status": 408, "message": (
            "the request did not arrive whole within 1.5 seconds of its first byte")}}
    finally:
        server.stop()


def test_the_connection_limit_holds_and_frees(workdir):
    """With server.connection_limit 20, twenty silent connections make the next client
    wait; it is answered as soon as one of them closes."""
    path = write_config(workdir, server={"connection_limit": 20})
    server = ServeProcess(path, "--no-trainer")
    host, port = "127.0.0.1", int(server.url.rsplit(":", 1)[1])
    held = []
    try:
        timed_search(server.url)
        held = [socket.create_connection((host, port), timeout=10) for _ in range(20)]
        time.sleep(0.3)  # all accepted
        waiting: list[float] = []
        thread = threading.Thread(target=lambda: waiting.append(timed_search(server.url)))
        thread.start()
        thread.join(1.5)
        assert thread.is_alive(), "a 21st connection was served"
        held.pop().close()
        thread.join(5)
        assert waiting and waiting[0] < 5
    finally:
        for sock in held:
            sock.close()
        server.stop()


def test_bad_connection_settings_name_the_key(workdir):
    for key, value in (("connection_limit", 0), ("idle_timeout", "long"),
                       ("request_read_timeout", 0.1)):
        path = write_config(workdir, server={key: value})
        result = run_cli("serve", "-c", str(path), check=False)
        assert result.returncode == 1 and f"server.{key}" in result.stderr, result.stderr


def test_the_open_files_limit_is_raised_to_fit_the_connections():
    """The soft limit on open files rises to fit the connections and 256 other files; under
    a hard limit too low for them, fewer connections are held, with a warning."""
    script = (
        "import logging, resource, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(message)s')\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (512, int(sys.argv[1])))\n"
        "from reranker.api.app import fit_open_files\n"
        "print(fit_open_files(1000), resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n")

    def run(hard: int) -> list[str]:
        result = subprocess.run([sys.executable, "-c", script, str(hard)], check=True,
                                capture_output=True, text=True, timeout=60)
        return result.stdout.splitlines()

    resource = pytest.importorskip("resource")  # not on Windows
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1256:
        pytest.skip(f"the hard limit on open files here is {hard}")
    assert run(1256) == ["raised the limit on open files from 512 to 1256 for "
                         "server.connection_limit 1000", "1000 1256"]
    lines = run(800)
    assert lines[0] == "raised the limit on open files from 512 to 800 for " \
                       "server.connection_limit 1000"
    assert lines[1].startswith("server.connection_limit 1000 does not fit in the limit of "
                               "800 open files: holding 544 connections")
    assert lines[2] == "544 800"
    # at the hard limit already: no raise is claimed, only the warning
    lines = run(512)
    assert lines[0].startswith("server.connection_limit 1000 does not fit in the limit of "
                               "512 open files: holding 256 connections"), lines
    assert lines[1] == "256 512"

"""The HTTP server around the app: waitress, with its connections bounded as the ``server``
section says (:func:`create_server`), its own error answers in the project's JSON, and the
limit on open files raised to fit them (:func:`fit_open_files`); and a server running in a
background thread for the demo and the tests (:class:`BackgroundServer`)."""

from __future__ import annotations

import functools
import json
import logging
import threading
import time

from flask import Flask

from reranker.api.errors import body_too_large, error_body
from reranker.core.config import config_from_dict
from reranker.core.errors import shorten

#: The server's lines keep the logger they have always had (from when the app's module held
#: the server too): operators set its level and filter by it.
log = logging.getLogger("reranker.api.app")


def create_server(app: Flask, **options):
    """A waitress server for ``app`` (not yet running: call its ``run()``) that holds its
    connections as the app's ``server`` section says, and whose own error answers are JSON
    like the app's.

    Waitress reads every request whole in its event loop before a thread runs the app, so a
    slow client holds a socket, never a thread. Each server holds ``server.connection_limit``
    connections at most (more wait in the listen queue), closes one that has no request
    under way for ``server.idle_timeout`` seconds, and answers 408 and closes one whose
    request has not arrived whole ``server.request_read_timeout`` seconds after its first
    byte, however steadily the bytes trickle in (:func:`_channel_class`). An app without a
    reranker service gets these keys' defaults.

    Waitress answers some requests itself, before the app sees them: a header with a NUL
    byte or another character HTTP forbids, a malformed request line or a body longer than
    the app's ``MAX_CONTENT_LENGTH`` (which waitress is given, so that it stops reading
    there instead of spooling the body to disk). Its answers would be plain text; here they
    carry the project's error JSON. With ``security.trusted_proxy_header`` it keeps the
    proxy headers it would drop. ``options`` go to ``waitress.create_server`` (``host`` and
    ``port``, or ``sockets``; ``threads`` defaults to ``server.threads``)."""
    import waitress
    from waitress.server import BaseWSGIServer

    service = app.extensions.get("reranker")
    settings = service.config.server if service is not None else config_from_dict({}).server
    limit = fit_open_files(settings.connection_limit)
    options.setdefault("threads", settings.threads)
    options.setdefault("channel_timeout", settings.idle_timeout)
    options.setdefault("cleanup_interval", 1)  # look for idle connections every second
    options.setdefault("asyncore_use_poll", True)  # select() fails past descriptor 1023
    max_body = app.config.get("MAX_CONTENT_LENGTH")
    if max_body is not None:
        options.setdefault("max_request_body_size", max_body)
    if service is not None and service.config.security.trusted_proxy_header:
        # Waitress drops X-Forwarded-For and its kin unless told to trust a proxy; the app
        # reads the configured header itself (client_address).
        options.setdefault("clear_untrusted_proxy_headers", False)
    socket_map = options.setdefault("map", {})
    server = waitress.create_server(app, **options)
    # Waitress counts its listening sockets and its wake-up pipe among the connections.
    server.adj.connection_limit = limit + len(socket_map)
    channel_class = _channel_class(settings.request_read_timeout)
    for listener in socket_map.values():  # one per listening socket
        if isinstance(listener, BaseWSGIServer):
            listener.channel_class = channel_class
    return server


#: Open files a serving process needs beside its client connections: the index, the event
#: store (a few per thread), the model folder, database connections, logs, pipes.
SPARE_FILES = 256


def fit_open_files(connections: int) -> int:
    """How many client connections this process can hold, at most ``connections``.

    Each connection is an open file. When the soft limit on open files (``RLIMIT_NOFILE``,
    often 1024) leaves too little room for ``connections`` and :data:`SPARE_FILES` others,
    it is raised toward the hard limit (processes forked later inherit it). When even the
    hard limit is too low, fewer connections are held, with a warning: a server that runs
    out of descriptors cannot accept a connection, nor open a file."""
    try:
        import resource
    except ImportError:  # no such limit to raise (Windows)
        return connections
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = connections + SPARE_FILES
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return connections
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target > soft:  # (at the hard limit already: nothing to raise)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("raised the limit on open files from %d to %d for "
                     "server.connection_limit %d", soft, target, connections)
            soft = target
        except (ValueError, OSError) as exc:  # a system maximum below the hard limit (macOS)
            log.warning("could not raise the limit on open files from %d to %d: %s", soft,
                        target, exc)
    if soft >= needed:
        return connections
    fitting = max(soft - SPARE_FILES, soft // 2)  # half of a limit below twice the spare
    log.warning("server.connection_limit %d does not fit in the limit of %d open files: "
                "holding %d connections; raise the hard limit (ulimit -Hn, or LimitNOFILE= "
                "in a systemd unit)", connections, soft, fitting)
    return fitting


@functools.lru_cache(maxsize=None)
def _channel_class(read_timeout: float):
    """Waitress's connection class with a deadline on reading each request and its error
    task answering JSON (built on first use: waitress is imported only by what serves).

    A request must arrive whole (request line, headers and body) within ``read_timeout``
    seconds of its first byte. Waitress itself only closes a connection that has been
    silent for ``channel_timeout`` seconds, which a client sending a byte now and then
    never is: it could hold a connection for ever, and enough of them would shut every
    other client out. The loop asks each connection whether it is readable on every turn
    (at least once a second); past its deadline, a connection stops reading and answers
    408, then closes."""
    from waitress.channel import HTTPChannel
    from waitress.task import ErrorTask
    from waitress.utilities import Error

    class RequestTimeout(Error):
        code = 408
        reason = "Request Timeout"

    class JsonErrorTask(ErrorTask):
        def execute(self):
            error = self.request.error
            if error.code == 413:
                message = body_too_large(self.channel.adj.max_request_body_size)
            elif error.code == 408:
                message = error.body
            elif error.code == 501:  # a transfer coding waitress does not implement
                message = f"not implemented: {shorten(error.body)}"
            elif error.code >= 500:
                message = "internal error; the server log has the details"
            else:
                message = f"the request is not valid HTTP: {shorten(error.body)}"
            body = json.dumps(error_body(error.code, message)).encode("utf-8")
            self.status = f"{error.code} {error.reason}"
            self.response_headers.append(("Content-Type", "application/json"))
            self.set_close_on_finish()
            self.content_length = len(body)
            self.write(body)

    class Channel(HTTPChannel):
        error_task_class = JsonErrorTask
        request_started: float | None = None  # first byte of the request being read

        def received(self, data):
            if self.request is None and data:
                self.request_started = time.monotonic()
            try:
                return super().received(data)
            finally:
                if self.request is None:  # read whole (or nothing begun after it)
                    self.request_started = None

        def readable(self):
            if (self.request_started is not None and not self.requests
                    and not (self.will_close or self.close_when_flushed)
                    and time.monotonic() - self.request_started > read_timeout):
                self._time_out()
            return super().readable()

        def _time_out(self):
            """Answer the request being read with 408 (the error task closes the
            connection), as waitress answers one it cannot parse."""
            with self.requests_lock:
                request, self.request, self.request_started = self.request, None, None
                request.error = RequestTimeout(
                    f"the request did not arrive whole within {read_timeout:g} seconds of "
                    f"its first byte")
                request.completed = True
                self.requests.append(request)
            self.server.add_task(self)

    return Channel


class BackgroundServer:
    """``app`` behind a real waitress HTTP server (:func:`create_server`) whose loop runs in
    a daemon thread, on ``host`` and a free port unless one is given (the demo and the tests
    use it)."""

    def __init__(self, app: Flask, *, host: str = "127.0.0.1", port: int = 0, threads: int = 4):
        self._channels: dict = {}  # the loop's own socket map, so stop() can close all of it
        self.server = create_server(app, host=host, port=port, threads=threads,
                                    map=self._channels)
        self.url = f"http://{host}:{self.server.effective_port}"
        self._stopped = False
        self.thread = threading.Thread(target=self.server.run, name="reranker-http", daemon=True)
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving: wait up to ``timeout`` seconds for the requests being handled
        (queued ones are cancelled), then close the sockets from inside the loop's thread,
        so the loop ends without touching a closed descriptor. Stopping twice is harmless."""
        if self._stopped:
            return
        self._stopped = True
        self.server.task_dispatcher.shutdown(timeout=timeout)
        trigger = self.server.trigger
        if self.thread.is_alive():
            # The loop may run this before pull_trigger writes its wake-up byte, so the
            # trigger's pipe stays open until the loop has ended.
            trigger.pull_trigger(self._close_sockets)
            self.thread.join(timeout)
            if self.thread.is_alive():
                log.warning("the HTTP server's loop did not stop within %gs", timeout)
                return
        else:  # the loop already ended: nothing races us
            self._close_sockets()
        trigger.close()

    def _close_sockets(self) -> None:
        """Close the listening socket and the connections, and take the trigger out of the
        loop's map: the loop ends once its map is empty."""
        from waitress import wasyncore

        trigger = self.server.trigger
        for channel in list(self._channels.values()):
            try:
                if channel is self.server:  # its own close() would close the trigger too
                    wasyncore.dispatcher.close(channel)
                elif channel is not trigger:
                    channel.close()
            except OSError:  # already closed by the peer
                pass
        trigger.del_channel()

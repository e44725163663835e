"""Serving one configuration from several worker processes: the WSGI app factory for a
pre-forking server, and ``reranker serve --workers N``, which runs gunicorn with it.

A pre-forking server starts its workers by forking one master process. Each worker builds
its own app after the fork (:func:`app`): its own search backend, model and event store
connections (the PostgreSQL store's pool runs threads, which a fork does not copy, so nothing
of the store may be opened before it). The workers share what is on disk or on the database
server: the event store, the index and the model folder, from which each one picks up every
new model version within a second (:class:`reranker.models.arms.Arm`).

Every worker starts the background trainer in leader mode: only the one holding the event
store's trainer leadership runs passes, and when it dies another takes over within
``trainer.interval`` (:meth:`reranker.models.trainer.Trainer.run_forever`).

Each worker serves with waitress (:class:`WaitressWorker`), which reads every request whole
before a thread runs the app, so slow clients cannot hold the threads. With gunicorn
itself::

    gunicorn --workers 4 --worker-class reranker.api.wsgi.WaitressWorker \\
        --bind 127.0.0.1:8000 'reranker.api.wsgi:app("config.yaml")'
"""

from __future__ import annotations

import atexit
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from flask import Flask
from gunicorn.workers.base import Worker
from waitress import wasyncore
from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer

log = logging.getLogger(__name__)

#: Seconds a worker that cannot start waits before it exits to be started again.
WORKER_RETRY = 5.0


def app(config_path: str | None = None, overrides: Mapping[str, Any] | None = None, *,
        trainer: bool = True) -> Flask:
    """The app of one worker process: its own service, opened now (call it after the fork),
    closed when the process exits; with ``trainer`` (and ``trainer.enabled``), a background
    trainer that trains while this process leads the store's trainers."""
    from reranker.api.app import serving_app
    from reranker.core.config import load_config
    from reranker.serving.service import RerankerService

    config = load_config(config_path, dict(overrides or {}))
    service = RerankerService(config).open()
    atexit.register(service.close)
    served, _ = serving_app(service, config.trainer.interval
                            if trainer and config.trainer.enabled else None, lead=True)
    return served


def serve_workers(config_path: str | None, overrides: Mapping[str, Any], *,
                  trainer: bool = True) -> None:
    """``reranker serve`` with ``server.workers`` gunicorn worker processes (each a
    :class:`WaitressWorker` with ``server.threads`` threads) on ``server.host`` and
    ``server.port``; returns when gunicorn stops (SIGTERM or SIGINT)."""
    from gunicorn.app.base import BaseApplication

    from reranker.core.config import load_config, serving_description

    config = load_config(config_path, dict(overrides))  # a bad config fails before any fork
    server = config.server
    # So does anything else a worker checks when it starts (the keys in the environment,
    # the event store, the models, the backend): once the workers run, one that cannot
    # start is started again (see load) instead of stopping them all.
    _check_start(config)

    def when_ready(arbiter) -> None:
        host, port = arbiter.LISTENERS[0].sock.getsockname()[:2]
        print(f"reranker serving {serving_description(config)} from {server.workers} worker "
              f"processes on http://{host}:{port}", flush=True)

    def child_exit(arbiter, worker) -> None:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # its gauges' files go with it
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(worker.pid)

    class Gunicorn(BaseApplication):
        def load_config(self) -> None:
            settings = {"bind": f"{server.host}:{server.port}", "workers": server.workers,
                        "worker_class": WaitressWorker, "graceful_timeout": 30,
                        "when_ready": when_ready, "child_exit": child_exit,
                        "accesslog": None, "proc_name": "reranker"}
            if "control_socket_disable" in self.cfg.settings:  # gunicorn 25+
                settings["control_socket_disable"] = True  # no socket in the home folder
            if server.log_format == "json":  # gunicorn's own lines as JSON too
                settings["logconfig_dict"] = json_logging_config()
            for key, value in settings.items():
                self.cfg.set(key, value)

        def load(self) -> Flask:  # in each worker, after the fork
            try:
                return app(config_path, overrides, trainer=trainer)
            except Exception as exc:  # noqa: BLE001 -- any failure to start, said whole
                # gunicorn stops every worker when one fails to boot (exit code 3): a worker
                # started again while the event store is down, or after a pinned version's
                # file was deleted, would take the healthy ones with it. This one waits and
                # exits, and gunicorn starts another.
                log.error("worker %d cannot start (it is started again in %g s): %s",
                          os.getpid(), WORKER_RETRY, getattr(exc, "message", None) or
                          f"{type(exc).__name__}: {exc}")
                time.sleep(WORKER_RETRY)
                raise SystemExit(1) from None

    Gunicorn().run()


def _check_start(config) -> None:
    """Open and close the service as a worker would, in a child process (the search
    engine's threads and the store's connections must not be in the process gunicorn forks
    its workers from); raise a :class:`RerankerError` with what failed."""
    from reranker.core.errors import RerankerError
    from reranker.serving.service import RerankerService

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover -- (the child: its coverage is not collected)
        os.close(read)
        code, text = 0, ""
        try:
            RerankerService(config).open().close()
        except BaseException as exc:  # noqa: BLE001 -- said to the parent, whatever it is
            code = 1
            text = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        os.write(write, text.encode("utf-8")[:60000])
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        text = pipe.read().decode("utf-8", "replace")
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RerankerError(text or "the service could not start")


def json_logging_config() -> dict[str, Any]:
    """gunicorn's logging configuration (``logconfig_dict``) for ``server.log_format:
    json``: its own loggers (the arbiter's start, stop and worker lines) write JSON lines,
    as the service's do (:func:`reranker.serving.monitoring.configure_logging`)."""
    handler = {"class": "logging.StreamHandler", "formatter": "json",
               "stream": "ext://sys.stderr"}
    return {"version": 1, "disable_existing_loggers": False,
            "formatters": {"json": {"()": "reranker.serving.monitoring.JsonFormatter"}},
            "handlers": {"console": handler, "error_console": handler},
            "root": {"level": "INFO", "handlers": ["console"]},
            "loggers": {"gunicorn.error": {"level": "INFO", "handlers": ["error_console"],
                                           "propagate": False, "qualname": "gunicorn.error"},
                        "gunicorn.access": {"level": "INFO", "handlers": [],
                                            "propagate": False}}}


class WaitressWorker(Worker):
    """A gunicorn worker process that serves its app with waitress, as ``reranker serve``
    does from a single process (:func:`reranker.api.server.create_server`): the ``server``
    section's ``threads``, ``connection_limit``, ``idle_timeout`` and
    ``request_read_timeout`` hold in each worker.

    Gunicorn's threaded worker (gthread) gives each new connection to a thread, which then
    reads the request from it: clients that send their headers a byte at a time hold every
    thread, and the searches of everyone else wait. Waitress reads requests in its event
    loop and gives a thread only a request that has arrived whole. Gunicorn still binds the
    socket, forks, watches and restarts the workers; its own settings for threads,
    keep-alive and worker connections do not apply here.
    """

    def run(self) -> None:
        from reranker.api.server import create_server

        socket_map: dict = {}  # waitress's: listening sockets, wake-up pipe, connections
        server = create_server(self.wsgi, sockets=[listener.sock for listener in self.sockets],
                               backlog=self.cfg.backlog, map=socket_map)
        while self.alive and os.getppid() == self.ppid:  # SIGTERM clears alive
            self.notify()  # the arbiter replaces a worker silent for its timeout
            self._turn(server, socket_map, server.adj.asyncore_loop_timeout)
        self._stop(server, socket_map)

    @staticmethod
    def _turn(server, socket_map: dict, timeout: float) -> None:
        """One turn of waitress's loop: wait up to ``timeout`` seconds for the sockets and
        serve what they are ready for."""
        wasyncore.loop(timeout=timeout, use_poll=server.adj.asyncore_use_poll, map=socket_map,
                       count=1)

    def _stop(self, server, socket_map: dict) -> None:
        """Stop accepting, finish the requests under way and send their answers within
        gunicorn's ``graceful_timeout``, then close every connection."""

        def busy() -> bool:
            return any(isinstance(c, HTTPChannel) and (c.requests or c.total_outbufs_len)
                       for c in list(socket_map.values()))

        for listener in socket_map.values():
            if isinstance(listener, BaseWSGIServer):
                listener.accepting = False  # the other workers take the new connections
        deadline = time.monotonic() + self.cfg.graceful_timeout
        while busy() and time.monotonic() < deadline:
            self.notify()
            self._turn(server, socket_map, 0.1)
        server.task_dispatcher.shutdown(timeout=1.0)
        wasyncore.close_all(socket_map)

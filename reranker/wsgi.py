"""Serving one configuration from several worker processes: the WSGI app factory for a
pre-forking server, and ``reranker serve --workers N``, which runs gunicorn with it.

A pre-forking server starts its workers by forking one master process. Each worker builds
its own app after the fork (:func:`app`): its own search backend, model and event store
connections (the PostgreSQL store's pool runs threads, which a fork does not copy, so nothing
of the store may be opened before it). The workers share what is on disk or on the database
server: the event store, the index and the model folder, from which each one picks up every
new model version within a second (:class:`reranker.arms.Arm`).

Every worker starts the background trainer in leader mode: only the one holding the event
store's trainer leadership runs passes, and when it dies another takes over within
``trainer.interval`` (:meth:`reranker.trainer.Trainer.run_forever`). With gunicorn itself::

    gunicorn --workers 4 --worker-class gthread --threads 8 --bind 127.0.0.1:8000 \\
        'reranker.wsgi:app("config.yaml")'
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Mapping
from typing import Any

from flask import Flask

log = logging.getLogger(__name__)


def app(config_path: str | None = None, overrides: Mapping[str, Any] | None = None, *,
        trainer: bool = True) -> Flask:
    """The app of one worker process: its own service, opened now (call it after the fork),
    closed when the process exits; with ``trainer`` (and ``trainer.enabled``), a background
    trainer that trains while this process leads the store's trainers."""
    from .app import create_app, start_trainer
    from .config import load_config
    from .service import RerankerService

    config = load_config(config_path, dict(overrides or {}))
    service = RerankerService(config).open()
    atexit.register(service.close)
    if trainer and config.trainer.enabled:
        start_trainer(service, config.trainer.interval, lead=True)
    return create_app(service=service)


def serve_workers(config_path: str | None, overrides: Mapping[str, Any], *,
                  trainer: bool = True) -> None:
    """``reranker serve`` with ``server.workers`` gunicorn worker processes (threaded, with
    ``server.threads`` threads each, keep-alive connections) on ``server.host`` and
    ``server.port``; returns when gunicorn stops (SIGTERM or SIGINT)."""
    from gunicorn.app.base import BaseApplication

    from .config import load_config

    config = load_config(config_path, dict(overrides))  # a bad config fails before any fork
    server = config.server

    def when_ready(arbiter) -> None:
        host, port = arbiter.LISTENERS[0].sock.getsockname()[:2]
        print(f"reranker serving learner {config.learner.name} from {server.workers} worker "
              f"processes on http://{host}:{port}", flush=True)

    def child_exit(arbiter, worker) -> None:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # its gauges' files go with it
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(worker.pid)

    class Gunicorn(BaseApplication):
        def load_config(self) -> None:
            settings = {"bind": f"{server.host}:{server.port}", "workers": server.workers,
                        "worker_class": "gthread", "threads": server.threads,
                        "keepalive": 5, "graceful_timeout": 30, "when_ready": when_ready,
                        "child_exit": child_exit, "accesslog": None, "proc_name": "reranker"}
            if "control_socket_disable" in self.cfg.settings:  # gunicorn 25+
                settings["control_socket_disable"] = True  # no socket in the home folder
            for key, value in settings.items():
                self.cfg.set(key, value)

        def load(self) -> Flask:  # in each worker, after the fork
            return app(config_path, overrides, trainer=trainer)

    Gunicorn().run()

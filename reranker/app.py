"""The HTTP API: ``POST /search``, ``POST /click``, ``GET /healthz``, and for an experiment
``GET /experiments`` (its results as JSON) and ``GET /dashboard`` (a live page of them).

``create_app(config)`` builds a Flask app around a :class:`RerankerService`; nothing is read
at import time. Every error is answered as JSON ``{"error": {"status": N, "message": ...}}``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from flask import Flask, jsonify, request
from werkzeug.exceptions import HTTPException

from .config import Config, config_from_dict
from .errors import BadRequestError, NotFoundError, RerankerError
from .service import RerankerService

log = logging.getLogger(__name__)


def create_app(config: Config | dict | None = None, *,
               service: RerankerService | None = None) -> Flask:
    """The Flask app. ``config`` may be a :class:`Config` or a dict (as tests pass);
    ``service`` an already opened service to wrap."""
    if service is None:
        if not isinstance(config, Config):
            config = config_from_dict(config or {})
        service = RerankerService(config).open()
    app = Flask("reranker")
    app.json.sort_keys = False
    app.extensions["reranker"] = service
    _register_errors(app)

    @app.post("/search")
    def search():
        body = _json_body()
        _reject_unknown(body, {"query", "size", "user_id", "session_id"})
        return jsonify(service.search(body.get("query"), body.get("size"), body.get("user_id"),
                                      body.get("session_id")))

    @app.post("/click")
    def click():
        body = _json_body()
        _reject_unknown(body, {"impression_id", "doc_id"})
        result = service.click(body.get("impression_id"), body.get("doc_id"))
        return jsonify({"accepted": True, "impression_id": result.impression_id,
                        "doc_id": result.doc_id, "position": result.position,
                        "duplicate": result.duplicate}), 202

    @app.get("/healthz")
    def healthz():
        return jsonify(service.health())

    @app.get("/experiments")
    def experiments():
        return jsonify(service.experiment_status())

    @app.get("/dashboard")
    def dashboard():
        from .experiments.report import dashboard_page

        if service.experiment is None:
            raise NotFoundError("no experiment is configured (experiment.mode is null)")
        return dashboard_page(), 200, {"Content-Type": "text/html; charset=utf-8",
                                       "Cache-Control": "no-store"}

    return app


def start_trainer(service: RerankerService, interval: float) -> tuple[threading.Thread,
                                                                      threading.Event]:
    """Run the service's trainer in a daemon thread; set the returned event to stop it."""
    stop = threading.Event()
    thread = threading.Thread(target=service.trainer.run_forever, args=(stop, interval),
                              name="reranker-trainer", daemon=True)
    thread.start()
    return thread, stop


class BackgroundServer:
    """``app`` behind a real waitress HTTP server whose loop runs in a daemon thread, on
    ``host`` and a free port unless one is given (the demo and the tests use it)."""

    def __init__(self, app: Flask, *, host: str = "127.0.0.1", port: int = 0, threads: int = 4):
        import waitress

        self._channels: dict = {}  # the loop's own socket map, so stop() can close all of it
        self.server = waitress.create_server(app, host=host, port=port, threads=threads,
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


def _json_body() -> dict[str, Any]:
    body = request.get_json(silent=True)
    if body is None:
        raise BadRequestError("the request body must be JSON (Content-Type: application/json)")
    if not isinstance(body, dict):
        raise BadRequestError(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def _reject_unknown(body: dict[str, Any], known: set[str]) -> None:
    unknown = sorted(set(body) - known)
    if unknown:
        raise BadRequestError(f"unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})")


def _error(status: int, message: str):
    return jsonify({"error": {"status": status, "message": message}}), status


def _register_errors(app: Flask) -> None:
    @app.errorhandler(RerankerError)
    def project_error(exc: RerankerError):
        if exc.status >= 500:
            log.warning("%s", exc.message)
        return _error(exc.status, exc.message)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):
        return _error(exc.code or 500, exc.description or exc.name)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception):
        log.exception("unexpected error while answering %s %s", request.method, request.path)
        return _error(500, "internal error; the server log has the details")

"""The HTTP API: ``POST /search``, ``POST /click``, ``POST /clicks``, ``POST /reward``,
``POST /explain``, ``GET /healthz``, and for an experiment
``GET /experiments`` (its results as JSON) and ``GET /dashboard`` (a live page of them);
``GET /reranker.js`` serves the browser snippet, ``GET /openapi.json`` describes all of
them (OpenAPI 3.1), and ``server.cors_origins`` lets pages on other origins call ``/search``,
``/click`` and ``/reward`` (CORS).

``create_app(config)`` builds a Flask app around a :class:`RerankerService`, and
``blueprint(service)`` gives the same endpoints to mount in an existing Flask app; nothing is
read at import time. Every error is answered as JSON ``{"error": {"status": N, "message": ...}}``
(with ``"field"``, the JSON path of the offending request field, when there is one). Request
bodies are read within ``server.max_body_bytes`` and ``server.max_json_depth`` and checked
against the schemas of :mod:`reranker.api.validation` before the service sees them.

The routes come in groups, each a module that registers itself on the blueprint: searching
(:mod:`reranker.api.search`), clicks and rewards (:mod:`reranker.api.clicks`), the operator's
endpoints (:mod:`reranker.api.operator`) and the browser side, the snippet and CORS
(:mod:`reranker.api.browser`); what they share of a request (its body, API key and rate
limits) is :class:`reranker.api.gate.RequestGate`'s. The HTTP server around the app is
:mod:`reranker.api.server`'s.
"""

from __future__ import annotations

import gc
import logging
import threading

from flask import Blueprint, Flask, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from reranker.api import browser, clicks, operator, search
from reranker.api.browser import CorsPolicy
from reranker.api.errors import body_too_large, error_response
from reranker.api.gate import RequestGate
from reranker.api.server import BackgroundServer, create_server, fit_open_files
from reranker.core.config import Config, config_from_dict
from reranker.core.errors import RerankerError, TooManyRequestsError, UnauthorizedError
from reranker.serving.monitoring import redact
from reranker.serving.service import RerankerService

#: Importable from here, the app's module, as before the server had a module of its own.
__all__ = ["BackgroundServer", "blueprint", "create_app", "create_server", "fit_open_files",
           "freeze_startup_objects", "serving_app", "start_trainer"]

log = logging.getLogger(__name__)


def create_app(config: Config | dict | None = None, *,
               service: RerankerService | None = None) -> Flask:
    """The Flask app. ``config`` may be a :class:`Config` or a dict (as tests pass);
    ``service`` an already opened service to wrap."""
    if service is None:
        if not isinstance(config, Config):
            config = config_from_dict(config or {})
        service = RerankerService(config).open()
    app = Flask("reranker", static_folder=None)  # the snippet has its own route and caching
    app.json.sort_keys = False
    # Werkzeug refuses a longer body with 413 before reading it, whatever the route.
    app.config["MAX_CONTENT_LENGTH"] = service.config.server.max_body_bytes
    app.extensions["reranker"] = service
    _register_errors(app)
    endpoints = blueprint(service)
    app.register_blueprint(endpoints)
    browser.register_routing_errors(app, endpoints.cors_policy)
    return app


def blueprint(service: RerankerService, name: str = "reranker") -> Blueprint:
    """The service's endpoints as a Flask blueprint, to mount in an existing Flask app
    (``app.register_blueprint(blueprint(service), url_prefix="/search-api")``): the routes,
    their CORS (``server.cors_origins``) and their JSON errors, which stay within the
    blueprint's routes."""
    bp = Blueprint(name, __name__)
    limits = service.config.server
    policy = CorsPolicy(limits.cors_origins, limits.cors_max_age,
                        explain=limits.cors_explain,
                        refused=service.prometheus.cors_refused)
    bp.cors_policy = policy
    gate = RequestGate(service, policy)
    _register_errors(bp)
    # (in this order: a CORS preflight is answered before the request is timed)
    browser.register(bp, policy)
    gate.register(bp)
    for group in (search, clicks, operator):
        group.register(bp, gate)
    return bp


def _register_errors(app: Flask | Blueprint) -> None:
    @app.errorhandler(RerankerError)
    def project_error(exc: RerankerError):
        if exc.status >= 500:  # the log keeps the details; the client gets the problem
            log.warning("%s", exc.message)
            response = error_response(exc.status, redact(exc.message), exc.field)
        else:
            response = error_response(exc.status, exc.message, exc.field)
        if isinstance(exc, TooManyRequestsError):
            response[0].headers["Retry-After"] = str(exc.whole_seconds(exc.retry_after))
        elif isinstance(exc, UnauthorizedError):
            response[0].headers["WWW-Authenticate"] = 'Bearer realm="reranker"'
        return response

    @app.errorhandler(RequestEntityTooLarge)
    def too_large(exc: RequestEntityTooLarge):
        return error_response(413, body_too_large(request.max_content_length))

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):
        return error_response(exc.code or 500, exc.description or exc.name)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception):
        log.exception("unexpected error while answering %s %s", request.method, request.path)
        return error_response(500, "internal error; the server log has the details")


def start_trainer(service: RerankerService, interval: float, *, lead: bool = False
                  ) -> tuple[threading.Thread, threading.Event]:
    """Run the service's trainer in a daemon thread; set the returned event to stop it.
    With ``lead``, it trains only while this process leads the store's trainers (one of
    several worker processes: :meth:`reranker.models.trainer.Trainer.run_forever`)."""
    stop = threading.Event()
    thread = threading.Thread(target=service.trainer.run_forever, args=(stop, interval),
                              kwargs={"lead": lead}, name="reranker-trainer", daemon=True)
    service.background.append((thread, stop))  # close() stops and joins it first
    thread.start()
    return thread, stop


def freeze_startup_objects() -> None:
    """Leave what a serving process holds once its service is open out of Python's cycle
    collector (:func:`gc.freeze`): its modules, the index, the compiled kernels, the web
    framework, some hundred and fifty thousand objects that live as long as the process.
    Left in, every full collection walks them again, a pause of up to 77-88 ms in the
    middle of a search when the caches grow; frozen, 9-11 ms (benchmarks/
    bench_tail_latency.py). Called for ``reranker serve`` and each worker's app
    (:func:`serving_app`) before the first request and before the trainer starts, never by
    the library, whose host process decides for itself."""
    gc.collect()
    gc.freeze()


def serving_app(service: RerankerService, trainer_interval: float | None, *,
                lead: bool = False) -> tuple[Flask, threading.Event | None]:
    """The app of a serving process (``reranker serve``, each worker of ``serve
    --workers``) over its opened service, with the start-up objects frozen
    (:func:`freeze_startup_objects`) before the background trainer starts, every
    ``trainer_interval`` seconds (none: no trainer; ``lead``: see :func:`start_trainer`);
    and the event that stops the trainer."""
    app = create_app(service=service)
    freeze_startup_objects()  # (before the trainer's first pass holds anything)
    stop = None
    if trainer_interval is not None:
        _, stop = start_trainer(service, trainer_interval, lead=lead)
    return app, stop

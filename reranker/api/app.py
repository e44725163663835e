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
"""

from __future__ import annotations

import functools
import gc
import hashlib
import hmac
import json
import logging
import threading
import time
from importlib import resources
from typing import Any

from flask import Blueprint, Flask, current_app, g, jsonify, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from reranker.api.validation import RequestValidator, read_json
from reranker.core.config import Config, config_from_dict
from reranker.core.errors import (
    ECHO_LIMIT,
    BadRequestError,
    NotFoundError,
    RerankerError,
    TooManyRequestsError,
    UnauthorizedError,
    shorten,
)
from reranker.serving.monitoring import redact, redact_all
from reranker.serving.service import RerankerService
from reranker.serving.trust import client_key, rejection, reports_access

log = logging.getLogger(__name__)
access = logging.getLogger("reranker.access")  # one line per request


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
    policy: CorsPolicy = endpoints.cors_policy

    @app.after_request
    def cors_on_routing_errors(response):
        # A wrong method on a CORS route never reaches the blueprint: its page still reads why.
        if request.url_rule is None and policy.enabled and request.path in CORS_PATHS:
            response.vary.add("Origin")
            allowed = policy.allow(request.headers.get("Origin"))
            if allowed is not None:
                response.headers["Access-Control-Allow-Origin"] = allowed
        return response

    return app


def blueprint(service: RerankerService, name: str = "reranker") -> Blueprint:
    """The service's endpoints as a Flask blueprint, to mount in an existing Flask app
    (``app.register_blueprint(blueprint(service), url_prefix="/search-api")``): the routes,
    their CORS (``server.cors_origins``) and their JSON errors, which stay within the
    blueprint's routes."""
    bp = Blueprint(name, __name__)
    limits = service.config.server
    policy = CorsPolicy(limits.cors_origins, limits.cors_max_age)
    bp.cors_policy = policy
    validator = RequestValidator(service.config)
    reports = reports_access(service.config)
    _register_errors(bp)
    _register_browser(bp, policy)

    @bp.before_request
    def limit_body():
        # Mounted in another application, the blueprint keeps its own limit on its routes.
        request.max_content_length = limits.max_body_bytes
        g.reranker_started = time.perf_counter()

    @bp.after_request
    def measure(response):
        started = g.pop("reranker_started", None)
        if started is not None:
            seconds = time.perf_counter() - started
            endpoint = request.url_rule.rule if request.url_rule is not None else "other"
            service.prometheus.requests.labels(endpoint, str(response.status_code)).observe(
                seconds)
            access.info("%s %s %d %.1f ms", request.method, request.path,
                        response.status_code, seconds * 1000,
                        extra={"method": request.method, "path": request.path,
                               "status": response.status_code, "ms": round(seconds * 1000, 2)})
        return response

    def json_body(schema: str) -> dict[str, Any]:
        body = _json_body(policy, limits.max_json_depth)
        validator.check(schema, body)
        return body

    def require_api_key(endpoint: str) -> None:
        # security.api_keys_env: the application's server calls these, not browsers.
        with service.trust.counting(endpoint):
            if not service.trust.api_key_ok(api_key_given()):
                raise rejection(UnauthorizedError(
                    "a valid API key is required: send it in the X-API-Key header (or "
                    "Authorization: Bearer KEY)", field="X-API-Key"), "unauthorized")

    def reports_allowed() -> Any:
        """None when the request may read the experiment's results
        (``security.reports_access``), else the 401 to answer: with a Basic challenge, so
        that a browser opening the dashboard asks for the token or key as a password."""
        if service.trust.reports_ok(reports, credential_given(),
                                    service.config.server.admin_token):
            return None
        what = ("the operator's token (server.admin_token)" if reports == "operator" else
                "an API key (or the operator's token)")
        body, status = _error(401, f"the experiment's results need {what}: send it as "
                                   f"'Authorization: Bearer ...', or as the password of HTTP "
                                   f"Basic authentication (security.reports_access: {reports})",
                              field="Authorization")
        body.headers["WWW-Authenticate"] = 'Basic realm="reranker experiments", charset="UTF-8"'
        return body, status

    def limit(endpoint: str, body: dict[str, Any], address: str | None) -> None:
        client = client_key(body.get("user_id"), body.get("session_id"), address)
        with service.trust.counting(endpoint):
            service.trust.limit("search" if endpoint == "search" else "click", client, address)

    @bp.post("/search")
    def search():
        require_api_key("search")
        body = json_body("search")
        address = client_address(service)
        limit("search", body, address)
        response = jsonify(service.search_in_time(
            body.get("query"), body.get("size"), body.get("user_id"), body.get("session_id"),
            filters=body.get("filter"), offset=body.get("from"), facets=body.get("facets"),
            client_address=address))
        waiting, failure = service.events.impressions_waiting()
        if failure is not None:  # its impression waits in this process's memory
            response.headers[QUEUED_HEADER] = (f"queued; {waiting} impressions wait for the "
                                               f"event store, which fails")
        return response

    @bp.post("/click")
    def click():
        try:
            body = json_body("click")
            limit("click", body, client_address(service))
            result = service.in_time("click", service.click, body.get("impression_id"),
                                     body.get("doc_id"), body.get("user_id"),
                                     body.get("session_id"))
        except RerankerError as exc:
            service.prometheus.click_rejected(exc)
            raise
        except RequestEntityTooLarge:
            service.prometheus.clicks.labels("too_large").inc()
            raise
        return jsonify(click_answer(result)), 202

    def click_answer(result) -> dict[str, Any]:
        """An accepted click's answer (``202`` of /click, an item of /clicks), counted."""
        service.prometheus.clicks.labels("duplicate" if result.duplicate else "accepted").inc()
        return {"accepted": True, "impression_id": result.impression_id,
                "doc_id": result.doc_id, "position": result.position,
                "duplicate": result.duplicate}

    @bp.post("/clicks")
    def clicks():
        # An application's server forwarding its users' clicks, many per request: guarded
        # by the API key like /search; each click is checked, limited and counted as one
        # sent to /click would be, and refused alone.
        require_api_key("clicks")
        try:
            items = json_body("clicks")["clicks"]
        except RequestEntityTooLarge:
            service.prometheus.clicks.labels("too_large").inc()
            raise
        address = client_address(service)
        outcomes: list[Any] = [None] * len(items)
        allowed = []
        for i, item in enumerate(items):
            try:
                limit("click", item, address)
                allowed.append(i)
            except RerankerError as exc:
                outcomes[i] = exc
        done = service.in_time("clicks", service.click_many, [items[i] for i in allowed])
        for i, outcome in zip(allowed, done, strict=True):
            outcomes[i] = outcome
        results = []
        for outcome in outcomes:
            if isinstance(outcome, RerankerError):
                service.prometheus.click_rejected(outcome)
                results.append(error_body(outcome.status, outcome.message, outcome.field))
                continue
            results.append(click_answer(outcome))
        accepted = sum("error" not in result for result in results)
        return jsonify({"accepted": accepted, "refused": len(results) - accepted,
                        "results": results}), 200

    @bp.post("/reward")
    def reward():
        body = json_body("reward")
        limit("reward", body, client_address(service))
        result = service.in_time("reward", service.reward, body.get("impression_id"),
                                 body.get("value"), body.get("user_id"), body.get("session_id"))
        return jsonify({"accepted": True, "impression_id": result.impression_id,
                        "value": result.value, "replaced": result.replaced}), 202

    @bp.post("/explain")
    def explain():
        from reranker.serving.explain import explain_impression, explain_search

        require_api_key("explain")
        body = _json_body(policy, limits.max_json_depth)
        # Either of two bodies: the one with an impression_id explains that page.
        if isinstance(body, dict) and "impression_id" in body:
            validator.check("explain_impression", body)
            return jsonify(service.in_time("explain", explain_impression, service,
                                           body.get("impression_id")))
        validator.check("explain_search", body)
        return jsonify(service.in_time("explain", explain_search, service, body.get("query"),
                                       body.get("size"), body.get("filter")))

    @bp.get("/healthz")
    def healthz():
        detail = request.args.getlist("detail")
        if any(value not in ("0", "1") for value in detail) or len(detail) > 1:
            raise BadRequestError("'detail' must be 0 or 1, once", field="detail")
        if detail == ["1"]:
            token = service.config.server.admin_token
            given = request.headers.get("Authorization", "")
            if not token or not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return _error(401, "the operator view needs 'Authorization: Bearer "
                                   "<server.admin_token>'" + ("" if token else
                                                              " (none is configured)"))
            return jsonify(service.health())
        # Public: the problems by name, without internal paths, URLs or error details
        return jsonify(redact_all(service.health()))

    @bp.get("/readyz")
    def readyz():
        state = service.ready()
        return jsonify(state), 200 if state["status"] == "ok" else 503

    @bp.get("/metrics")
    def metrics():
        body, content_type = service.prometheus.render()
        return current_app.response_class(body, mimetype=None, content_type=content_type)

    @bp.get("/experiments")
    def experiments():
        return reports_allowed() or jsonify(service.in_time("experiments",
                                                            service.experiment_status))

    @bp.get("/dashboard")
    def dashboard():
        from reranker.experiments.report import dashboard_page

        refused = reports_allowed()
        if refused:
            return refused
        if service.experiment is None:
            raise NotFoundError("no experiment is configured (experiment.mode is null)")
        return dashboard_page(), 200, {"Content-Type": "text/html; charset=utf-8",
                                       "Cache-Control": "no-store"}

    @bp.get("/openapi.json")
    def openapi():
        from reranker.api.openapi import openapi_document

        # Where the blueprint is mounted (an application may give it a URL prefix).
        base = request.script_root + request.path.removesuffix("/openapi.json")
        return jsonify(openapi_document(service.config, validator.schemas, base or "/"))

    return bp


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


#: The header of a search whose impression is only queued in memory: the event store fails,
#: and its clicks answer 503 until the store takes the queue (``/healthz`` says how many wait).
QUEUED_HEADER = "Reranker-Impression"


def client_address(service: RerankerService) -> str | None:
    """The client's address: the last one in ``security.trusted_proxy_header`` (the one the
    nearest proxy wrote; earlier ones the client may have made up) when that is configured
    and sent, else the connection's."""
    header = service.trust.proxy_header
    if header:
        forwarded = request.headers.get(header, "")
        last = forwarded.rsplit(",", 1)[-1].strip()
        if last:
            return last[:ADDRESS_LIMIT]
    return request.remote_addr


#: Characters of a forwarded address kept (an IPv6 address with a zone fits).
ADDRESS_LIMIT = 64


def api_key_given() -> str | None:
    """The API key the request sends: ``X-API-Key``, else ``Authorization: Bearer KEY``."""
    key = request.headers.get("X-API-Key")
    if key is None:
        scheme, _, rest = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            key = rest.strip()
    return key


def credential_given() -> str | None:
    """An API key or token the request sends: as :func:`api_key_given` reads it, else the
    password of HTTP Basic authentication (what a browser sends after asking)."""
    key = api_key_given()
    if key is None:
        try:
            authorization = request.authorization
        except ValueError:  # a Basic header that is not base64 of ASCII: no credential
            authorization = None
        if authorization is not None and authorization.type == "basic":
            key = authorization.password
    return key


def _json_body(policy: CorsPolicy, max_depth: int) -> Any:
    """The request's JSON body (any JSON value: the schemas say which are accepted), read
    within ``max_depth`` levels of nesting."""
    if request.mimetype == "text/plain":
        _check_text_plain(policy)
    elif not request.is_json:
        raise BadRequestError("the request body must be JSON (Content-Type: application/json)")
    return read_json(request.get_data(), max_depth)


def _check_text_plain(cors: CorsPolicy) -> None:
    """A JSON body sent as ``text/plain``, as the snippet sends its cross-origin clicks
    (a CORS-safelisted type needs no preflight), is accepted only from an origin that
    ``server.cors_origins`` allows, so that other sites cannot post to the service through
    their visitors' browsers."""
    origin = request.headers.get("Origin")
    if cors.allow(origin) is None:
        if origin is not None and len(origin) > ECHO_LIMIT:
            origin = origin[:ECHO_LIMIT - 1] + "\u2026"
        sent = "it sent no Origin header" if origin is None else f"its Origin: {origin!r}"
        raise BadRequestError(f"a text/plain body is only accepted from an origin listed in "
                              f"server.cors_origins (this request: {sent}); send "
                              f"Content-Type: application/json")


def _error(status: int, message: str, field: str | None = None):
    return jsonify(error_body(status, message, field)), status


def error_body(status: int, message: str, field: str | None = None) -> dict[str, Any]:
    """Every error's JSON: ``{"error": {"status", "message"}}``, and ``"field"`` when the
    error is about one request field."""
    error = {"status": status, "message": message}
    if field is not None:
        error["field"] = field
    return {"error": error}


def body_too_large(limit: int | None) -> str:
    """The message of a 413, from the application or from the HTTP server."""
    return f"the request body is larger than {limit} bytes (server.max_body_bytes)"


def _register_errors(app: Flask | Blueprint) -> None:
    @app.errorhandler(RerankerError)
    def project_error(exc: RerankerError):
        if exc.status >= 500:  # the log keeps the details; the client gets the problem
            log.warning("%s", exc.message)
            response = _error(exc.status, redact(exc.message), exc.field)
        else:
            response = _error(exc.status, exc.message, exc.field)
        if isinstance(exc, TooManyRequestsError):
            response[0].headers["Retry-After"] = str(exc.whole_seconds(exc.retry_after))
        elif isinstance(exc, UnauthorizedError):
            response[0].headers["WWW-Authenticate"] = 'Bearer realm="reranker"'
        return response

    @app.errorhandler(RequestEntityTooLarge)
    def too_large(exc: RequestEntityTooLarge):
        return _error(413, body_too_large(request.max_content_length))

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):
        return _error(exc.code or 500, exc.description or exc.name)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception):
        log.exception("unexpected error while answering %s %s", request.method, request.path)
        return _error(500, "internal error; the server log has the details")


#: The endpoints a page on another origin may call, with the methods each one answers.
CORS_ROUTES = {"search": "POST, OPTIONS", "click": "POST, OPTIONS",
               "reward": "POST, OPTIONS", "snippet": "GET, OPTIONS"}
CORS_PATHS = ("/search", "/click", "/reward", "/reranker.js")

SNIPPET_CACHE = "public, max-age=3600"  # the snippet changes only with the package


class CorsPolicy:
    """Which ``Origin`` values may read the answers of :data:`CORS_ROUTES`
    (``server.cors_origins``: origins, ``*`` for any, empty for none)."""

    def __init__(self, origins: tuple[str, ...] | list[str], max_age: int):
        self.any = "*" in origins
        self.origins = frozenset(o.lower() for o in origins if o != "*")
        self.max_age = max_age

    @property
    def enabled(self) -> bool:
        """Whether any origin is allowed (else no CORS header is ever sent)."""
        return self.any or bool(self.origins)

    def allow(self, origin: str | None) -> str | None:
        """The ``Access-Control-Allow-Origin`` value for a request from ``origin``, or
        ``None`` when that origin (or a request without one) is not allowed."""
        if not origin:
            return None
        if self.any:
            return "*"
        return origin if origin.lower() in self.origins else None


def _cors_route() -> str | None:
    """The methods of the CORS endpoint this request is for (under any blueprint name and
    URL prefix), or None."""
    endpoint = (request.endpoint or "").rsplit(".", 1)[-1]
    return CORS_ROUTES.get(endpoint)


def _register_browser(app: Blueprint, policy: CorsPolicy) -> None:
    """``GET /reranker.js`` and the CORS hooks: a preflight ``OPTIONS`` on a CORS route is
    answered 204 at once; every answer of a CORS route (errors too) carries
    ``Access-Control-Allow-Origin`` when the request's origin is allowed. A disallowed
    origin gets no CORS header, so its browser keeps the answer from the page."""

    @app.get("/reranker.js")
    def snippet():
        source, etag = _snippet_source()
        response = current_app.response_class(source, mimetype="application/javascript")
        response.headers["Cache-Control"] = SNIPPET_CACHE
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.set_etag(etag)
        return response.make_conditional(request)

    @app.before_request
    def preflight():
        methods = _cors_route()
        if request.method != "OPTIONS" or methods is None:
            return None
        response = current_app.response_class(status=204)
        del response.headers["Content-Type"]  # no body
        response.headers["Allow"] = methods
        if policy.allow(request.headers.get("Origin")) is not None:
            response.headers["Access-Control-Allow-Methods"] = methods
            response.headers["Access-Control-Allow-Headers"] = "Content-Type"
            response.headers["Access-Control-Max-Age"] = str(policy.max_age)
        return response

    @app.after_request
    def cors_headers(response):
        if policy.enabled and _cors_route() is not None:
            response.vary.add("Origin")
            allowed = policy.allow(request.headers.get("Origin"))
            if allowed is not None:
                response.headers["Access-Control-Allow-Origin"] = allowed
        return response


@functools.lru_cache(maxsize=1)
def _snippet_source() -> tuple[bytes, str]:
    """The snippet's bytes (package data ``reranker/api/static/reranker.js``) and their ETag."""
    source = (resources.files("reranker.api") / "static" / "reranker.js").read_bytes()
    return source, hashlib.sha256(source).hexdigest()[:32]

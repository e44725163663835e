"""The browser side: ``GET /reranker.js`` (the snippet) and CORS, which lets pages on the
origins ``server.cors_origins`` lists call ``/search``, ``/click`` and ``/reward`` (and
``/explain`` with ``server.cors_explain``); a request from any other page's origin is
counted and logged (once a minute per origin)."""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from importlib import resources

from flask import Blueprint, Flask, current_app, request

#: The endpoints a page on another origin may call, with the methods each one answers.
CORS_ROUTES = {"search": "POST, OPTIONS", "click": "POST, OPTIONS",
               "reward": "POST, OPTIONS", "snippet": "GET, OPTIONS"}
CORS_PATHS = ("/search", "/click", "/reward", "/reranker.js")

#: ... and with ``server.cors_explain``.
EXPLAIN_ROUTE = ("explain", "POST, OPTIONS", "/explain")

SNIPPET_CACHE = "public, max-age=3600"  # the snippet changes only with the package
#: Seconds between two log lines about requests from the same refused origin, and how many
#: origins are remembered for it (a flood of made-up origins cannot grow it further).
REFUSAL_LOG_INTERVAL, REFUSAL_LOG_ORIGINS = 60.0, 1000

log = logging.getLogger(__name__)


class CorsPolicy:
    """Which ``Origin`` values may read the answers of the CORS routes
    (``server.cors_origins``: origins, ``*`` for any, empty for none; ``explain``:
    ``server.cors_explain``), and the record of the others (``refused``: a counter by
    endpoint, or None)."""

    def __init__(self, origins: tuple[str, ...] | list[str], max_age: int, *,
                 explain: bool = False, refused=None):
        self.any = "*" in origins
        self.origins = frozenset(o.lower() for o in origins if o != "*")
        self.max_age = max_age
        self.routes = dict(CORS_ROUTES)
        self.paths = CORS_PATHS
        if explain:
            self.routes[EXPLAIN_ROUTE[0]] = EXPLAIN_ROUTE[1]
            self.paths = (*CORS_PATHS, EXPLAIN_ROUTE[2])
        self.refused = refused
        self._logged: dict[str, float] = {}

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

    def add_origin(self, response) -> None:
        """Let the request's origin read ``response``, when it is allowed."""
        response.vary.add("Origin")
        allowed = self.allow(request.headers.get("Origin"))
        if allowed is not None:
            response.headers["Access-Control-Allow-Origin"] = allowed

    def note_refusal(self, endpoint: str) -> None:
        """Count and log (once a minute per origin) a request to ``endpoint`` from a page
        on another origin than the service's own that the policy does not allow: a page
        that tries to call the service and whose browser keeps the answer from it (an
        origin ``server.cors_origins`` lists, too, on an endpoint it does not open to other
        origins: ``/explain`` without ``server.cors_explain``)."""
        origin = request.headers.get("Origin")
        # (the service's own pages: the same host, whatever scheme a proxy in front of it
        # terminates)
        if not origin or origin.lower().partition("://")[2] == request.host.lower():
            return
        listed = self.allow(origin) is not None
        if listed and endpoint in self.routes:
            return
        if self.refused is not None:
            self.refused.labels(endpoint).inc()
        now = time.monotonic()
        key = origin[:200]
        if now - self._logged.get(key, -REFUSAL_LOG_INTERVAL) < REFUSAL_LOG_INTERVAL:
            return
        if len(self._logged) >= REFUSAL_LOG_ORIGINS:
            self._logged.clear()
        self._logged[key] = now
        if listed:
            log.warning("a page on %r called %s %s, which server.cors_explain does not open "
                        "to other origins: its browser keeps the answer from it (set it to "
                        "true to allow it; logged once a minute per origin)", key,
                        request.method, request.path)
            return
        log.warning("a page on %r called %s %s, and server.cors_origins does not list that "
                    "origin: its browser keeps the answer from it (add the origin to allow "
                    "it; logged once a minute per origin)", key, request.method, request.path)


def _endpoint() -> str:
    """The name of the endpoint this request is for, under any blueprint name."""
    return (request.endpoint or "").rsplit(".", 1)[-1]


def register(bp: Blueprint, policy: CorsPolicy) -> None:
    """``GET /reranker.js`` and the CORS hooks: a preflight ``OPTIONS`` on a CORS route is
    answered 204 at once; every answer of a CORS route (errors too) carries
    ``Access-Control-Allow-Origin`` when the request's origin is allowed. A disallowed
    origin gets no CORS header, so its browser keeps the answer from the page."""

    @bp.get("/reranker.js")
    def snippet():
        source, etag = _snippet_source()
        response = current_app.response_class(source, mimetype="application/javascript")
        response.headers["Cache-Control"] = SNIPPET_CACHE
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.set_etag(etag)
        return response.make_conditional(request)

    @bp.before_request
    def preflight():
        methods = policy.routes.get(_endpoint())
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

    @bp.after_request
    def cors_headers(response):
        endpoint = _endpoint()
        if endpoint in policy.routes:
            if policy.enabled:
                policy.add_origin(response)
            policy.note_refusal(endpoint)
        elif endpoint == EXPLAIN_ROUTE[0]:  # (closed to other origins: counted as refused)
            policy.note_refusal(endpoint)
        return response


def register_routing_errors(app: Flask, policy: CorsPolicy) -> None:
    """CORS on the app's own answers for the CORS paths: a wrong method on a CORS route never
    reaches the blueprint, and its page still reads why."""

    @app.after_request
    def cors_on_routing_errors(response):
        if request.url_rule is None and policy.enabled and request.path in policy.paths:
            policy.add_origin(response)
        return response


@functools.lru_cache(maxsize=1)
def _snippet_source() -> tuple[bytes, str]:
    """The snippet's bytes (package data ``reranker/api/static/reranker.js``) and their ETag."""
    source = (resources.files("reranker.api") / "static" / "reranker.js").read_bytes()
    return source, hashlib.sha256(source).hexdigest()[:32]

"""What every route does around the service: the body limit, the timing and the access line
of each request (:meth:`RequestGate.register`), and what a route asks of a request before
the service sees it: its JSON body, read within the limits and checked against its schema,
its API key, and its client's rate limits."""

from __future__ import annotations

import logging
import time
from typing import Any

from flask import Blueprint, g, request

from reranker.api.browser import CorsPolicy
from reranker.api.validation import RequestValidator, read_json
from reranker.core.errors import ECHO_LIMIT, BadRequestError, UnauthorizedError
from reranker.serving.service import RerankerService
from reranker.serving.trust import client_key, rejection

access = logging.getLogger("reranker.access")  # one line per request

#: Characters of a forwarded address kept (an IPv6 address with a zone fits).
ADDRESS_LIMIT = 64


class RequestGate:
    """The checks a request of ``service``'s blueprint passes, shared by its route groups;
    ``policy`` says which origins may send a ``text/plain`` body."""

    def __init__(self, service: RerankerService, policy: CorsPolicy):
        self.service = service
        self.policy = policy
        self.limits = service.config.server
        self.validator = RequestValidator(service.config)

    def register(self, bp: Blueprint) -> None:
        """The blueprint's own body limit, and each request's duration in the metrics and
        its line in the access log."""
        service, limits = self.service, self.limits

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
                                   "status": response.status_code,
                                   "ms": round(seconds * 1000, 2)})
            return response

    def body(self) -> Any:
        """The request's JSON body (any JSON value: the schemas say which are accepted), read
        within ``server.max_json_depth`` levels of nesting."""
        if request.mimetype == "text/plain":
            _check_text_plain(self.policy)
        elif not request.is_json:
            raise BadRequestError("the request body must be JSON (Content-Type: "
                                  "application/json)")
        return read_json(request.get_data(), self.limits.max_json_depth)

    def json_body(self, schema: str) -> dict[str, Any]:
        """The request's JSON body, checked against ``schema``."""
        body = self.body()
        self.validator.check(schema, body)
        return body

    def require_api_key(self, endpoint: str) -> None:
        """Refuse (401) a request without a valid API key (``security.api_keys_env``): the
        application's server calls these endpoints, not browsers."""
        trust = self.service.trust
        with trust.counting(endpoint):
            if not trust.api_key_ok(api_key_given()):
                raise rejection(UnauthorizedError(
                    "a valid API key is required: send it in the X-API-Key header (or "
                    "Authorization: Bearer KEY)", field="X-API-Key"), "unauthorized")

    def limit(self, endpoint: str, body: dict[str, Any], address: str | None) -> None:
        """Count the request against its client's and its address's rate limits."""
        client = client_key(body.get("user_id"), body.get("session_id"), address)
        with self.service.trust.counting(endpoint):
            self.service.trust.limit("search" if endpoint == "search" else "click", client,
                                     address)

    def client_address(self) -> str | None:
        return client_address(self.service)


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

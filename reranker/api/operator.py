"""The operator's endpoints: ``GET /healthz`` and ``/readyz`` (the probes), ``GET /metrics``
(Prometheus), ``POST /explain`` (why a page is ranked as it is), ``GET /experiments`` and
``/dashboard`` (an experiment's results, as ``security.reports_access`` allows) and
``GET /openapi.json`` (the API's description)."""

from __future__ import annotations

import hmac
from typing import Any

from flask import Blueprint, current_app, jsonify, request

from reranker.api.errors import error_response
from reranker.api.gate import RequestGate, credential_given
from reranker.core.errors import BadRequestError, NotFoundError
from reranker.serving.monitoring import redact_all
from reranker.serving.trust import reports_access


def register(bp: Blueprint, gate: RequestGate) -> None:
    service = gate.service
    reports = reports_access(service.config)

    def reports_allowed() -> Any:
        """None when the request may read the experiment's results
        (``security.reports_access``), else the 401 to answer: with a Basic challenge, so
        that a browser opening the dashboard asks for the token or key as a password."""
        if service.trust.reports_ok(reports, credential_given(),
                                    service.config.server.admin_token):
            return None
        what = ("the operator's token (server.admin_token)" if reports == "operator" else
                "an API key (or the operator's token)")
        body, status = error_response(
            401, f"the experiment's results need {what}: send it as 'Authorization: Bearer "
                 f"...', or as the password of HTTP Basic authentication "
                 f"(security.reports_access: {reports})", field="Authorization")
        body.headers["WWW-Authenticate"] = 'Basic realm="reranker experiments", charset="UTF-8"'
        return body, status

    @bp.post("/explain")
    def explain():
        from reranker.serving.explain import explain_impression, explain_search

        gate.require_api_key("explain")
        body = gate.body()
        # Either of two bodies: the one with an impression_id explains that page.
        if isinstance(body, dict) and "impression_id" in body:
            gate.validator.check("explain_impression", body)
            return jsonify(service.in_time("explain", explain_impression, service,
                                           body.get("impression_id")))
        gate.validator.check("explain_search", body)
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
                return error_response(401, "the operator view needs 'Authorization: Bearer "
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
        return jsonify(openapi_document(service.config, gate.validator.schemas, base or "/"))

"""The operator's endpoints: ``GET /healthz`` and ``/readyz`` (the probes), ``GET /metrics``
(Prometheus), ``POST /explain`` (why a page is ranked as it is), the reports, as
``security.reports_access`` allows: ``GET /experiments`` and ``/dashboard`` (an
experiment's results), ``GET /analytics`` and ``/dashboard/analytics`` (what users searched
and clicked), ``GET /compare`` and ``/compare.json`` (one query's rankings side by side);
and ``GET /openapi.json`` (the API's description)."""

from __future__ import annotations

import hmac
from importlib import resources
from typing import Any

from flask import Blueprint, current_app, jsonify, request

from reranker.api.errors import error_response
from reranker.api.gate import RequestGate, credential_given
from reranker.core.errors import BadRequestError, NotFoundError, shorten
from reranker.core.suggest import did_you_mean
from reranker.serving.monitoring import redact_all
from reranker.serving.trust import reports_access

#: The headers of a dashboard page.
PAGE_HEADERS = {"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"}


def _page(name: str) -> tuple[str, int, dict[str, str]]:
    """A report page of :mod:`reranker.api.static`, self-contained: what the report pages
    share, ``reports.css`` and ``reports.js``, is inlined where the page names it in a
    comment (``/* reports.css */``). The page fetches its data from the JSON endpoint beside
    it."""
    static = resources.files("reranker.api.static")
    text = static.joinpath(name).read_text(encoding="utf-8")
    for shared in ("reports.css", "reports.js"):
        text = text.replace(f"/* {shared} */",
                            static.joinpath(shared).read_text(encoding="utf-8"), 1)
    return text, 200, PAGE_HEADERS


def known_parameters(*names: str) -> None:
    """Refuse (400, naming it) a query-string parameter the endpoint does not take."""
    for name in request.args:
        if name not in names:
            starts = [n for n in names if n.startswith(name)] if name else []
            hint = f"; did you mean {starts[0]!r}?" if len(starts) == 1 \
                else did_you_mean(name, names)
            raise BadRequestError(f"unknown parameter {name[:100]!r}{hint} (known: "
                                  f"{', '.join(names)})", field=name)


def register(bp: Blueprint, gate: RequestGate) -> None:
    service = gate.service
    reports = reports_access(service.config)

    def reports_allowed(what: str = "the experiment's results") -> Any:
        """None when the request may read the reports (``security.reports_access``), else
        the 401 to answer, saying that ``what`` needs the credential: with a Basic
        challenge, so that a browser opening a dashboard asks for the token or key as a
        password."""
        if service.trust.reports_ok(reports, credential_given(),
                                    service.config.server.admin_token):
            return None
        needed = ("the operator's token (server.admin_token)" if reports == "operator" else
                  "an API key (or the operator's token)")
        body, status = error_response(
            401, f"reading {what} needs {needed}: send it as 'Authorization: Bearer ...', or "
                 f"as the password of HTTP Basic authentication (security.reports_access: "
                 f"{reports})", field="Authorization")
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
        return dashboard_page(), 200, PAGE_HEADERS

    @bp.get("/analytics")
    def analytics():
        from reranker.evaluation.analytics import arm_names, check_window, search_analytics

        refused = reports_allowed("the search analytics")
        if refused:
            return refused
        known_parameters("days", "top", "arm")
        days, top = check_window(request.args.get("days"), request.args.get("top"))
        arm = request.args.get("arm") or None
        arms = arm_names(service.arms, arm)
        return jsonify(service.in_time(
            "analytics", lambda: search_analytics(service.events, days, arms=arms, arm=arm,
                                                  top=top).to_dict()))

    @bp.get("/dashboard/analytics")
    def analytics_dashboard():
        return reports_allowed("the search analytics") or _page("analytics.html")

    @bp.get("/compare.json")
    def compare_json():
        from reranker.serving.compare import compare_search

        refused = reports_allowed("the side-by-side comparison")
        if refused:
            return refused
        known_parameters("query", "size")
        query = request.args.get("query")  # (checked as a search's: check_search)
        size = request.args.get("size")
        if size is not None:
            try:
                size = int(size)
            except ValueError:
                raise BadRequestError(f"'size' must be an integer, got {shorten(size)}",
                                      field="size") from None
        return jsonify(service.in_time("compare", compare_search, service, query, size))

    @bp.get("/compare")
    def compare():
        return reports_allowed("the side-by-side comparison") or _page("compare.html")

    @bp.get("/openapi.json")
    def openapi():
        from reranker.api.openapi import openapi_document

        # Where the blueprint is mounted (an application may give it a URL prefix).
        base = request.script_root + request.path.removesuffix("/openapi.json")
        return jsonify(openapi_document(service.config, gate.validator.schemas, base or "/"))

"""``GET /openapi.json``: an OpenAPI 3.1 description of every endpoint of the HTTP API.

The request bodies are the very schemas the service validates with
(:func:`reranker.api.validation.request_schemas`), built from the same configuration, so the
document states the limits in force (``size`` up to ``server.max_size``, ...). A test checks
that every route the app registers is described here.
"""

from __future__ import annotations

from typing import Any

from reranker import __version__
from reranker.api.validation import ERROR_SCHEMA
from reranker.core.config import Config
from reranker.evaluation.analytics import MAX_DAYS, MAX_TOP
from reranker.serving.trust import reports_access

#: When each error status is answered, as docs/reference/http-api.md ("Errors") says.
ERROR_STATUSES = {
    400: "the body is not JSON or not an object, nests too deep, or a field is missing, "
         "unknown, of the wrong type or out of bounds (`field` names it)",
    401: "no valid API key (security.api_keys_env): send X-API-Key; or, for the operator view "
         "of /healthz, no 'Authorization: Bearer <server.admin_token>'; or, for the reports "
         "(/experiments, /analytics, /compare and their pages), not the token or key "
         "security.reports_access asks for",
    403: "an impression_id that is forged, or served to another user_id or session_id",
    404: "an unknown impression_id",
    409: "the impression no longer accepts clicks or rewards (its feedback window passed)",
    410: "an impression_id older than security.impression_ttl; for /explain, an impression "
         "whose features retention dropped (store.retention)",
    413: "the body is larger than server.max_body_bytes",
    422: "a doc_id that was not shown in that impression",
    429: "the client is over a limit of the security section (Retry-After says when to "
         "retry)",
    502: "Elasticsearch refused the search",
    503: "the search backend or the event store cannot answer",
}

_HIT = {"type": "object", "required": ["id", "rank", "score"], "properties": {
    "id": {"type": "string"},
    "rank": {"type": "integer", "minimum": 1, "description": "rank in the whole ranking"},
    "score": {"type": ["number", "null"], "description": "the ranking's score, on one scale "
              "for every page of a search: higher ranks score at least as high, except the "
              "hits marked randomised or pinned"},
    "randomised": {"const": True, "description": "shown swapped with its neighbour, out of "
                   "the order of the scores, so that clicks compare the two"},
    "pinned": {"const": True, "description": "shown at the rank a query rule gives it"},
    "source": {"type": "object", "description": "the stored document, or the fields the "
               "search's source asked for (absent with source: false)"},
    "highlight": {"type": "object", "description": "per text field the search's highlight "
                  "named and the query matched, its highlighted fragments (HTML-escaped)",
                  "additionalProperties": {"type": "array", "items": {"type": "string"}}},
}}

_QUERY = {"type": "object", "required": ["query"], "properties": {
    "query": {"type": "string", "description": "the normalised query"},
    **{name: {"type": "integer", "minimum": 0}
       for name in ("searches", "pages", "clicks", "no_result", "no_click")},
    **{name: {"type": ["number", "null"]} for name in ("ctr", "mean_click_rank", "moved")},
}}

RESPONSE_SCHEMAS: dict[str, dict[str, Any]] = {
    "SearchAnswer": {"type": "object", "required": ["impression_id", "learner",
                                                    "model_version", "total", "from", "hits"],
                     "properties": {
                         "impression_id": {"type": "string",
                                           "description": "report clicks against it"},
                         "learner": {"type": "string"},
                         "model_version": {"type": ["integer", "null"]},
                         "total": {"type": "integer",
                                   "description": "documents matching query and filters"},
                         "from": {"type": "integer"},
                         "hits": {"type": "array", "items": _HIT},
                         "facets": {"type": "object", "additionalProperties": {
                             "type": "object", "description": "per value or range, its "
                             "count; for stats: count, min, max (sum and avg on a number)",
                             "additionalProperties": {
                                 "type": ["integer", "number", "string", "null"]}}},
                         "aggregations": {"type": "object"},
                         "experiment": {"type": ["string", "null"]},
                         "arm": {"type": ["string", "null"]}}},
    "ClickAnswer": {"type": "object", "required": ["accepted", "impression_id", "doc_id",
                                                   "position", "duplicate"],
                    "properties": {"accepted": {"const": True},
                                   "impression_id": {"type": "string"},
                                   "doc_id": {"type": "string"},
                                   "position": {"type": "integer", "minimum": 1},
                                   "duplicate": {"type": "boolean"}}},
    "ClicksAnswer": {"type": "object", "required": ["accepted", "refused", "results"],
                     "properties": {
                         "accepted": {"type": "integer", "minimum": 0},
                         "refused": {"type": "integer", "minimum": 0},
                         "results": {"type": "array", "description": "per click, in order: "
                                     "what /click would have answered (its 202 body, or the "
                                     "error's)", "items": {"type": "object"}}}},
    "RewardAnswer": {"type": "object", "required": ["accepted", "impression_id", "value",
                                                    "replaced"],
                     "properties": {"accepted": {"const": True},
                                    "impression_id": {"type": "string"},
                                    "value": {"type": "number"},
                                    "replaced": {"type": ["number", "null"]}}},
    "Explanation": {"type": "object", "required": ["learner", "hits"],
                    "description": "for a search: the model's weights and each hit's "
                                   "features, scores and parts; for an impression: the page "
                                   "as shown and what its clicks taught (`training`)",
                    "properties": {"learner": {"type": "string"},
                                   "weights": {"type": "object"},
                                   "hits": {"type": "array"},
                                   "training": {"type": "object"}}},
    "Health": {"type": "object", "required": ["status", "problems"],
               "properties": {"status": {"enum": ["ok", "degraded"]},
                              "problems": {"type": "array", "items": {"type": "string"}},
                              "learner": {"type": "string"},
                              "model_version": {"type": "integer"},
                              "backend": {"type": "object"},
                              "trainer": {"type": "object"},
                              "events": {"type": "object"}}},
    "Ready": {"type": "object", "required": ["status", "problems"],
              "properties": {"status": {"enum": ["ok", "unavailable"]},
                             "problems": {"type": "array", "items": {"type": "string"}}}},
    "Experiment": {"type": "object", "required": ["experiment", "mode", "arms"],
                   "properties": {"experiment": {"type": "string"},
                                  "mode": {"type": "string"},
                                  "arms": {"type": "object"},
                                  "pairs": {"type": "array"},
                                  "report": {"type": "object"}}},
    "Analytics": {"type": "object", "required": ["since", "until", "days", "totals",
                                                 "top_queries", "click_ranks"],
                  "description": "what users searched and clicked in the window; each list "
                                 "holds queries with their figures (docs/how-to/"
                                 "search-analytics.md)",
                  "properties": {"since": {"type": "string"}, "until": {"type": "string"},
                                 "days": {"type": "number"},
                                 "arm": {"type": ["string", "null"]},
                                 "top": {"type": "integer"},
                                 "moved_depth": {"type": "integer"},
                                 "totals": {"type": "object"},
                                 "top_queries": {"type": "array", "items": _QUERY},
                                 "no_result": {"type": "array", "items": _QUERY},
                                 "no_click": {"type": "array", "items": _QUERY},
                                 "moved": {"type": "array", "items": _QUERY},
                                 "click_ranks": {"type": "array", "items": {
                                     "type": "object", "properties": {
                                         "rank": {"type": "integer", "minimum": 1},
                                         "clicks": {"type": "integer", "minimum": 0}}}}}},
    "Comparison": {"type": "object", "required": ["query", "size", "features", "columns"],
                   "description": "the engine's order, then each arm's, each a column of its "
                                  "top hits; a hit's ranks are its rank in every column, in "
                                  "their order (null below a column's top)",
                   "properties": {"query": {"type": "string"},
                                  "size": {"type": "integer"},
                                  "candidates": {"type": "integer"},
                                  "total": {"type": ["integer", "null"]},
                                  "features": {"type": "array", "items": {"type": "string"}},
                                  "columns": {"type": "array", "items": {
                                      "type": "object", "properties": {
                                          "label": {"type": "string"},
                                          "learner": {"type": ["string", "null"]},
                                          "model_version": {"type": ["integer", "null"]},
                                          "hits": {"type": "array"}}}}}},
}

#: Request schema name -> its name among the document's components.
REQUEST_COMPONENTS = {"search": "SearchRequest", "click": "ClickRequest",
                      "clicks": "ClicksRequest",
                      "reward": "RewardRequest", "explain_search": "ExplainSearchRequest",
                      "explain_impression": "ExplainImpressionRequest"}


#: The reports: what ``security.reports_access`` guards.
REPORT_PATHS = ("/experiments", "/dashboard", "/analytics", "/dashboard/analytics", "/compare",
                "/compare.json")

#: The endpoints that ask for an API key when ``security.api_keys_env`` is set.
KEYED_PATHS = ("/search", "/explain", "/clicks")

SECURITY_SCHEMES = {
    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key",
               "description": "one of the keys in the environment variable that "
                              "security.api_keys_env names"},
    "apiKeyBearer": {"type": "http", "scheme": "bearer",
                     "description": "the same API key as Authorization: Bearer KEY"},
    "adminToken": {"type": "http", "scheme": "bearer",
                   "description": "server.admin_token: the operator view, "
                                  "/healthz?detail=1"},
    "reportsBasic": {"type": "http", "scheme": "basic",
                     "description": "the reports (security.reports_access): "
                                    "any user name, the operator's token or an API key as "
                                    "the password"},
}


def openapi_document(config: Config, schemas: dict[str, dict[str, Any]],
                     base: str = "/") -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API served under ``base`` (a blueprint's URL prefix),
    with ``schemas`` (:func:`reranker.api.validation.request_schemas` of ``config``) as its
    request bodies."""
    paths = {
        "/search": {"post": _operation(
            "search", "Rank the engine's candidates for a query; log the page",
            _body("search"), _json(200, "the page", "SearchAnswer"), 400, 401, 413, 429, 502,
            503)},
        "/click": {"post": _operation(
            "click", "Report a click on a hit of a page; durable when answered",
            _body("click"), _json(202, "the click is recorded", "ClickAnswer"),
            400, 403, 404, 409, 410, 413, 422, 429, 503)},
        "/clicks": {"post": _operation(
            "clicks", "Report many clicks at once (an application's server forwarding its "
            "users'): each is checked and refused alone, all durable when answered",
            _body("clicks"), _json(200, "each click's outcome, in order", "ClicksAnswer"),
            400, 401, 413, 503)},
        "/reward": {"post": _operation(
            "reward", "Report the application's reward for a page (for eels)",
            _body("reward"), _json(202, "the reward is recorded", "RewardAnswer"),
            400, 403, 404, 409, 410, 413, 429, 503)},
        "/explain": {"post": _operation(
            "explain", "Explain a search (not logged) or a logged page",
            _body("explain_search", "explain_impression"),
            _json(200, "the explanation", "Explanation"), 400, 401, 403, 404, 410, 413, 502, 503)},
        "/healthz": {"get": {**_operation(
            "health", "State of the backend, models, trainer and event store (internal "
            "paths and URLs left out; the operator view has them)", None,
            _json(200, "the state; status degraded names the problems", "Health"), 400, 401),
            "parameters": [{"name": "detail", "in": "query", "required": False,
                            "description": "1: the operator view (needs the admin token)",
                            "schema": {"enum": ["0", "1"]}}]}},
        "/readyz": {"get": _operation(
            "ready", "Readiness: the backend answers and the event store takes a write", None,
            {**_json(200, "ready", "Ready"),
             "503": {"description": "not ready; problems names what failed",
                     "content": {"application/json": {
                         "schema": {"$ref": "#/components/schemas/Ready"}}}}})},
        "/metrics": {"get": _operation(
            "metrics", "Metrics in the Prometheus text format", None,
            {"200": {"description": "request latencies, clicks by outcome, model versions, "
                     "trainer lag, backend errors, learner fallbacks",
                     "content": {"text/plain": {"schema": {"type": "string"}}}}})},
        "/experiments": {"get": _operation(
            "experiments", "The experiment's results", None,
            _json(200, "the results", "Experiment"), 401, 404)},
        "/dashboard": {"get": _operation(
            "dashboard", "A page showing the experiment's results live", None, _html(),
            401, 404)},
        "/analytics": {"get": {**_operation(
            "analytics", "What users searched and where they clicked, from the event store",
            None, _json(200, "the figures of the window", "Analytics"), 400, 401, 503),
            "parameters": [
                _query("days", "the window: pages of the last days (default 7)",
                       {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_DAYS}),
                _query("top", "queries per list (default 20)",
                       {"type": "integer", "minimum": 1, "maximum": MAX_TOP}),
                _query("arm", "only the pages this arm (label) showed alone",
                       {"type": "string"})]}},
        "/dashboard/analytics": {"get": _operation(
            "analytics_dashboard", "A page of the search analytics, with the clicks by rank",
            None, _html(), 401)},
        "/compare.json": {"get": {**_operation(
            "compare", "One query's candidates in the engine's order and each arm's, with "
            "their features; not logged", None,
            _json(200, "the rankings side by side", "Comparison"), 400, 401, 502, 503),
            "parameters": [
                _query("query", "the query", {"type": "string"}, required=True),
                _query("size", "results per ranking (default server.default_size)",
                       {"type": "integer", "minimum": 1, "maximum": config.server.max_size})]}},
        "/compare": {"get": {**_operation(
            "compare_page", "A page showing one query's rankings side by side", None,
            _html(), 401),
            "parameters": [_query("q", "the query", {"type": "string"})]}},
        "/reranker.js": {"get": _operation(
            "snippet", "The browser script that sends searches and reports clicks", None,
            {"200": {"description": "the script (cached for an hour, with an ETag)",
                     "content": {"application/javascript": {"schema": {"type": "string"}}}},
             "304": {"description": "the script did not change (If-None-Match)"}})},
        "/openapi.json": {"get": _operation(
            "openapi", "This document", None,
            {"200": {"description": "the OpenAPI document",
                     "content": {"application/json": {"schema": {"type": "object"}}}}})},
    }
    # Who may call what: with security.api_keys_env, the application's servers' key on the
    # endpoints it guards; the operator's token for /healthz?detail=1 (optional otherwise).
    if config.security.api_keys_env:
        for path in KEYED_PATHS:
            paths[path]["post"]["security"] = [{"apiKey": []}, {"apiKeyBearer": []}]
    paths["/healthz"]["get"]["security"] = [{}, {"adminToken": []}]
    access = reports_access(config)
    if access != "public":
        keys = [{"apiKey": []}, {"apiKeyBearer": []}] if access == "api_key" else []
        for path in REPORT_PATHS:
            paths[path]["get"]["security"] = [{"adminToken": []}, *keys, {"reportsBasic": []}]
    components = {"Error": ERROR_SCHEMA, **RESPONSE_SCHEMAS}
    components.update({REQUEST_COMPONENTS[name]: schema for name, schema in schemas.items()})
    limits = config.server
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "reranker", "version": __version__,
            "description": (
                "Learning to rank from clicks. Every error is JSON "
                '`{"error": {"status", "message", "field"}}` (`field` when one request field '
                f"is at fault). Limits: a body of at most {limits.max_body_bytes} bytes "
                f"nesting at most {limits.max_json_depth} levels; a query of at most "
                f"{limits.max_query_bytes} bytes and {limits.max_query_terms} words. "
                "Pages listed in server.cors_origins may call /search, /click and /reward "
                "from the browser (CORS)."),
        },
        "servers": [{"url": base}],
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": SECURITY_SCHEMES},
    }


def _operation(operation_id: str, summary: str, body: dict[str, Any] | None,
               answer: dict[str, Any], *errors: int) -> dict[str, Any]:
    operation: dict[str, Any] = {"operationId": operation_id, "summary": summary}
    if body is not None:
        operation["requestBody"] = body
    error = {"$ref": "#/components/schemas/Error"}
    operation["responses"] = {**answer, **{
        str(status): {"description": ERROR_STATUSES[status],
                      "content": {"application/json": {"schema": error}}}
        for status in errors}}
    return operation


def _html() -> dict[str, Any]:
    return {"200": {"description": "the page",
                    "content": {"text/html": {"schema": {"type": "string"}}}}}


def _query(name: str, description: str, schema: dict[str, Any], *,
           required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "description": description,
            "schema": schema}


def _body(*names: str) -> dict[str, Any]:
    refs = [{"$ref": f"#/components/schemas/{REQUEST_COMPONENTS[name]}"} for name in names]
    schema = refs[0] if len(refs) == 1 else {"oneOf": refs}
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _json(status: int, description: str, component: str) -> dict[str, Any]:
    return {str(status): {"description": description, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{component}"}}}}}

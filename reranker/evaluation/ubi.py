"""The event log in the User Behavior Insights (UBI) schema, version 1.3: each logged page as
a UBI *query* (``ubi_queries``), its clicks, and optionally each shown result, as UBI
*events* (``ubi_events``), for the tools that read UBI: OpenSearch's dashboards and its
Search Relevance Workbench (whose implicit judgments count ``impression`` and ``click``
events by position), or a team's own analysis.

A query's ``query_id`` is the impression id (and its ``query_response_id``), its
``query_response_hit_ids`` the shown results in order, and its ``query_attributes`` what
only reranker knows: the arm, learner and model version that ranked the page, the rank of
its first result, and the randomised pairs with their swap probability (what makes the
clicks usable without position bias). An event's ``event_attributes.position.ordinal`` is
the rank the result was shown at, counted from the ranking's top (a later page continues
its first page's ranks). A click event carries the time of its page (the store keeps the
page's time with every click it counts).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from reranker.stores.base import closed_pages
from reranker.stores.events import Impression

#: The UBI specification these records follow.
UBI_VERSION = "1.3.0"
#: The UBI indices (``ubi_queries``, ``ubi_events``), as OpenSearch's UBI plugin names them.
QUERIES_INDEX, EVENTS_INDEX = "ubi_queries", "ubi_events"
#: UBI bounds these identifiers' length.
MAX_ID = 100
CLIENT_PARTS = "\x1f"  # (serving.trust: a client id's parts; the first names the client)


def _moment(unix: float) -> str:
    """ISO 8601 date and time in UTC, with the trailing ``Z`` OpenSearch requires."""
    return datetime.fromtimestamp(unix, tz=timezone.utc).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def _client(imp: Impression) -> dict[str, str]:
    """``client_id``, and ``session_id`` or ``user_id``, of the page's logged client."""
    who = (imp.user_id or "").split(CLIENT_PARTS)[0]
    if not who:
        return {"client_id": "anonymous"}
    out = {"client_id": who[:MAX_ID]}
    if who.startswith("session:"):
        out["session_id"] = who[len("session:"):][:MAX_ID]
    elif not who.startswith("address:"):
        out["user_id"] = who[:MAX_ID]
    return out


def _json_safe(value: Any) -> Any:
    """``value`` as JSON holds it (a learner's context may hold numpy numbers)."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist() if hasattr(
        v, "tolist") else str(v)))


def ubi_query(imp: Impression, application: str) -> dict[str, Any]:
    """The UBI query of one logged page."""
    attributes: dict[str, Any] = {"arm": imp.arm, "learner": imp.learner,
                                  "model_version": imp.model_version, "offset": imp.offset,
                                  "experiment": imp.experiment}
    if imp.context:
        attributes["reranker"] = _json_safe(imp.context)
    return {"application": application, "query_id": imp.id, **_client(imp),
            "user_query": imp.query, "query_attributes": attributes,
            "object_id_field": "id", "timestamp": _moment(imp.created),
            "query_response_id": imp.id, "query_response_hit_ids": imp.shown_ids()}


def ubi_events(imp: Impression, application: str, impressions: bool = True
               ) -> Iterator[dict[str, Any]]:
    """The UBI events of one logged page: an ``impression`` per shown result (with
    ``impressions``), then a ``click`` per clicked one."""
    clicked = set(imp.clicked or ())
    client = _client(imp)
    moment = _moment(imp.created)
    for i, doc_id in enumerate(imp.shown_ids()):
        kinds = (["impression"] if impressions else []) + (["click"] if doc_id in clicked
                                                             else [])
        for action in kinds:
            yield {"application": application, "action_name": action, "query_id": imp.id,
                   **client, "timestamp": moment,
                   "message_type": "CLICK" if action == "click" else "IMPRESSION",
                   "event_attributes": {
                       "object": {"object_id": doc_id, "object_id_field": "id"},
                       "position": {"ordinal": imp.offset + i + 1}}}


def ubi_records(events, since: float = 0.0, arms: tuple[str, ...] | None = None, *,
                application: str = "reranker", impressions: bool = True
                ) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(index, record)`` for every closed page logged at ``since`` or later (optionally of
    ``arms`` only): its query into :data:`QUERIES_INDEX`, its events into
    :data:`EVENTS_INDEX`."""
    for imp in closed_pages(events, since, arms):
        yield QUERIES_INDEX, ubi_query(imp, application)
        for event in ubi_events(imp, application, impressions):
            yield EVENTS_INDEX, event

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

The other way (:func:`import_ubi`): the UBI queries and click events a site already collects
become pages with clicks in the event store, for the click features, analytics and
judgments; no learner updates its model from them, since nothing on them was randomised.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from reranker.core.errors import NotFoundError
from reranker.core.times import parse_time
from reranker.models.budget import CLIENT_PARTS
from reranker.stores.base import closed_pages
from reranker.stores.events import Impression

#: The UBI specification these records follow.
UBI_VERSION = "1.3.0"
#: The UBI indices (``ubi_queries``, ``ubi_events``), as OpenSearch's UBI plugin names them.
QUERIES_INDEX, EVENTS_INDEX = "ubi_queries", "ubi_events"
#: UBI bounds these identifiers' length.
MAX_ID = 100


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


# -- in: UBI a site already collects ---------------------------------------------------------

#: The event actions counted as clicks by default.
CLICK_ACTIONS = ("click", "click_through")
#: The learner label of an imported page (``Impression.learner``).
IMPORTED = "ubi"
#: Pages logged between two writes of their clicks.
IMPORT_BATCH = 100


@dataclass
class ImportReport:
    """What :func:`import_ubi` did."""

    pages: int = 0  # UBI queries logged as pages
    clicks: int = 0  # click events recorded
    known: int = 0  # queries imported before (skipped)
    no_results: int = 0  # queries without query_response_hit_ids (skipped)
    not_shown: int = 0  # click events on a result the query did not show (skipped)
    orphans: int = 0  # click events of a query id not among the queries (skipped)
    refused: int = 0  # clicks the store refused (a page already closed, say)
    later_pages: int = 0  # queries of a second or later page (skipped)
    bad: list[str] = field(default_factory=list)  # records that are not UBI, by where


def click_events(events: Iterable[tuple[str, Any]], actions: Sequence[str], report: ImportReport
                 ) -> dict[str, list[tuple[str, int | None, float]]]:
    """The click events by query id: ``(object id, ordinal or None, time)``; an event that
    is not a UBI event is named in ``report.bad``."""
    out: dict[str, list[tuple[str, int | None, float]]] = defaultdict(list)
    for where, event in events:
        try:
            if not isinstance(event, dict) or not isinstance(event.get("action_name"), str):
                raise ValueError(f"{where}: not a UBI event (no 'action_name')")
            if event["action_name"] not in actions:
                continue
            attributes = event.get("event_attributes") or {}
            target = (attributes.get("object") or {}).get("object_id")
            if not isinstance(event.get("query_id"), str) or not isinstance(target, str | int):
                raise ValueError(f"{where}: a click event needs 'query_id' and "
                                 f"event_attributes.object.object_id")
            ordinal = (attributes.get("position") or {}).get("ordinal")
            moment = parse_time(event.get("timestamp"), f"{where}: 'timestamp'", ValueError)
        except ValueError as exc:
            report.bad.append(str(exc))
            continue
        out[event["query_id"]].append((str(target), ordinal if isinstance(ordinal, int)
                                       else None, moment))
    return out


def import_ubi(store, queries: Iterable[tuple[str, Any]],
               events: Iterable[tuple[str, Any]], feature_names: Sequence[str], *,
               actions: Sequence[str] = CLICK_ACTIONS) -> ImportReport:
    """Log each UBI query with results (``query_response_hit_ids``) as a page of ``store``
    (id ``ubi:<query_id>``, its time, query, client, the results as shown) and its click
    events as its clicks, so that they count in the click features and the judgments as
    the service's own pages do. A UBI page has no randomised pairs and no features (its
    rows are zeros), and it is no arm's page (``arm`` None, no arms in its context), so no
    learner updates from it (:meth:`reranker.models.arm_feedback.ArmFeedback.takes`): an
    update from clicks on an order that was never randomised would learn the position
    bias. Queries imported before are skipped, so a file imported twice counts once; so are
    later pages (``query_attributes.offset`` above 0), whose ranks do not start at 1."""
    report = ImportReport()
    clicks_of = click_events(events, actions, report)
    seen: set[str] = set()
    pending: list[tuple[str, str, float]] = []
    width = len(feature_names)

    def write_clicks() -> None:
        store.flush()
        for outcome in store.record_clicks(pending):
            if isinstance(outcome, Exception):
                report.refused += 1
            elif not outcome.duplicate:
                report.clicks += 1
        pending.clear()

    for where, query in queries:
        try:
            if not isinstance(query, dict) or not isinstance(query.get("user_query"), str):
                raise ValueError(f"{where}: not a UBI query (no 'user_query')")
            query_id = query.get("query_id")
            if not isinstance(query_id, str) or not query_id:
                raise ValueError(f"{where}: a UBI query needs its 'query_id' to be imported")
            created = parse_time(query.get("timestamp"), f"{where}: 'timestamp'", ValueError)
            hits = query.get("query_response_hit_ids")
            if hits is not None and (not isinstance(hits, list) or not all(
                    isinstance(h, str | int) for h in hits)):
                raise ValueError(f"{where}: 'query_response_hit_ids' must be a list of ids")
        except ValueError as exc:
            report.bad.append(str(exc))
            continue
        seen.add(query_id)
        if not hits:
            report.no_results += 1
            continue
        offset = (query.get("query_attributes") or {}).get("offset") \
            if isinstance(query.get("query_attributes"), dict) else None
        if isinstance(offset, int) and not isinstance(offset, bool) and offset > 0:
            report.later_pages += 1  # (its results' ranks do not start at 1)
            continue
        page_id = f"ubi:{query_id}"
        try:
            store.get_impression(page_id)
            report.known += 1
            continue
        except NotFoundError:
            pass
        ids = list(dict.fromkeys(str(h) for h in hits))  # (a result listed twice: once)
        client = query.get("client_id")
        store.log_impression(Impression(
            id=page_id, created=created, query=query["user_query"],
            user_id=f"ubi:{client}" if isinstance(client, str) and client else None,
            learner=IMPORTED, model_version=-1, doc_ids=ids,
            feature_names=list(feature_names), features=np.zeros((len(ids), width)),
            ranking=np.arange(len(ids)), n_shown=len(ids),
            context={"imported": "User Behavior Insights", "ubi_query_id": query_id}))
        report.pages += 1
        position = {doc: k + 1 for k, doc in enumerate(ids)}
        for doc, ordinal, moment in clicks_of.get(query_id, ()):
            if doc not in position or (ordinal is not None and ordinal != position[doc]):
                report.not_shown += 1
                continue
            pending.append((page_id, doc, max(moment, created)))
        if report.pages % IMPORT_BATCH == 0:
            write_clicks()
    write_clicks()
    report.orphans = sum(len(v) for k, v in clicks_of.items() if k not in seen)
    return report


def json_lines(path) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` of each line of a JSON lines file (a line that is not JSON:
    ``(where, None)``, which the import names)."""
    with open(path, encoding="utf-8") as handle:
        for n, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield f"{path}, line {n}", json.loads(line)
            except ValueError:
                yield f"{path}, line {n}", None

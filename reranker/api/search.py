"""``POST /search``: a query's page, reranked by the service."""

from __future__ import annotations

from flask import Blueprint, jsonify

from reranker.api.gate import RequestGate

#: The header of a search whose impression is only queued in memory: the event store fails,
#: and its clicks answer 503 until the store takes the queue (``/healthz`` says how many wait).
QUEUED_HEADER = "Reranker-Impression"


def register(bp: Blueprint, gate: RequestGate) -> None:
    service = gate.service

    @bp.post("/search")
    def search():
        gate.require_api_key("search")
        body = gate.json_body("search")
        address = gate.client_address()
        gate.limit("search", body, address)
        response = jsonify(service.search_in_time(
            body.get("query"), body.get("size"), body.get("user_id"), body.get("session_id"),
            filters=body.get("filter"), offset=body.get("from"), facets=body.get("facets"),
            source=body.get("source"), highlight=body.get("highlight"), sort=body.get("sort"),
            client_address=address))
        waiting, failure = service.events.impressions_waiting()
        if failure is not None:  # its impression waits in this process's memory
            response.headers[QUEUED_HEADER] = (f"queued; {waiting} impressions wait for the "
                                               f"event store, which fails")
        return response

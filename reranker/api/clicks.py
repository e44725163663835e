"""What users did with a page: ``POST /click`` (a browser's click), ``POST /clicks`` (an
application's server forwarding many) and ``POST /reward`` (a value for the page, such as a
purchase). Each click is checked, rate-limited and counted in the metrics, accepted or not."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify
from werkzeug.exceptions import RequestEntityTooLarge

from reranker.api.errors import error_body
from reranker.api.gate import RequestGate
from reranker.core.errors import RerankerError


def register(bp: Blueprint, gate: RequestGate) -> None:
    service = gate.service

    @bp.post("/click")
    def click():
        try:
            body = gate.json_body("click")
            gate.limit("click", body, gate.client_address())
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
        gate.require_api_key("clicks")
        try:
            items = gate.json_body("clicks")["clicks"]
        except RequestEntityTooLarge:
            service.prometheus.clicks.labels("too_large").inc()
            raise
        address = gate.client_address()
        outcomes: list[Any] = [None] * len(items)
        allowed = []
        for i, item in enumerate(items):
            try:
                gate.limit("click", item, address)
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
        body = gate.json_body("reward")
        gate.limit("reward", body, gate.client_address())
        result = service.in_time("reward", service.reward, body.get("impression_id"),
                                 body.get("value"), body.get("user_id"), body.get("session_id"))
        return jsonify({"accepted": True, "impression_id": result.impression_id,
                        "value": result.value, "replaced": result.replaced}), 202

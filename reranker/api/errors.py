"""The JSON of every error answer, from the routes and from the HTTP server alike:
``{"error": {"status": N, "message": ..., "field": ...}}``."""

from __future__ import annotations

from typing import Any

from flask import jsonify


def error_body(status: int, message: str, field: str | None = None) -> dict[str, Any]:
    """Every error's JSON: ``{"error": {"status", "message"}}``, and ``"field"`` when the
    error is about one request field."""
    error = {"status": status, "message": message}
    if field is not None:
        error["field"] = field
    return {"error": error}


def error_response(status: int, message: str, field: str | None = None):
    """The route's answer for an error: its JSON and its status."""
    return jsonify(error_body(status, message, field)), status


def body_too_large(limit: int | None) -> str:
    """The message of a 413, from the application or from the HTTP server."""
    return f"the request body is larger than {limit} bytes (server.max_body_bytes)"

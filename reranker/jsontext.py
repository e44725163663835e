"""JSON as the standard defines it, read the same way from request bodies and document files."""

from __future__ import annotations

import json
from typing import Any


def strict_loads(data: bytes | str) -> Any:
    """Parse JSON text. Python's parser also reads ``NaN``, ``Infinity`` and ``-Infinity``,
    which no other JSON parser (a browser's, say) reads back once they are echoed in an
    answer; here they are a :class:`ValueError`."""
    return json.loads(data, parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value (JSON numbers are finite)")


def json_error(exc: ValueError) -> str:
    """What is wrong with a JSON text, and where, without echoing it."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno}, column {exc.colno}"
    return str(exc)

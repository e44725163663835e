"""JSON as the standard defines it, read the same way from request bodies and document files."""

from __future__ import annotations

import json
import math
from typing import Any


def strict_loads(data: bytes | str) -> Any:
    """Parse JSON text. Python's parser also reads ``NaN``, ``Infinity`` and ``-Infinity``,
    and a number too large for a float (``1e999``) as infinite, none of which another JSON
    parser (a browser's, say) reads back once echoed in an answer; here they are a
    :class:`ValueError`."""
    return json.loads(data, parse_constant=_no_constant, parse_float=_finite)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value (JSON numbers are finite)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for a float")
    return value


def json_error(exc: ValueError) -> str:
    """What is wrong with a JSON text, and where, without echoing it."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno}, column {exc.colno}"
    return str(exc)

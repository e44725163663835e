"""JSON as the standard defines it, read the same way from request bodies and document files."""

from __future__ import annotations

import json
import math
from typing import Any


def strict_loads(data: bytes | str, beyond: list[str] | None = None) -> Any:
    """Parse JSON text. Python's parser also reads ``NaN``, ``Infinity`` and ``-Infinity``,
    and a number too large for a float (``1e999``) as infinite, none of which another JSON
    parser (a browser's, say) reads back once echoed in an answer; here they are a
    :class:`ValueError`. With ``beyond``, a number beyond a float's range (``1e999``, an
    integer of 400 digits) is appended to it (up to its first 40 characters) and parsed as it is
    (infinite, or the integer), for the caller to name the field that holds it."""
    if beyond is None:
        return json.loads(data, parse_constant=_no_constant, parse_float=_finite)

    def parse_float(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            beyond.append(_shown(text))
        return value

    def parse_int(text: str) -> int | float:
        digits = len(text) - text.startswith("-")
        if digits > MAX_FLOAT_DIGITS:  # (not even converted: a long one costs quadratic time)
            beyond.append(_shown(text))
            return -math.inf if text.startswith("-") else math.inf
        value = int(text)
        if digits > FLOAT_DIGITS and not _fits_float(value):
            beyond.append(_shown(text))
        return value

    return json.loads(data, parse_constant=_no_constant, parse_float=parse_float,
                      parse_int=parse_int)


def _shown(text: str) -> str:
    return text if len(text) <= 40 else text[:40] + "..."


#: Digits below which an integer always fits a float's range, and above which none does.
FLOAT_DIGITS = 300
MAX_FLOAT_DIGITS = 309


def _fits_float(value: int) -> bool:
    try:
        float(value)
    except OverflowError:
        return False
    return True


def beyond_float(value: Any) -> bool:
    """Whether a parsed JSON number is beyond a float's range (infinite, or an integer too
    large for one)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) \
        and abs(value) >= 10 ** FLOAT_DIGITS and not _fits_float(value)


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

"""The checks of a request's fields that every entry point shares (the HTTP API, the library,
``/explain``): each raises a :class:`reranker.core.errors.BadRequestError` naming the field."""

from __future__ import annotations

import math
import re
from typing import Any

from reranker.core.errors import BadRequestError, shorten

#: What counts as one term of a query for ``server.max_query_terms``: a run of letters and
#: digits, as the engines' default tokenizers split text.
QUERY_TERM = re.compile(r"\w+")


def check_search(query: Any, size: Any, user_id: Any, session_id: Any, server: Any
                 ) -> tuple[str, int, str | None, str | None]:
    """A search's ``query``, ``size`` (``server.default_size`` when None), ``user_id`` and
    ``session_id``, checked against the ``server`` section's bounds."""
    if not isinstance(query, str) or not query or query.isspace():  # no copy of a long one
        raise BadRequestError("'query' must be a non-empty string", field="query")
    check_query_bounds(query, server)
    if size is None:
        size = server.default_size
    max_size = server.max_size
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= max_size:
        raise BadRequestError(f"'size' must be an integer from 1 to {max_size}, got "
                              f"{shorten(size)}", field="size")
    check_client(user_id, session_id)
    return query, size, user_id, session_id


def check_client(user_id: Any, session_id: Any) -> None:
    """``user_id`` and ``session_id``, each None or a string of Unicode text."""
    for field, value in (("user_id", user_id), ("session_id", session_id)):
        if value is not None:
            if not isinstance(value, str):
                raise BadRequestError(f"'{field}' must be a string, got {shorten(value)}",
                                      field=field)
            check_text(field, value)  # (a lone surrogate cannot be signed over either)


def check_query_bounds(query: str, server: Any) -> None:
    """A query's work and memory grow with its terms (the engine looks every term up in
    every field): ``server.max_query_bytes`` and ``server.max_query_terms`` bound them.
    The bytes are checked first, so counting terms never scans a long text; a text of
    more characters than the limit has bytes (at least one each) is not even encoded."""
    if len(query) > server.max_query_bytes \
            or len(check_text("query", query)) > server.max_query_bytes:
        raise BadRequestError(f"'query' is longer than {server.max_query_bytes} bytes of "
                              f"UTF-8 (server.max_query_bytes)", field="query")
    terms = sum(1 for _ in QUERY_TERM.finditer(query))
    if terms > server.max_query_terms:
        raise BadRequestError(f"'query' holds {terms} words; at most "
                              f"{server.max_query_terms} (server.max_query_terms)",
                              field="query")


def check_offset(offset: Any, size: int, window: int, max_size: int) -> int:
    """A search's ``from`` (0 when None): a later page stays within the ``window`` of
    candidates reranked per search."""
    if offset is None:
        return 0
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise BadRequestError(f"'from' must be a non-negative integer, got "
                              f"{shorten(offset)}", field="from")
    if offset + size > max(window, max_size):
        raise BadRequestError(f"'from' + 'size' is {offset + size}, more than the "
                              f"{window} candidates reranked per search "
                              f"(backend.candidates)", field="from")
    return offset


def check_impression_id(impression_id: Any) -> str:
    """``impression_id`` of a click, reward or explanation: a non-empty string of Unicode
    text."""
    if not isinstance(impression_id, str) or not impression_id:
        raise BadRequestError("'impression_id' must be a non-empty string",
                              field="impression_id")
    check_text("impression_id", impression_id)
    return impression_id


def check_doc_id(doc_id: Any) -> str:
    """A click's ``doc_id``: a non-empty string (an integer is taken as its digits)."""
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)
    if not isinstance(doc_id, str) or not doc_id:
        raise BadRequestError("'doc_id' must be a non-empty string", field="doc_id")
    check_text("doc_id", doc_id)
    return doc_id


def check_reward(value: Any) -> float:
    """A reward's ``value``: a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise BadRequestError(f"'value' must be a finite number, got {shorten(value)}",
                              field="value")
    return float(value)


def check_text(field: str, value: str) -> bytes:
    """``value`` in UTF-8. JSON allows lone surrogates, and NUL characters, that no UTF-8
    store or engine can hold (PostgreSQL refuses NUL in text): a client error."""
    if "\x00" in value:
        raise BadRequestError(f"'{field}' holds a NUL character", field=field)
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequestError(f"'{field}' is not valid Unicode text (it holds a lone "
                              f"surrogate)", field=field) from None

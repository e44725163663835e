"""The project's exception types.

Every error a user can cause carries a message that names the offending field, file or id,
and an HTTP status so that the service can answer it as JSON without a translation table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

#: Characters of a client's value that an error message quotes at most.
ECHO_LIMIT = 80
#: Characters of a key that a field path quotes at most.
KEY_LIMIT = 40


class RerankerError(Exception):
    """Base class of every error the project raises on purpose. ``field`` is the JSON path
    of the request field at fault (``query``, ``filter[0].range.price.gte``), when there is
    one; the HTTP API answers it beside the message."""

    status = 500

    def __init__(self, message: str, status: int | None = None, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        if status is not None:
            self.status = status


def shorten(value: Any, limit: int = ECHO_LIMIT) -> str:
    """``value`` as JSON for an error message, cut to ``limit`` characters with an ellipsis:
    a message names what was wrong without echoing a client's megabytes back."""
    if isinstance(value, str):
        value = value[:limit + 1]  # the rest would be cut anyway: do not encode it
    try:
        text = json.dumps(value, default=str, ensure_ascii=False)
    except (ValueError, RecursionError):  # a cycle or a structure too deep to print
        text = type(value).__name__
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def field_path(parts: Iterable[str | int]) -> str:
    """``filter[0].range.price.gte``: a JSON path to the field, keys cut to a few dozen
    characters."""
    head, *rest = list(parts) or [""]
    return (f"[{head}]" if isinstance(head, int) else _key(head)) + _tail(rest)


def quoted_path(parts: list) -> str:
    """The location as messages write it: ``'filter'[0].range.price``."""
    if not parts:
        return "the request body"
    head, *rest = parts
    return repr(_key(str(head))) + _tail(rest)


def _tail(parts: list) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{_key(part)}" for part in parts)


def _key(name: str) -> str:
    return name if len(name) <= KEY_LIMIT else name[:KEY_LIMIT - 1] + "\u2026"


class ConfigError(RerankerError):
    """A configuration file or value is invalid; the message names the key and the file."""

    status = 500


class BadRequestError(RerankerError):
    """A malformed request (HTTP 400)."""

    status = 400


class NotFoundError(RerankerError):
    """An unknown impression or resource (HTTP 404)."""

    status = 404


class ConflictError(RerankerError):
    """The request is valid but the resource no longer accepts it (HTTP 409)."""

    status = 409


class UnauthorizedError(RerankerError):
    """A request without a valid API key where ``security.api_keys_env`` requires one
    (HTTP 401)."""

    status = 401


class ForbiddenError(RerankerError):
    """A signed id that is forged, or served to another user or session (HTTP 403)."""

    status = 403


class GoneError(RerankerError):
    """A signed impression id older than ``security.impression_ttl``, or an impression
    whose features ``store.retention`` dropped (HTTP 410)."""

    status = 410


class TooManyRequestsError(RerankerError):
    """A client over one of the limits of the ``security`` section (HTTP 429); the answer
    says in ``Retry-After`` how many seconds to wait."""

    status = 429

    def __init__(self, message: str, *, retry_after: float, field: str | None = None):
        super().__init__(message, field=field)
        self.retry_after = retry_after

    @staticmethod
    def whole_seconds(seconds: float) -> int:
        """``Retry-After`` for a wait of ``seconds``: whole seconds, rounded up, at least 1."""
        return max(1, math.ceil(seconds))


class UnprocessableError(RerankerError):
    """The request is well formed but refers to something that does not fit (HTTP 422)."""

    status = 422


class BackendUnavailableError(RerankerError):
    """The search backend cannot answer (HTTP 503)."""

    status = 503


class DeadlineError(RerankerError):
    """A request not answered within its deadline (``server.search_timeout``)."""

    status = 503


class BackendError(RerankerError):
    """The search backend is misconfigured or rejected the request."""

    status = 500


class ModelLoadError(RerankerError):
    """A saved model cannot be used: corrupt, incompatible, or for another learner."""

    status = 500


class DataError(RerankerError):
    """An input data file (documents, LETOR files) is malformed; names the file and line."""

    status = 400


class StoreError(RerankerError):
    """The event store cannot be opened or used; names the file. ``permanent`` when the
    database refused a value (a write that fails so fails again), not for its own state."""

    status = 503
    permanent = False
    #: The store's files are damaged (not a lock or a server that is away): what to run is
    #: in the message.
    damaged = False


class ModelStoreError(StoreError):
    """An arm's model folder (``store.models``) cannot be read or written, or holds models
    of another event store: the trouble of that arm alone."""

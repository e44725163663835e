"""The project's exception types.

Every error a user can cause carries a message that names the offending field, file or id,
and an HTTP status so that the service can answer it as JSON without a translation table.
"""

from __future__ import annotations


class RerankerError(Exception):
    """Base class of every error the project raises on purpose."""

    status = 500

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


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


class UnprocessableError(RerankerError):
    """The request is well formed but refers to something that does not fit (HTTP 422)."""

    status = 422


class BackendUnavailableError(RerankerError):
    """The search backend cannot answer (HTTP 503)."""

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
    """The event store cannot be opened or used; names the file."""

    status = 503

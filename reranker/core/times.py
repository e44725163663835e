"""Moments given as text: ISO 8601 dates and times."""

from __future__ import annotations

from datetime import datetime, timezone

from reranker.core.errors import ConfigError


def parse_time(value: str, where: str) -> float:
    """An ISO 8601 date and time as a Unix time (UTC when it gives no offset)."""
    try:
        text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{where} must be an ISO 8601 date and time such as "
                          f"2026-12-01T09:00:00Z, got {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()

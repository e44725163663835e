"""Moments given as text: ISO 8601 dates and times."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from reranker.core.errors import ConfigError

#: What reads as an ISO 8601 date or date and time: ``2010-01-01``,
#: ``2010-01-01T09:30:00Z``, ``2010-01-01 09:30:00.5+02:00``.
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}"
                      r"([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)?"
                      r"([Zz]|[+-]\d{2}:?\d{2})?")


def iso_moment(value: object) -> datetime | None:
    """``value`` as an aware datetime when it is ISO 8601 text (:data:`ISO_DATE`; UTC when
    it gives no offset), else None."""
    if not isinstance(value, str) or not ISO_DATE.fullmatch(value):
        return None
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:  # (a month 13, a day 31 of April)
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def epoch_millis(value: object) -> float | None:
    """An ISO 8601 date or date and time as milliseconds since 1970-01-01 UTC, the unit
    Elasticsearch's dates also take as numbers; None when ``value`` is not one."""
    moment = iso_moment(value)
    return None if moment is None else moment.timestamp() * 1000.0


def iso_text(millis: float) -> str:
    """Epoch milliseconds as ISO 8601 text: the date alone at midnight UTC, else the date
    and time in UTC."""
    moment = datetime.fromtimestamp(millis / 1000.0, tz=timezone.utc)
    if moment.hour == moment.minute == moment.second == moment.microsecond == 0:
        return moment.date().isoformat()
    return moment.isoformat(timespec="milliseconds" if moment.microsecond else "seconds"
                            ).replace("+00:00", "Z")


def parse_time(value: str, where: str, error: type[Exception] = ConfigError) -> float:
    """An ISO 8601 date and time as a Unix time (UTC when it gives no offset); else
    ``error`` naming ``where``."""
    moment = iso_moment(value)
    if moment is None:
        raise error(f"{where} must be an ISO 8601 date and time such as "
                    f"2026-12-01T09:00:00Z, got {value!r}")
    return moment.timestamp()

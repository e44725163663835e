"""Reading documents to index: JSON Lines, one object per line with an id and text fields."""

from __future__ import annotations

import gzip
import itertools
import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .errors import DataError

#: Documents read to check that every configured field exists, before anything is written.
CHECK_FIRST = 1000


def read_jsonl(path: str | os.PathLike,
               failures: list[tuple[str, str]] | None = None
               ) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(where, document)`` from a JSONL file (``.gz`` is decompressed); ``where`` is
    ``"FILE, line N"``. Blank lines are skipped. A line that is not a JSON object is added to
    ``failures`` as ``(where, why)`` and skipped (it raises :class:`DataError` when no list is
    given); the backend checks the documents' ids and fields."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"document file {path} does not exist")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                where = f"{path}, line {number}"
                try:
                    doc = json.loads(line)
                    if not isinstance(doc, dict):
                        raise ValueError(f"expected a JSON object, got {type(doc).__name__}")
                except ValueError as exc:
                    why = (f"not valid JSON: {exc.msg}" if isinstance(exc, json.JSONDecodeError)
                           else str(exc))
                    if failures is None:
                        raise DataError(f"{where}: {why}") from exc
                    failures.append((where, why))
                    continue
                yield where, doc
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise DataError(f"{path}: cannot be read: {exc}") from exc


def field_value(doc: dict[str, Any], field: str) -> Any:
    """``doc[field]``, following dots into nested objects (``price.amount``)."""
    value: Any = doc
    for part in field.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def checked_documents(documents: Iterable[tuple[str, dict[str, Any]]], config,
                      failures: list[tuple[str, str]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The documents, checked against the configured fields.

    A text field (``backend.fields``) or numeric field (``features.numeric_fields``) that none
    of the first :data:`CHECK_FIRST` documents holds is a :class:`DataError` naming it with
    the closest field names the documents do hold, raised before the first document is
    yielded (so nothing is written); it would otherwise be a feature that is always 0. A
    document whose numeric field holds something else than a number (the string "12.50")
    is added to ``failures`` naming the document, and skipped."""
    from .config import did_you_mean

    iterator = iter(documents)
    head = list(itertools.islice(iterator, CHECK_FIRST))
    if head:
        keys: Counter = Counter()
        for _, doc in head:
            keys.update(_paths(doc))
        for key, fields in (("backend.fields", config.backend.fields),
                            ("features.numeric_fields", config.features.numeric_fields)):
            for field in fields:
                if not any(field_value(doc, field) is not None for _, doc in head):
                    shown = ", ".join(sorted(keys)[:30])
                    raise DataError(f"{key}: none of the first {len(head)} documents holds a "
                                    f"field {field!r}{did_you_mean(field, keys)} (they hold: "
                                    f"{shown}); fix the config or the documents")
    numeric = config.features.numeric_fields
    for where, doc in itertools.chain(head, iterator):
        bad = next(((f, v) for f in numeric if (v := field_value(doc, f)) is not None
                    and (isinstance(v, bool) or not isinstance(v, (int, float)))), None)
        if bad is not None:
            doc_id = doc.get(config.backend.id_field)
            failures.append((f"{where} (id {doc_id})" if doc_id is not None else where,
                             f"numeric field {bad[0]!r} holds {bad[1]!r}, not a number "
                             f"(features.numeric_fields); store it as a JSON number"))
            continue
        yield where, doc


def _paths(doc: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in doc.items():
        yield prefix + str(key)
        if isinstance(value, dict):
            yield from _paths(value, f"{prefix}{key}.")

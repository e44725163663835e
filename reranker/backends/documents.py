"""Reading documents to index: JSON Lines, one object per line with an id and text fields."""

from __future__ import annotations

import gzip
import itertools
import math
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from reranker.core.errors import DataError
from reranker.core.jsontext import json_error, strict_loads
from reranker.core.times import epoch_millis

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
                    doc = strict_loads(line)
                except ValueError as exc:
                    why = f"not valid JSON: {json_error(exc)}"
                else:
                    if isinstance(doc, dict):
                        yield where, doc
                        continue
                    why = f"expected a JSON object, got {type(doc).__name__}"
                if failures is None:
                    raise DataError(f"{where}: {why}")
                failures.append((where, why))
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
                      failures: list[tuple[str, str]], source: str = "the input",
                      adding: bool = False,
                      takes_as_number: Callable[[str, Any], bool] | None = None
                      ) -> Iterator[tuple[str, dict[str, Any]]]:
    """The documents, checked against the configured fields.

    Checked at once, before the backend writes (or, with ``--recreate``, deletes) anything:
    an input without a single document (``source`` names it), and a text field
    (``backend.fields``) or numeric field (``features.numeric_fields``) that none of the
    first :data:`CHECK_FIRST` documents holds, are a :class:`DataError`, the latter naming
    the field with the closest field names the documents do hold (it would otherwise be a
    feature that is always 0); not when ``adding`` to an index that exists, whose fields
    the run that made it checked (a few updated documents may lack a field). Then, as the
    documents are read, one whose numeric field holds something else than a number (the
    string "12.50") is added to ``failures`` naming the document, and skipped."""
    from reranker.core.suggest import did_you_mean

    iterator = iter(documents)
    head = list(itertools.islice(iterator, CHECK_FIRST))
    if not head:
        first = f" ({len(failures)} failed; the first: {failures[0][0]}: {failures[0][1]})" \
            if failures else ""
        raise DataError(f"{source} holds no document to index{first}")
    keys: Counter = Counter()
    for _, doc in head:
        keys.update(_paths(doc))
    for key, fields in (("backend.fields", config.backend.fields),
                        ("features.numeric_fields", config.features.numeric_fields)):
        for field in () if adding else fields:
            if not any(field_value(doc, field) is not None for _, doc in head):
                shown = ", ".join(sorted(keys)[:30])
                raise DataError(f"{key}: none of the first {len(head)} documents holds a "
                                f"field {field!r}{did_you_mean(field, keys)} (they hold: "
                                f"{shown}); fix the config or the documents")
    return _numbers_checked(itertools.chain(head, iterator), config, failures,
                            takes_as_number)


def _numbers_checked(documents: Iterator[tuple[str, dict[str, Any]]], config,
                     failures: list[tuple[str, str]],
                     takes: Callable[[str, Any], bool] | None = None
                     ) -> Iterator[tuple[str, dict[str, Any]]]:
    numeric = config.features.numeric_fields
    takes = takes or (lambda field, value: finite_number(value))
    for where, doc in documents:
        bad = next(((f, v) for f in numeric if (v := field_value(doc, f)) is not None
                    and not takes(f, v)), None)
        if bad is not None:
            doc_id = doc.get(config.backend.id_field)
            held = repr(bad[1])
            held = held if len(held) <= 60 else held[:59] + "\u2026"
            too_large = isinstance(bad[1], int) and not isinstance(bad[1], bool)
            if too_large:
                why = "a number too large for a float (features.numeric_fields); keep it " \
                      "within ±1.8e308"
            elif epoch_millis(bad[1]) is not None:
                why = ("a date, and a numeric feature (features.numeric_fields) needs a "
                       "number: store it as a JSON number (epoch milliseconds, or days), "
                       "or filter by it through backend.filter_fields, where ISO 8601 dates "
                       "are read as dates")
            else:
                why = "not a number (features.numeric_fields); store it as a JSON number"
            failures.append((f"{where} (id {doc_id})" if doc_id is not None else where,
                             f"numeric field {bad[0]!r} holds {held}, {why}"))
            continue
        yield where, doc


def finite_number(value: Any) -> bool:
    """A JSON number a float holds (an integer beyond a float's range is not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _paths(doc: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in doc.items():
        yield prefix + str(key)
        if isinstance(value, dict):
            yield from _paths(value, f"{prefix}{key}.")

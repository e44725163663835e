"""Reading documents to index: JSON Lines, one object per line with an id and text fields."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import DataError


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

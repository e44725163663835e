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
               id_field: str = "id") -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, document)`` from a JSONL file (``.gz`` is decompressed).

    Blank lines are skipped. A line that is not a JSON object, or lacks a string or integer
    ``id_field``, raises :class:`DataError` naming the file and the line.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"document file {path} does not exist")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}, line {number}: not valid JSON: {exc.msg}") from exc
                if not isinstance(doc, dict):
                    raise DataError(f"{path}, line {number}: expected a JSON object, got "
                                    f"{type(doc).__name__}")
                doc_id = doc.get(id_field)
                if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or doc_id == "":
                    raise DataError(f"{path}, line {number}: field {id_field!r} must be a "
                                    f"non-empty string or integer, got {doc_id!r}")
                yield number, doc
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise DataError(f"{path}: cannot be read: {exc}") from exc

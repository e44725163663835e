"""The Cranfield 1400 collection in SMART format: documents, queries and graded qrels.

``cran.all.1400`` holds records ``.I <id>`` with fields ``.T`` (title), ``.A`` (authors),
``.B`` (bibliographic source) and ``.W`` (abstract); ``cran.qry`` holds ``.I <id>`` and
``.W`` (the query). The ``.I`` numbers of the queries are not consecutive: ``cranqrel``
(``query_no doc_id code``) numbers a query by its 1-based position in ``cran.qry``. Codes 1-4
grade relevance (1 = a complete answer, 4 = minimum interest), -1 marks a non-relevant pair;
the gain label is ``5 - code`` for codes 1-4 (4..1) and 0 otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_FIELD = re.compile(r"^\.([A-Z])(?:\s+(\S+))?\s*$")


@dataclass(frozen=True)
class Query:
    number: int  # 1-based position in cran.qry, the number the qrels use
    text: str
    labels: dict[str, int]  # judged document id -> gain label 0..4

    def label(self, doc_id: str) -> int:
        return self.labels.get(doc_id, 0)

    def all_labels(self) -> np.ndarray:
        """The graded labels of the query's judged documents (the ideal DCG's input)."""
        return np.array(sorted(self.labels.values(), reverse=True), dtype=np.intp)

    @property
    def has_relevant(self) -> bool:
        return any(v > 0 for v in self.labels.values())


@dataclass(frozen=True)
class Cranfield:
    documents: list[dict[str, str]]  # {"id", "title", "body"}
    queries: list[Query]


def _records(path: Path) -> list[tuple[str, dict[str, str]]]:
    """``(.I value, {field letter: text})`` per record; text is whitespace-normalised."""
    records: list[tuple[str, dict[str, list[str]]]] = []
    field = None
    with open(path, encoding="utf-8", errors="replace") as handle:
        for raw in handle:
            line = raw.rstrip("\r\n")
            match = _FIELD.match(line)
            if match and match.group(1) == "I":
                if not match.group(2):
                    raise ValueError(f"{path}: a .I line without an id: {line!r}")
                records.append((match.group(2), {}))
                field = None
            elif match and not match.group(2):
                if not records:
                    raise ValueError(f"{path}: field .{match.group(1)} before the first .I")
                field = match.group(1)
                records[-1][1].setdefault(field, [])
            elif field is not None:
                records[-1][1][field].append(line)
            elif line.strip():
                raise ValueError(f"{path}: text outside a field: {line!r}")
    return [(rid, {k: " ".join(" ".join(v).split()) for k, v in fields.items()})
            for rid, fields in records]


def gain_label(code: int) -> int:
    """``5 - code`` for the relevance codes 1..4, 0 for anything else (-1: not relevant)."""
    return 5 - code if 1 <= code <= 4 else 0


def load_cranfield(folder: Path) -> Cranfield:
    """Read ``cran.all.1400``, ``cran.qry`` and ``cranqrel`` from ``folder``."""
    folder = Path(folder)
    documents = [{"id": str(int(rid)), "title": f.get("T", ""), "body": f.get("W", "")}
                 for rid, f in _records(folder / "cran.all.1400")]
    texts = [f.get("W", "") for _, f in _records(folder / "cran.qry")]
    labels: list[dict[str, int]] = [{} for _ in texts]
    doc_ids = {d["id"] for d in documents}
    with open(folder / "cranqrel", encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 3:
                raise ValueError(f"cranqrel line {line_no}: expected 3 columns: {line!r}")
            number, doc_id, code = int(parts[0]), str(int(parts[1])), int(parts[2])
            if not 1 <= number <= len(texts):
                raise ValueError(f"cranqrel line {line_no}: query {number} is not one of "
                                 f"1..{len(texts)}")
            if doc_id not in doc_ids:
                raise ValueError(f"cranqrel line {line_no}: unknown document {doc_id}")
            judged = labels[number - 1]
            judged[doc_id] = max(judged.get(doc_id, 0), gain_label(code))
    queries = [Query(i + 1, text, labels[i]) for i, text in enumerate(texts)]
    return Cranfield(documents, queries)

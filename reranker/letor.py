"""Learning-to-rank data in LETOR / SVMlight format.

``label qid:N 1:v 2:v ... # comment`` per line, gzip-compressed or plain; a comment holding
``docid = ID`` (as in LETOR 4.0) names the document. Files without
``qid:`` take their query sizes from a ``.query`` file beside them (one count per line, the
LightGBM convention). A malformed line raises :class:`reranker.errors.DataError` with the
file name and line number.
"""

from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import DataError


@dataclass
class RankingData:
    """Labelled queries: rows of one query are contiguous, ``offsets[i]:offsets[i+1]``.

    ``X`` is ``(rows, n_features)`` with column ``j`` holding the file's feature
    ``feature_ids[j]`` (1-based, as written in the file).
    """

    qids: list[str]
    offsets: np.ndarray
    X: np.ndarray
    labels: np.ndarray
    feature_ids: list[int]
    sources: list[str]
    lines: np.ndarray | None = None  # line number of every row in its file
    files: np.ndarray | None = None  # index into ``sources`` of every row's file
    doc_ids: list[str | None] | None = None  # from ``docid = ID`` comments, None without

    def where(self, row: int) -> str:
        """``FILE, line N`` of a row, for error messages."""
        if self.lines is None or self.files is None:
            return self.sources[0] if self.sources else "data"
        return f"{self.sources[int(self.files[row])]}, line {int(self.lines[row])}"

    @property
    def n_queries(self) -> int:
        return len(self.qids)

    def query(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Features and labels of query ``i``."""
        lo, hi = self.offsets[i], self.offsets[i + 1]
        return self.X[lo:hi], self.labels[lo:hi]

    @property
    def feature_names(self) -> list[str]:
        return [f"f{i}" for i in self.feature_ids]

    def with_features(self, feature_ids: list[int]) -> RankingData:
        """The same queries restricted (or padded with zeros) to ``feature_ids``."""
        column = {f: j for j, f in enumerate(self.feature_ids)}
        X = np.zeros((self.X.shape[0], len(feature_ids)))
        for k, f in enumerate(feature_ids):
            if f in column:
                X[:, k] = self.X[:, column[f]]
        return RankingData(self.qids, self.offsets, X, self.labels, list(feature_ids),
                           self.sources, self.lines, self.files, self.doc_ids)


_DOCID = re.compile(r"docid\s*=\s*(\S+)")


def _open_text(path: Path):
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _query_file(path: Path) -> Path | None:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    for candidate in (path.with_name(name + ".query"), path.with_name(path.name + ".query")):
        if candidate.is_file():
            return candidate
    return None


def load_letor(path: str | os.PathLike) -> RankingData:
    """Read one LETOR/SVMlight file (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file {path} does not exist")
    labels: list[int] = []
    qids: list[str | None] = []
    rows: list[dict[int, float]] = []
    numbers: list[int] = []
    docs: list[str | None] = []
    try:
        with _open_text(path) as handle:
            for number, line in enumerate(handle, start=1):
                body, _, comment = line.partition("#")
                body = body.split()
                if not body:
                    continue
                match = _DOCID.search(comment)
                docs.append(match.group(1) if match else None)
                labels.append(_label(body[0], path, number))
                qid = None
                features: dict[int, float] = {}
                for token in body[1:]:
                    key, sep, value = token.partition(":")
                    if not sep:
                        raise DataError(f"{path}, line {number}: expected 'index:value', "
                                        f"got {token!r}")
                    if key == "qid":
                        qid = value
                        continue
                    try:
                        index, number_value = int(key), float(value)
                    except ValueError:
                        raise DataError(f"{path}, line {number}: bad feature {token!r}") from None
                    if index < 1 or not np.isfinite(number_value):
                        raise DataError(f"{path}, line {number}: bad feature {token!r} (indices "
                                        f"start at 1, values must be finite)")
                    features[index] = number_value
                qids.append(qid)
                rows.append(features)
                numbers.append(number)
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise DataError(f"{path}: cannot be read: {exc}") from exc
    if not rows:
        raise DataError(f"{path}: holds no data lines")
    if all(q is None for q in qids):
        qids = _qids_from_query_file(path, len(rows))
    elif any(q is None for q in qids):
        line = next(i for i, q in enumerate(qids) if q is None)
        raise DataError(f"{path}: data line {line + 1} has no qid while others do")
    return _assemble([str(q) for q in qids], rows, np.array(labels, dtype=np.int64), [str(path)],
                     np.array(numbers), docs)


def _label(token: str, path: Path, number: int) -> int:
    try:
        value = float(token)
    except ValueError:
        raise DataError(f"{path}, line {number}: label {token!r} is not a number") from None
    if value < 0 or value != int(value):
        raise DataError(f"{path}, line {number}: label {token!r} must be a non-negative "
                        f"integer grade")
    return int(value)


def _qids_from_query_file(path: Path, n_rows: int) -> list[str]:
    query_path = _query_file(path)
    if query_path is None:
        raise DataError(f"{path}: lines have no qid and there is no {path.name}.query file "
                        f"with the query sizes")
    sizes = []
    with open(query_path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    sizes.append(int(line))
                except ValueError:
                    raise DataError(f"{query_path}, line {number}: {line.strip()!r} is not a "
                                    f"query size") from None
    if sum(sizes) != n_rows or any(s < 1 for s in sizes):
        raise DataError(f"{query_path}: query sizes add up to {sum(sizes)} but {path} has "
                        f"{n_rows} data lines")
    return [f"{path.name}:{i}" for i, size in enumerate(sizes) for _ in range(size)]


def _assemble(qids: list[str], rows: list[dict[int, float]], labels: np.ndarray,
              sources: list[str], numbers: np.ndarray, docs: list[str | None]) -> RankingData:
    # Group rows by query, keeping the first-appearance order of queries and of rows.
    first: dict[str, int] = {}
    group = np.array([first.setdefault(q, len(first)) for q in qids])
    order = np.argsort(group, kind="stable")
    counts = np.bincount(group)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    feature_ids = sorted({k for row in rows for k in row})
    column = {f: j for j, f in enumerate(feature_ids)}
    X = np.zeros((len(rows), len(feature_ids)))
    for i, row in enumerate(rows):
        for k, v in row.items():
            X[i, column[k]] = v
    return RankingData(qids=list(first), offsets=offsets, X=X[order], labels=labels[order],
                       feature_ids=feature_ids, sources=sources, lines=numbers[order],
                       files=np.zeros(len(rows), dtype=np.intp),
                       doc_ids=[docs[i] for i in order])


def load_many(paths: list[str | os.PathLike]) -> RankingData:
    """Read and concatenate several files (for example the train folds S1, S2, S3)."""
    parts = [load_letor(p) for p in paths]
    feature_ids = sorted({f for part in parts for f in part.feature_ids})
    parts = [part.with_features(feature_ids) for part in parts]
    offsets = [np.array([0])]
    base = 0
    for part in parts:
        offsets.append(part.offsets[1:] + base)
        base += part.X.shape[0]
    return RankingData(qids=[q for part in parts for q in part.qids],
                       offsets=np.concatenate(offsets), X=np.vstack([p.X for p in parts]),
                       labels=np.concatenate([p.labels for p in parts]),
                       feature_ids=feature_ids, sources=[s for p in parts for s in p.sources],
                       lines=np.concatenate([p.lines for p in parts]),
                       files=np.concatenate([np.full(len(p.labels), i, dtype=np.intp)
                                             for i, p in enumerate(parts)]),
                       doc_ids=[d for p in parts for d in (p.doc_ids or [None] * len(p.labels))])

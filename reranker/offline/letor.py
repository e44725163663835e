"""Learning-to-rank data in LETOR / SVMlight format.

``label qid:N 1:v 2:v ... # comment`` per line, gzip-compressed or plain; a comment holding
``docid = ID`` (as in LETOR 4.0) names the document. Files without
``qid:`` take their query sizes from a ``.query`` file beside them (one count per line, the
LightGBM convention). A malformed line raises :class:`reranker.core.errors.DataError` with the
file name and line number.
"""

from __future__ import annotations

import gzip
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reranker.core.errors import DataError


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
    # (a byte-order mark is not part of the first label; a byte that is not UTF-8 becomes
    # U+FFFD: harmless in a comment, and a named error in the data)
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8-sig", errors="replace")
    return open(path, encoding="utf-8-sig", errors="replace")


def _query_file(path: Path) -> Path | None:
    for candidate in _query_files(path):
        if candidate.is_file():
            return candidate
    return None


def _query_files(path: Path) -> list[Path]:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return list(dict.fromkeys((path.with_name(name + ".query"),
                               path.with_name(path.name + ".query"))))


def load_letor(path: str | os.PathLike) -> RankingData:
    """Read one LETOR/SVMlight file (see the module docstring).

    Each line's features are parsed by numpy in one call and kept as two arrays (ids and
    values, 12 bytes a feature) until the matrix is filled, so that a file of 200,000 lines
    of 136 features takes seconds and about three times its matrix in memory; a line that
    does not parse is read again token by token to name what is wrong in it."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file {path} does not exist")
    labels: list[int] = []
    qids: list[str | None] = []
    ids: list[np.ndarray] = []
    values: list[np.ndarray] = []
    numbers: list[int] = []
    docs: list[str | None] = []
    number = 0
    try:
        with _open_text(path) as handle, warnings.catch_warnings():
            # (older numpy warns, instead of raising, when a line does not parse)
            warnings.simplefilter("error", DeprecationWarning)
            for number, line in enumerate(handle, start=1):
                body, _, comment = line.partition("#")
                parts = body.split(None, 2)
                if not parts:
                    continue
                match = _DOCID.search(comment) if comment else None
                docs.append(match.group(1) if match else None)
                labels.append(_label(parts[0], path, number))
                qid = None
                if len(parts) > 1 and parts[1].startswith("qid:"):
                    qid = parts[1][4:]
                    rest = parts[2] if len(parts) > 2 else ""
                else:
                    rest = body.split(None, 1)[1] if len(parts) > 1 else ""
                index, value = _features(rest, path, number)
                qids.append(qid)
                ids.append(index)
                values.append(value)
                numbers.append(number)
    except (OSError, EOFError) as exc:
        where = f" after line {number}" if number else ""
        raise DataError(f"{path}: cannot be read{where}: {exc}") from exc
    if not labels:
        raise DataError(f"{path}: holds no data lines")
    if all(q is None for q in qids):
        qids = _qids_from_query_file(path, len(labels))
    elif any(q is None for q in qids):
        row = next(i for i, q in enumerate(qids) if q is None)
        raise DataError(f"{path}, line {numbers[row]}: no qid, while other lines have one")
    return _assemble([str(q) for q in qids], ids, values, np.array(labels, dtype=np.int64),
                     [str(path)], np.array(numbers), docs)


def _features(text: str, path: Path, number: int) -> tuple[np.ndarray, np.ndarray]:
    """The feature ids and values of one line's ``index:value`` tokens."""
    tokens = text.count(":")
    try:
        pairs = np.fromstring(text.replace(":", " "), sep=" ") if tokens else np.empty(0)
    except (ValueError, DeprecationWarning):
        pairs = None
    if pairs is None or pairs.shape[0] != 2 * tokens or len(text.split()) != tokens:
        _name_the_bad_token(text, path, number)
    index, value = pairs[0::2], pairs[1::2].copy()  # (the values alone are kept)
    if not (np.all(index >= 1) and np.all(index == np.floor(index))
            and np.all(index < 2**31) and np.all(np.isfinite(value))):
        _name_the_bad_token(text, path, number)
    index = index.astype(np.int32)
    if index.shape[0] > 1 and not np.all(index[1:] > index[:-1]):
        unique, counts = np.unique(index, return_counts=True)
        if np.any(counts > 1):
            raise DataError(f"{path}, line {number}: feature {int(unique[counts > 1][0])} is "
                            f"given twice")
    return index, value


def _name_the_bad_token(text: str, path: Path, number: int) -> None:
    for token in text.split():
        key, sep, value = token.partition(":")
        if not sep:
            raise DataError(f"{path}, line {number}: expected 'index:value', got {token!r}")
        if key == "qid":
            raise DataError(f"{path}, line {number}: 'qid:' must come right after the label")
        try:
            index, number_value = int(key), float(value)
        except ValueError:
            raise DataError(f"{path}, line {number}: bad feature {token!r}") from None
        if index < 1 or index >= 2**31 or not np.isfinite(number_value):
            raise DataError(f"{path}, line {number}: bad feature {token!r} (indices start at "
                            f"1, values must be finite)")
    raise DataError(f"{path}, line {number}: cannot read its features")


def _label(token: str, path: Path, number: int) -> int:
    try:
        value = float(token)
    except ValueError:
        raise DataError(f"{path}, line {number}: label {token!r} is not a number") from None
    if not np.isfinite(value) or value < 0 or value != int(value):
        raise DataError(f"{path}, line {number}: label {token!r} must be a non-negative "
                        f"integer grade")
    return int(value)


def _qids_from_query_file(path: Path, n_rows: int) -> list[str]:
    query_path = _query_file(path)
    if query_path is None:
        looked = " or ".join(str(p.name) for p in _query_files(path))
        raise DataError(f"{path}: lines have no qid and there is no {looked} file with the "
                        f"query sizes")
    sizes = []
    with open(query_path, encoding="utf-8-sig") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    sizes.append(int(line))
                except ValueError:
                    raise DataError(f"{query_path}, line {number}: {line.strip()!r} is not a "
                                    f"query size") from None
                if sizes[-1] < 1:
                    raise DataError(f"{query_path}, line {number}: a query size must be at "
                                    f"least 1, got {sizes[-1]}")
    if sum(sizes) != n_rows:
        raise DataError(f"{query_path}: query sizes add up to {sum(sizes)} but {path} has "
                        f"{n_rows} data lines")
    return [f"{path.name}:{i}" for i, size in enumerate(sizes) for _ in range(size)]


def _assemble(qids: list[str], ids: list[np.ndarray], values: list[np.ndarray],
              labels: np.ndarray, sources: list[str], numbers: np.ndarray,
              docs: list[str | None]) -> RankingData:
    # Group rows by query, keeping the first-appearance order of queries and of rows.
    first: dict[str, int] = {}
    group = np.array([first.setdefault(q, len(first)) for q in qids])
    order = np.argsort(group, kind="stable")
    counts = np.bincount(group)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    feature_ids = _feature_ids(ids)
    column = np.full(int(feature_ids[-1]) + 1 if feature_ids.shape[0] else 1, -1, np.intp)
    column[feature_ids] = np.arange(feature_ids.shape[0])
    position = np.empty(len(qids), dtype=np.intp)  # each line's row in query order
    position[order] = np.arange(len(qids))
    X = np.zeros((len(qids), feature_ids.shape[0]))
    for line, (index, value) in enumerate(zip(ids, values, strict=True)):
        X[position[line], column[index]] = value
    return RankingData(qids=list(first), offsets=offsets, X=X, labels=labels[order],
                       feature_ids=feature_ids.tolist(), sources=sources, lines=numbers[order],
                       files=np.zeros(len(qids), dtype=np.intp),
                       doc_ids=[docs[i] for i in order])


def _feature_ids(ids: list[np.ndarray]) -> np.ndarray:
    """The sorted feature ids that occur in any line."""
    largest = max((int(a.max()) for a in ids if a.shape[0]), default=0)
    if largest < 1 << 22:  # (a table of the ids that occur)
        seen = np.zeros(largest + 1, dtype=np.bool_)
        for index in ids:
            seen[index] = True
        return np.flatnonzero(seen)
    return np.unique(np.concatenate(ids))


def load_many(paths: list[str | os.PathLike]) -> RankingData:
    """Read and concatenate several files (for example the train folds S1, S2, S3)."""
    parts = [load_letor(p) for p in paths]
    feature_ids = sorted({f for part in parts for f in part.feature_ids})
    parts = [part if part.feature_ids == feature_ids else part.with_features(feature_ids)
             for part in parts]
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

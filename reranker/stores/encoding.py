"""The compact encoding of an impression's candidates: what the SQL stores keep per search.

An impression holds, per candidate, its id, its raw features and (for stochastic policies)
its chance of being shown; with 100 candidates that is most of its bytes. Two blobs hold
them, each compressed with zlib:

* ``candidates``: the ranking (each candidate index's offset from its position, in the
  narrowest signed integer type that holds them), the propensities if logged, and the ids
  (a JSON list). Clicks, later pages and experiment reports read it, and it stays as long
  as the impression does.
* ``features``: the feature matrix, column by column. Retention may drop it
  (:meth:`reranker.stores.EventStore.retain`) once every arm has learned from it.

The feature names are not in either: a store keeps each feature set's names once.

Every value decodes to exactly the float64 that was logged (bit for bit, the sign of zero
included), so the trainer applies the same updates from a stored impression as from the
one served. Each column is stored in the cheapest of these that reproduces it exactly:

* the reciprocal ranks ``1/1, 1/2, ..., 1/n``: nothing (a reciprocal-rank feature, such as
  the ``backend_reciprocal_rank`` of earlier feature sets);
* decimals: integers times ``10**-k`` for a ``k`` up to 6, as the narrowest signed integer
  type (a numeric field such as a price, a rating, a popularity with one decimal);
* float32: values a float32 holds exactly (the engines' scores: Lucene and Tantivy score in
  float32);
* float64, the rest (the click features, say).

zlib then takes what repeats (zeros, a click lift shared by every unclicked document).
"""

from __future__ import annotations

import functools
import json
import struct
import zlib

import numpy as np

#: First byte of every blob: the layout that follows (a later layout gets a new number and
#: this module reads both).
FORMAT = 1
#: zlib's level: 6, its default, compresses an impression within a few percent of 9 in
#: about half the time.
LEVEL = 6

# Column kinds.
FLOAT64, FLOAT32, RECIPROCAL_RANKS, DECIMAL = 0, 1, 2, 3
#: ``10**k`` of the decimals' scales (exact in float64).
_SCALES = np.array([10.0 ** k for k in range(7)])
#: Largest magnitude of a decimal's integer: float64 holds every integer up to it exactly.
_EXACT_INTEGERS = 2.0 ** 53
_SIGNED = (np.int8, np.int16, np.int32, np.int64)
_UNSIGNED = (np.uint8, np.uint16, np.uint32, np.uint64)
_BOUNDS = {kind: (int(np.iinfo(kind).min), int(np.iinfo(kind).max))
           for kind in _SIGNED + _UNSIGNED}
#: A column's header: kind, decimal places, bytes per value.
_COLUMN = struct.Struct("<BBB")
_HEADER = struct.Struct("<BII")  # format, rows, columns (features); format, n, k (candidates)


@functools.lru_cache(maxsize=16)
def _reciprocal_ranks(n: int) -> np.ndarray:
    """``1/1 ... 1/n``, computed as :class:`reranker.features.extraction.FeatureSpec` computes
    them."""
    out = 1.0 / np.arange(1, n + 1)
    out.setflags(write=False)
    return out


def _narrowest(low: int, high: int, types) -> type:
    """The first of the integer ``types`` that holds every value from ``low`` to ``high``."""
    for kind in types:
        bounds = _BOUNDS[kind]
        if bounds[0] <= low and high <= bounds[1]:
            return kind
    raise ValueError(f"no integer type holds {low} .. {high}")


def _pack_columns(X: np.ndarray) -> bytes:
    """The columns of ``X`` (float64, shape ``(n, m)``), each in the smallest of the forms
    that give it back exactly: every column's header, then every column's values. (Each
    test runs on every column at once: an impression's writer packs several per search.)"""
    n, m = X.shape
    bits = X.view(np.int64)
    reciprocal = (bits == _reciprocal_ranks(n).view(np.int64)[:, None]).all(axis=0)
    # Values too large for a float32 (or for a decimal's integer) fail the comparisons.
    with np.errstate(over="ignore", invalid="ignore"):
        as32 = X.astype(np.float32)
        exact32 = (as32.astype(np.float64).view(np.int64) == bits).all(axis=0)
        whole = np.round(X)
        integral = (whole.view(np.int64) == bits).all(axis=0) \
            & (np.abs(whole) <= _EXACT_INTEGERS).all(axis=0)
    decimals = _decimals(X, np.flatnonzero(~(reciprocal | exact32 | integral)).tolist())
    heads, bodies = [], []
    for j, (rr, e32, whole_j) in enumerate(zip(reciprocal.tolist(), exact32.tolist(),
                                               integral.tolist(), strict=True)):
        if rr:  # (also every column of a page without candidates)
            heads.append(_COLUMN.pack(RECIPROCAL_RANKS, 0, 0))
            continue
        head, values = ((FLOAT32, 0, 4), as32[:, j]) if e32 else ((FLOAT64, 0, 8), X[:, j])
        places, ints = (0, whole[:, j]) if whole_j else decimals.get(j, (None, None))
        if places is not None:
            kind = _narrowest(int(ints.min()), int(ints.max()), _SIGNED)
            width = np.dtype(kind).itemsize
            if width < head[2]:
                head, values = (DECIMAL, places, width), ints.astype(kind)
        heads.append(_COLUMN.pack(*head))
        bodies.append(values.tobytes())
    return b"".join(heads + bodies)


def _decimals(X: np.ndarray, columns: list[int]) -> dict[int, tuple[int, np.ndarray]]:
    """For each of ``columns`` that has them: the fewest decimal places ``k`` (1 to 6) such
    that ``round(x * 10**k) / 10**k`` gives every value back bit for bit, with those
    integers."""
    if not columns:
        return {}
    sub = X[:, columns]
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = np.round(sub[None] * _SCALES[1:, None, None])  # (places, rows, columns)
        exact = ((scaled / _SCALES[1:, None, None]).view(np.int64) == sub.view(np.int64)) \
            & (np.abs(scaled) <= _EXACT_INTEGERS)
    found = exact.all(axis=1)  # (places, columns)
    out = {}
    for c in np.flatnonzero(found.any(axis=0)).tolist():
        k = int(found[:, c].argmax())
        out[columns[c]] = (k + 1, scaled[k, :, c])
    return out


def _unpack_columns(data: memoryview, n: int, m: int) -> tuple[np.ndarray, int]:
    """The ``(n, m)`` float64 matrix :func:`_pack_columns` wrote at the start of ``data``,
    and the bytes it took."""
    X = np.empty((n, m), order="F")
    at = _COLUMN.size * m
    for j in range(m):
        kind, places, width = _COLUMN.unpack_from(data, _COLUMN.size * j)
        if kind == RECIPROCAL_RANKS:
            X[:, j] = _reciprocal_ranks(n)
            continue
        if kind == DECIMAL:
            ints = np.frombuffer(data, dtype=_SIGNED[width.bit_length() - 1], count=n, offset=at)
            X[:, j] = ints.astype(np.float64) / _SCALES[places]
        elif kind == FLOAT32:
            X[:, j] = np.frombuffer(data, dtype=np.float32, count=n, offset=at)
        elif kind == FLOAT64:
            X[:, j] = np.frombuffer(data, dtype=np.float64, count=n, offset=at)
        else:
            raise ValueError(f"unknown column kind {kind} in a stored impression")
        at += n * width
    return X, at


def _open(blob: bytes) -> memoryview:
    data = memoryview(zlib.decompress(blob))
    if data[0] != FORMAT:
        raise ValueError(f"stored impression in format {data[0]}, this version of reranker "
                         f"reads format {FORMAT}")
    return data


def pack_features(X: np.ndarray) -> bytes:
    """The ``features`` blob of a raw feature matrix (shape ``(n, m)``)."""
    X = np.asarray(X, dtype=np.float64)
    n, m = X.shape
    return zlib.compress(_HEADER.pack(FORMAT, n, m) + _pack_columns(X), LEVEL)


def unpack_features(blob: bytes) -> np.ndarray:
    """The feature matrix :func:`pack_features` packed, float64, exactly as logged."""
    data = _open(blob)
    _, n, m = _HEADER.unpack_from(data)
    X, _ = _unpack_columns(data[_HEADER.size:], n, m)
    return X


def pack_candidates(doc_ids: list[str], ranking: np.ndarray,
                    propensities: np.ndarray | None) -> bytes:
    """The ``candidates`` blob: the ranking, the propensities (if any) and the ids."""
    # Each index's offset from its own position: a ranking stays close to the engine's order
    # (0, 1, 2, ...) for most candidates, and the runs of small offsets compress.
    moves = np.asarray(ranking, dtype=np.int64) - np.arange(len(ranking))
    k = len(moves)
    kind = _narrowest(int(moves.min()) if k else 0, int(moves.max()) if k else 0, _SIGNED)
    parts = [_HEADER.pack(FORMAT, len(doc_ids), k), bytes([np.dtype(kind).itemsize]),
             moves.astype(kind).tobytes()]
    if propensities is None:
        parts.append(b"\0")
    else:
        column = np.asarray(propensities, dtype=np.float64).reshape(-1, 1)
        parts += [b"\1", struct.pack("<I", len(column)), _pack_columns(column)]
    parts.append(json.dumps(doc_ids).encode("ascii"))
    return zlib.compress(b"".join(parts), LEVEL)


def unpack_candidates(blob: bytes) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    """``(doc_ids, ranking, propensities)`` as :func:`pack_candidates` packed them (the
    ranking as ``intp`` indices)."""
    data = _open(blob)
    _, _, k = _HEADER.unpack_from(data)
    at = _HEADER.size
    width = data[at]
    ranking = np.frombuffer(data, dtype=_SIGNED[width.bit_length() - 1], count=k,
                            offset=at + 1).astype(np.intp) + np.arange(k)
    at += 1 + k * width
    propensities = None
    if data[at]:
        (length,) = struct.unpack_from("<I", data, at + 1)
        column, used = _unpack_columns(data[at + 5:], length, 1)
        propensities = column[:, 0]
        at += 4 + used
    return json.loads(bytes(data[at + 1:])), ranking, propensities

"""Learned weights that count only as far as the queries that taught them agree
(docs/algorithms.md, "Evidence across queries").

A linear learner's learned weights are the sum of what each query's pages taught it,
``w = sum_q u_q``. What carries over to a query never seen is the part the queries share;
what one query (or a few) taught alone is noise to every other. Per feature ``j``, with ``Q``
queries and their spread ``S_j = sum_q (u_qj - w_j / Q)^2``, the sum's variance is estimated
as ``V_j = Q / (Q - 1) * S_j`` and the weight ranks with the positive-part James-Stein factor
``max(0, 1 - V_j / w_j^2)`` (Efron & Morris 1973, empirical Bayes; the queries are the units,
as Oosterhuis & de Rijke 2021 make the query the unit a general model must carry over to).
One query, or queries that disagree, leave the starting ranking as it was; many that agree
give the learned weight in full.

Memory stays bounded however many queries come: ``sum_q u_q^2`` is kept as a count-sketch
(Charikar, Chen & Farach-Colton 2002; the second-moment estimate of Alon, Matias & Szegedy
1996): each query adds its changes, with a sign from its hash, to one of :data:`ROWS` rows,
and the rows' squares sum to ``sum_q u_q^2`` plus cross terms of mean zero (a relative
standard error of ``sqrt(2 / ROWS)``, about 13%, once many queries share each row; by then
the factors are near 0 or 1 and move little with it). The number of queries is a
linear count of a bitmap of :data:`BITS` bits (Whang, Vander-Zanden & Taylor 1990).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

#: Rows of the sketch of the queries' changes (a prime, so no feature count is likely to
#: equal it).
ROWS = 127
#: Bits of the bitmap that counts the queries (kept packed, eight to a byte).
BITS = 4096


def digest(text: str) -> bytes:
    """Eight bytes that stand for ``text`` (a query's normalised form, a page's id) wherever
    it is counted or sampled by hash (here and in :mod:`reranker.models.balance`)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()


def query_slot(key: str) -> tuple[int, float, int]:
    """The sketch row, sign and bitmap bit of a query (its normalised form)."""
    value = int.from_bytes(digest(key), "little")
    return value % ROWS, 1.0 if (value >> 16) & 1 else -1.0, (value >> 24) % BITS


def new_sketch(n_features: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An empty sketch: the rows (``ROWS x n_features``), their squares summed per feature,
    and the packed bitmap of the queries."""
    return (np.zeros((ROWS, n_features)), np.zeros(n_features),
            np.zeros(BITS // 8, dtype=np.uint8))


def add_change(rows: np.ndarray, squares: np.ndarray, seen: np.ndarray, key: str,
               change: np.ndarray) -> None:
    """Add one update's change of the learned weights, taught by query ``key``, in place."""
    row, sign, bit = query_slot(key)
    signed = sign * change
    squares += signed * (2.0 * rows[row] + signed)
    rows[row] += signed
    seen[bit >> 3] |= np.uint8(1 << (bit & 7))


def query_count(seen: np.ndarray) -> float:
    """The number of distinct queries marked in the packed bitmap ``seen`` (linear counting:
    close to exact while they are few against its bits)."""
    return linear_count(int(np.unpackbits(seen).sum()), seen.size * 8)


def linear_count(ones: int, bits: int) -> float:
    """Linear counting's estimate of the distinct items that set ``ones`` of ``bits``."""
    if ones == 0:
        return 0.0
    zeros = bits - ones
    if zeros == 0:  # saturated: at least this many
        return bits * math.log(bits)
    return -bits * math.log(zeros / bits)


def shrink_factors(learned: np.ndarray, squares: np.ndarray, queries: float) -> np.ndarray:
    """Per feature, the share of its learned weight that the queries' agreement supports:
    ``max(0, 1 - V / w^2)`` (module docstring); zeros with fewer than two queries."""
    if queries < 2.0:
        return np.zeros_like(learned)
    w2 = learned * learned
    spread = np.maximum(squares - w2 / queries, 0.0)
    variance = queries / (queries - 1.0) * spread
    with np.errstate(divide="ignore", invalid="ignore"):
        factors = 1.0 - variance / w2
    return np.where(w2 > 0.0, np.clip(factors, 0.0, 1.0), 0.0)

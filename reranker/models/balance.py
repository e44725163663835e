"""Learning from each query as if every query came equally often (docs/algorithms.md,
"Evidence across queries").

The general model ranks queries it has never seen, and a new query is a fresh draw from the
queries users ask, not from the searches: a query searched a thousand times is one query.
Traffic is the other way round (a few queries make most searches), so a model that learns
from every page learns mostly the frequent queries, which their own clicks specialise anyway
(docs/algorithms.md, "General model and query specialisation"). A page of query ``q`` is
learned from with probability ``min(1, (N / Q) / n_q)``: ``N`` pages so far, ``Q`` distinct
queries, ``n_q`` pages of ``q``. That is rejection sampling from the searches to the
queries: every query's pages then teach at about the average query's rate, and a query
searched less than the average loses nothing. The coin is a hash of the impression's id, so
every process that trains decides alike.

Bounded memory: ``n_q`` is counted for at most :data:`CAPACITY` queries by the Misra-Gries
summary (Misra & Gries 1982), which under-counts any query by at most ``N / CAPACITY``
(a query it does not hold counts as new, and is kept); ``Q`` is the linear count of a bitmap
(:func:`reranker.learners.shrinkage.linear_count`). Queries are held as hashes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reranker.learners.shrinkage import digest, linear_count

#: Queries whose pages are counted at most.
CAPACITY = 1000
#: Bits of the bitmap that counts the distinct queries (exact up to a few thousand,
#: estimated to about 700,000).
BITS = 65536


def coin(page_id: str) -> float:
    """A number in [0, 1) fixed by the page's id."""
    return int.from_bytes(digest(page_id), "little") / 2.0 ** 64


class QueryBalance:
    """Which pages a model learns from so that the queries weigh alike (module docstring)."""

    def __init__(self) -> None:
        self.pages = 0
        self.counts: dict[str, int] = {}  # query hash (hex) -> pages, at most CAPACITY
        self.seen = np.zeros(BITS // 8, dtype=np.uint8)
        self._ones = 0  # bits set in seen, kept as they are set (no recount per page)

    def keeps(self, query: str, page_id: str) -> bool:
        """Count one page of ``query`` (its normalised form) and say whether to learn from it."""
        hashed = digest(query)
        bit = int.from_bytes(hashed[:4], "little") % BITS
        mask = 1 << (bit & 7)
        if not self.seen[bit >> 3] & mask:
            self.seen[bit >> 3] |= np.uint8(mask)
            self._ones += 1
        self.pages += 1
        key = hashed.hex()
        counts = self.counts
        if key in counts:
            counts[key] += 1
        elif len(counts) < CAPACITY:
            counts[key] = 1
        else:  # Misra-Gries: every count loses one, and the page is not held
            for held in list(counts):
                counts[held] -= 1
                if not counts[held]:
                    del counts[held]
        pages_of_query = counts.get(key, 0) or 1
        average = self.pages / max(linear_count(self._ones, BITS), 1.0)
        return pages_of_query <= average or coin(page_id) < average / pages_of_query

    def to_dict(self) -> dict[str, Any]:
        return {"pages": self.pages, "counts": dict(self.counts),
                "seen": self.seen.tobytes().hex()}  # (hex: a quarter of a list's size)

    @classmethod
    def from_dict(cls, data: Any) -> QueryBalance:
        """The saved state; ``ValueError`` when it is not one."""
        balance = cls()
        if not isinstance(data, dict):
            raise ValueError(f"query_balance must be a mapping, got {type(data).__name__}")
        pages, counts, seen = data.get("pages"), data.get("counts"), data.get("seen")
        if isinstance(pages, bool) or not isinstance(pages, int) or pages < 0:
            raise ValueError(f"query_balance.pages must be a count, got {pages!r}")
        if not isinstance(counts, dict) or len(counts) > CAPACITY or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                and v > 0 for k, v in counts.items()):
            raise ValueError("query_balance.counts must map at most "
                             f"{CAPACITY} query hashes to positive counts")
        try:
            array = np.frombuffer(bytes.fromhex(seen), dtype=np.uint8) \
                if isinstance(seen, str) else None
        except ValueError:
            array = None
        if array is None or array.shape != (BITS // 8,):
            raise ValueError(f"query_balance.seen must be {BITS // 8} bytes in hexadecimal")
        balance.pages, balance.counts = pages, dict(counts)
        balance.seen = array.copy()
        balance._ones = int(np.unpackbits(balance.seen).sum())
        return balance

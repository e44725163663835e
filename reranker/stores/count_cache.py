"""The click counts a store object has read, kept and kept up to date with its own writes.

Every search reads the click features of its candidates: per candidate, its clicks and
exposures under the query and over all queries, and the total (``click_stats``, see
:mod:`reranker.clicks`). Read from the database, that is some two hundred lookups of the
primary key per search, about as much as the rest of a reranked search together. Most
searches repeat queries and candidates, so a process keeps the cells it has read
(:class:`CountCache`) and adds to them what it writes itself:

* the exposures of the impressions it has queued and not yet written
  (:mod:`.write_behind`), from the moment they are queued;
* the clicks and exposures its transactions commit, as they commit.

A query's cells (its candidates' counts under it, their counts over all queries and the
total) are read together, in one statement, when one of them is missing or the query's were
read more than ``features.click_refresh`` seconds ago. So within one process the counts a
search reads are exactly those of every impression and click before it, as if read from the
database after each write. What other processes write (the other workers, other machines)
is seen when the query's cells are read again, at most ``features.click_refresh`` seconds
after they were read (0: every search reads the database). A click never reaches a search
before it: the cache only ever lags.

A cell read from the database while one of this object's own transactions that changes it
was under way may or may not hold that transaction's counts. Such a cell is read again
once the transaction has ended (a few times at most: under constant writing, the last read
serves, and may count one transaction twice for that search).
"""

from __future__ import annotations

import itertools
import operator
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

#: ``click_stats.query_key`` of the counts over all queries (a normalised query never holds
#: '*'), and ``doc_id`` of the counts over all documents.
ALL_QUERIES = "*"
ALL_DOCS = ""

#: Cells kept at most; past it, all are forgotten (and read again as searches need them).
MAX_CELLS = 200_000

Cell = tuple[str, str]


class Write:
    """One transaction of a store object that changes counts: the cells it changes, as
    :meth:`CountCache.touch` names them (before its commit)."""

    __slots__ = ("cells",)

    def __init__(self):
        self.cells: set[Cell] = set()


class CountCache:
    """The ``click_stats`` cells one store object has read in the last ``ttl`` seconds,
    with its own writes added, and the exposures of its queued impressions."""

    #: Transactions ended lately whose cells a read may have to check.
    RECENT = 256

    def __init__(self, ttl: float, *, max_cells: int = MAX_CELLS,
                 clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self.max_cells = max_cells
        self.clock = clock
        self._cond = threading.Condition()
        # Cells read, with this object's commits since added: per query, when its cells
        # were read and each document's [clicks, exposure] under it; over all queries, each
        # document's (and the total's, under ALL_DOCS).
        self._queries: dict[str, tuple[float, dict[str, list]]] = {}
        self._all: dict[str, list] = {}
        self._size = 0  # cells kept
        # Exposures of queued impressions: per query, per document [exposure, impressions];
        # over all queries, the same.
        self._queued: dict[str, dict[str, list]] = {}
        self._busy: dict[Cell, int] = {}  # cell -> transactions under way that change it
        self._ended = 0  # transactions ended so far
        self._recent: deque[tuple[int, set[Cell]]] = deque(maxlen=self.RECENT)
        #: Reads of the database, and searches answered from the cache (for tests and
        #: benchmarks).
        self.reads = self.hits = 0

    # -- what this object writes ---------------------------------------------------------------

    def queue(self, rows: Iterable[tuple[str, str, float]]) -> None:
        """Exposures ``(query_key, doc_id, weight)`` of an impression queued for writing."""
        with self._cond:
            for key, doc_id, weight in rows:
                cell = self._queued.setdefault(key, {}).get(doc_id)
                if cell is None:
                    self._queued[key][doc_id] = [weight, 1]
                else:
                    cell[0] += weight
                    cell[1] += 1

    def unqueue(self, impressions: Iterable[Sequence[tuple[str, str, float]]]) -> None:
        """The exposures of impressions that will never be written."""
        with self._cond:
            self._unqueue(impressions)

    def touch(self, write: Write, cells: Iterable[Cell]) -> None:
        """``write`` changes ``cells``: to be said before it commits."""
        with self._cond:
            for cell in cells:
                if cell not in write.cells:
                    write.cells.add(cell)
                    self._busy[cell] = self._busy.get(cell, 0) + 1

    def end(self, write: Write, committed: Mapping[Cell, tuple[float, float]] | None = None,
            written: Iterable[Sequence[tuple[str, str, float]]] = ()) -> None:
        """``write`` ended: ``committed`` holds what it added to each cell (``(clicks,
        exposure)``; None when it rolled back), ``written`` the exposures of the queued
        impressions it wrote."""
        with self._cond:
            for cell in write.cells:
                left = self._busy[cell] - 1
                if left:
                    self._busy[cell] = left
                else:
                    del self._busy[cell]
            self._ended += 1
            self._recent.append((self._ended, write.cells))
            if committed is not None:
                for (key, doc_id), (clicks, exposure) in committed.items():
                    if key == ALL_QUERIES:
                        kept = self._all.get(doc_id)
                    else:
                        entry = self._queries.get(key)
                        kept = None if entry is None else entry[1].get(doc_id)
                    if kept is not None:
                        kept[0] += clicks
                        kept[1] += exposure
                self._unqueue(written)
            self._cond.notify_all()

    def _unqueue(self, impressions: Iterable[Sequence[tuple[str, str, float]]]) -> None:
        for rows in impressions:
            for key, doc_id, weight in rows:
                docs = self._queued[key]
                cell = docs[doc_id]
                cell[1] -= 1
                if cell[1]:
                    cell[0] -= weight
                elif len(docs) > 1:
                    del docs[doc_id]
                else:
                    del self._queued[key]

    # -- reading -------------------------------------------------------------------------------

    def counts(self, key: str, doc_ids: list[str],
               read: Callable[[str, list[str]], dict[Cell, tuple[float, float]]]
               ) -> tuple[np.ndarray, tuple[float, float]]:
        """The counts of the candidates ``doc_ids`` under query ``key`` (columns: clicks and
        exposure under the query, then over all queries) and the total ``(clicks,
        exposure)``. ``read(key, docs)`` reads the cells of ``docs`` under ``key`` and over
        all queries, and the total, from the database (the cells it lacks are 0)."""
        now = self.clock()
        unsure: dict[Cell, tuple[float, float]] = {}
        with self._cond:
            due = not self._known(key, doc_ids, now)
            if not due:
                self.hits += 1
                return self._assemble(key, doc_ids, unsure)
        wanted = [(key, d) for d in doc_ids] + [(ALL_QUERIES, d) for d in doc_ids]
        wanted.append((ALL_QUERIES, ALL_DOCS))
        todo = wanted
        for attempt in range(3):  # again for the cells a write of this object changed
            with self._cond:
                ended, busy = self._ended, {c for c in todo if c in self._busy}
            got = read(key, list(dict.fromkeys(d for _, d in todo if d != ALL_DOCS)))
            with self._cond:
                self.reads += 1
                busy |= self._changed_since(ended, todo)
                self._keep(key, [c for c in todo if c not in busy], got, now)
                # A busy cell already kept stays as it is (this object's writes are added to
                # it): only one never read waits for its write to end and is read again
                # (the total, for one, is written by nearly every transaction).
                busy = {c for c in busy if not self._kept(c)}
                for cell in todo:
                    if cell in busy:
                        unsure[cell] = got.get(cell, (0.0, 0.0))
                    else:
                        unsure.pop(cell, None)
                todo = [c for c in todo if c in busy]
                if not todo:
                    break
                if attempt < 2:  # read them again once their writes have ended
                    self._cond.wait_for(lambda cells=todo: not any(
                        c in self._busy for c in cells), 1.0)
        with self._cond:
            if not self._known(key, doc_ids, now, unsure):  # forgotten meanwhile: again
                return self.counts(key, doc_ids, read)
            return self._assemble(key, doc_ids, unsure)

    def _known(self, key: str, doc_ids: list[str], now: float,
               unsure: Mapping[Cell, tuple[float, float]] | None = None) -> bool:
        """Whether every cell of the search is kept (and the query's read within the
        ttl), or in ``unsure``."""
        entry = self._queries.get(key)
        if entry is None or now - entry[0] > self.ttl:
            return False
        docs, every = entry[1], self._all
        if unsure:
            return all((d in docs or (key, d) in unsure)
                       and (d in every or (ALL_QUERIES, d) in unsure) for d in doc_ids) \
                and (ALL_DOCS in every or (ALL_QUERIES, ALL_DOCS) in unsure)
        return ALL_DOCS in every and all(d in docs and d in every for d in doc_ids)

    def _assemble(self, key: str, doc_ids: list[str],
                  unsure: Mapping[Cell, tuple[float, float]]) -> tuple[np.ndarray,
                                                                         tuple[float, float]]:
        docs, every = self._queries[key][1], self._all
        if unsure:  # (after a read that overlapped this object's writes: seldom)
            rows = [[*(unsure.get((key, d)) or docs[d]),
                     *(unsure.get((ALL_QUERIES, d)) or every[d])] for d in doc_ids]
            total = list(unsure.get((ALL_QUERIES, ALL_DOCS)) or every[ALL_DOCS])
            counts = np.array(rows, dtype=np.float64).reshape(len(doc_ids), 4)
        else:
            # The cells' values straight into one array (the quickest way from Python
            # lists to numpy, for the some 200 cells of a search).
            n = len(doc_ids)
            pick = operator.itemgetter(*doc_ids) if n > 1 else lambda cells: (
                tuple(cells[d] for d in doc_ids))
            flat = np.fromiter(itertools.chain.from_iterable(pick(docs) + pick(every)),
                               np.float64, count=4 * n)
            counts = np.concatenate([flat[:2 * n].reshape(n, 2), flat[2 * n:].reshape(n, 2)],
                                    axis=1)
            total = list(every[ALL_DOCS])
        if self._queued:
            for column, cells in ((1, self._queued.get(key)),
                                  (3, self._queued.get(ALL_QUERIES))):
                if cells:
                    for i, d in enumerate(doc_ids):
                        cell = cells.get(d)
                        if cell is not None:
                            counts[i, column] += cell[0]
            cell = self._queued.get(ALL_QUERIES, {}).get(ALL_DOCS)
            if cell is not None:
                total[1] += cell[0]
        return counts, (total[0], total[1])

    def _kept(self, cell: Cell) -> bool:
        if cell[0] == ALL_QUERIES:
            return cell[1] in self._all
        entry = self._queries.get(cell[0])
        return entry is not None and cell[1] in entry[1]

    def _keep(self, key: str, cells: list[Cell], got: Mapping[Cell, tuple[float, float]],
              now: float) -> None:
        if self._size + len(cells) > self.max_cells:  # room: forget everything
            self._queries, self._all, self._size = {}, {}, 0
        entry = self._queries.get(key)
        docs = {} if entry is None else entry[1]
        self._queries[key] = (now, docs)
        for cell in cells:
            target = self._all if cell[0] == ALL_QUERIES else docs
            if cell[1] not in target:
                self._size += 1
            target[cell[1]] = list(got.get(cell, (0.0, 0.0)))

    def _changed_since(self, ended: int, cells: list[Cell]) -> set[Cell]:
        """Which of ``cells`` a transaction of this object is changing, or changed in one
        that ended after ``ended`` transactions had (all of them when that is too long
        ago to tell)."""
        changed = {c for c in cells if c in self._busy}
        if self._ended == ended:
            return changed
        if self._recent[0][0] > ended + 1:
            return set(cells)
        wanted = set(cells)
        for number, touched in reversed(self._recent):
            if number <= ended:
                break
            changed |= wanted & touched
        return changed

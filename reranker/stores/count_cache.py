"""The click counts a store object has read, kept and kept up to date with its own writes.

Every search reads the click features of its candidates: per candidate, its clicks and
exposures under the query and over all queries, and the total (``click_stats``, see
:mod:`reranker.features.clicks`). Read from the database, that is some two hundred lookups of the
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
before it: the cache only ever lags. When no other process writes (one process serves),
the cells are not read again: every write adds to the total cell, so when a lookup of the
total, made once per ``click_refresh``, finds it equal to the kept total, and every read
since the query's found it so too, nothing has been written but this object's own writes,
which the kept cells hold already. (Not with ``click_refresh`` 0, which always reads.)

A query not kept (a new one, or one whose cells are stale) whose candidates' counts over
all queries are all kept reads its own cells and the total alone, in one statement, and
keeps its cells with those counts when together they make one state of the store: when
the total is as kept and all those counts were read since another process's last write
was seen (nothing written since: current as of now), or when the query has no cells for
its candidates (it had none when those counts were read either: current as of the oldest
of those reads, if within ``click_refresh``, whichever queries read them, so that with
several processes writing the documents searches keep reading serve). Else it reads every
cell: a query's cells read now beside older counts over all queries would take its clicks
out of counts that lack them. Most candidates of a new query have been read under other
queries, and a new query has no cells at all, so its read is one lookup of the primary
key's prefix and one of the total, where a full read looks up some two hundred cells.

A read from the database and a commit of this object never overlap (:meth:`reading` and
:meth:`committing`, a readers-writer gate taken only around the ``COMMIT`` and the update of
the kept cells that goes with it, never while a transaction waits for the database's
locks): a read sees a commit of this object either wholly, and then the kept cells already
hold it, or not at all, and then the commit adds itself to them after. So no count is ever
missed or counted twice, and a read never waits for more than a commit. One exception: a
``COMMIT`` whose answer is lost (the connection breaks during it) may have happened; the
kept cells are then forgotten, but the exposures of the impressions it wrote count twice,
from the database and from the queue, until the writer tries them again and finds them
written (:mod:`.write_behind`, within its backoff).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import operator
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from reranker.core.errors import StoreError
from reranker.core.forks import renew_in_child

#: ``click_stats.query_key`` of the counts over all queries (a normalised query never holds
#: '*'), and ``doc_id`` of the counts over all documents.
ALL_QUERIES = "*"
ALL_DOCS = ""

#: The columns of a kept cell (``(clicks, exposure)``).
CLICKS, EXPOSURE = 0, 1
#: A cell without a row. Kept cells are tuples, replaced when a commit adds to them: a
#: tuple of floats (and a dict of them) is left alone by Python's cycle collector, so the
#: some hundred thousand cells kept cost its full collections nothing, and every empty cell
#: is this one object.
EMPTY = (0.0, 0.0)

#: Cells kept at most; past it, all are forgotten (and read again as searches need them).
MAX_CELLS = 200_000

Cell = tuple[str, str]
Rows = Sequence[tuple[str, str, float]]  # (query_key, doc_id, exposure) of one impression


class Gate:
    """A readers-writer lock that prefers its writer: the store's reads of counts share it,
    its commits take it alone. A wait longer than ``timeout`` seconds is a
    :class:`StoreError` (a commit that hangs must not hang the searches)."""

    def __init__(self, timeout: float = 10.0):
        self.timeout = timeout
        self._cond = threading.Condition()
        self._readers = 0
        self._writers = 0  # holding or waiting
        self._writing = False

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            if not self._cond.wait_for(lambda: not self._writers, self.timeout):
                raise StoreError(f"the event store's counts are being written for longer "
                                 f"than store.timeout ({self.timeout:g}s)")
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    def acquire(self) -> None:
        with self._cond:
            self._writers += 1
            try:
                if not self._cond.wait_for(lambda: not self._readers and not self._writing,
                                           self.timeout):
                    raise StoreError(f"the event store's counts are being read or written "
                                     f"for longer than store.timeout ({self.timeout:g}s)")
            except BaseException:
                self._writers -= 1
                self._cond.notify_all()
                raise
            self._writing = True

    def release(self) -> None:
        with self._cond:
            self._writing = False
            self._writers -= 1
            self._cond.notify_all()


class CountCache:
    """The ``click_stats`` cells one store object has read in the last ``ttl`` seconds,
    with its own writes added, and the exposures of its queued impressions."""

    def __init__(self, ttl: float, *, max_cells: int = MAX_CELLS, timeout: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, max_age: float | None = None):
        self.ttl = ttl
        #: Seconds a query's cells are kept at most, however current the total says they
        #: are: retention deletes the counts of a query searched no more after as long
        #: (``store.retention``), and kept ones would outlive them. None: no limit.
        self.max_age = max_age
        self.max_cells = max_cells
        self.timeout = timeout
        self.clock = clock
        self._reset()
        # a forked child starts empty, with locks of its own: what the parent queued is the
        # parent's to write, and its locks may have been held at the fork
        renew_in_child(self._reset)
        #: Reads of the database (of a query's cells and the candidates' over all queries;
        #: of a query's cells alone), reads of the total alone, and searches answered from
        #: the cache (for tests and benchmarks).
        self.reads = self.query_reads = self.checks = self.hits = 0

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self.gate = Gate(self.timeout)
        # Cells read, with this object's commits since added: per query, when its cells
        # were read and each document's (clicks, exposure) under it; over all queries, each
        # document's (and the total's, under ALL_DOCS).
        self._queries: dict[str, tuple[float, dict[str, tuple], int]] = {}  # read, docs, epoch
        self._all: dict[str, tuple] = {}
        self._all_epoch: dict[str, int] = {}  # the epoch in which each was last read
        self._all_read: dict[str, float] = {}  # and when
        self._forgotten = 0  # times everything was forgotten
        self._size = 0  # cells (and queries) kept
        # A new epoch begins whenever a read finds the store's total other than the kept
        # one (another process has written); a query's entry holds the epoch of its read.
        # ``_checked``: when a lookup of the total last found it as kept, or a read found it
        # changed (see :meth:`_fresh`): the cells read in the epoch are current as of then.
        self._epoch = 0
        self._checked = -math.inf
        # Exposures of queued impressions: per query (and ALL_QUERIES), per document,
        # [exposure, impressions]; and each queued impression's, by its id.
        self._queued: dict[str, dict[str, list]] = {}
        self._queued_rows: dict[str, Rows] = {}

    # -- what this object writes ---------------------------------------------------------------

    def queue(self, impression_id: str, rows: Rows) -> None:
        """Exposures ``(query_key, doc_id, weight)`` of an impression queued for writing."""
        with self._lock:
            if impression_id in self._queued_rows:
                return
            self._queued_rows[impression_id] = rows
            for key, doc_id, weight in rows:
                cell = self._queued.setdefault(key, {}).get(doc_id)
                if cell is None:
                    self._queued[key][doc_id] = [weight, 1]
                else:
                    cell[0] += weight
                    cell[1] += 1

    def forget(self) -> None:
        """Forget the kept cells (not the queued exposures): each query's are read again."""
        with self._lock:
            self._forget()

    def _forget(self) -> None:
        self._queries, self._all, self._size = {}, {}, 0
        self._all_epoch, self._all_read = {}, {}
        self._forgotten += 1

    def unqueue(self, impression_ids: Iterable[str]) -> None:
        """The exposures of impressions that will never be written (again: each counts
        out once, whatever the calls)."""
        with self._lock:
            self._unqueue(impression_ids)

    @contextlib.contextmanager
    def committing(self) -> Iterator[None]:
        """Held from just before the ``COMMIT`` of a transaction of this object that changes
        counts (not earlier: the database's locks are taken by then) until
        :meth:`committed` has added what it wrote. When the block fails (a commit whose
        answer was lost may or may not have happened), the kept cells are forgotten: they
        are read again."""
        self.gate.acquire()
        try:
            yield
        except BaseException:
            self.forget()
            raise
        finally:
            self.gate.release()

    def committed(self, added: Mapping[Cell, float], column: int,
                  written: Iterable[str] = ()) -> None:
        """A commit of this object succeeded (call it within :meth:`committing`): what it
        added to each cell (``{(query_key, doc_id): amount}``) in ``column`` (:data:`CLICKS`
        or :data:`EXPOSURE`), and the ids of the queued impressions it wrote (or found
        written)."""
        with self._lock:
            queries, every = self._queries, self._all
            for (key, doc_id), amount in added.items():
                if key == ALL_QUERIES:
                    cells = every
                else:
                    entry = queries.get(key)
                    if entry is None:
                        continue
                    cells = entry[1]
                kept = cells.get(doc_id)
                if kept is not None:
                    cells[doc_id] = (kept[0] + amount, kept[1]) if column == CLICKS \
                        else (kept[0], kept[1] + amount)
            self._unqueue(written)

    def _unqueue(self, impression_ids: Iterable[str]) -> None:
        for impression_id in impression_ids:
            rows = self._queued_rows.pop(impression_id, None)
            for key, doc_id, weight in rows or ():
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

    def counts(self, key: str, doc_ids: list[str], read: Callable[..., None],
               read_total: Callable[..., None] | None = None,
               read_query: Callable[..., None] | None = None
               ) -> tuple[np.ndarray, tuple[float, float]]:
        """The counts of the candidates ``doc_ids`` under query ``key`` (columns: clicks and
        exposure under the query, then over all queries) and the total ``(clicks,
        exposure)``.

        ``read(key, docs, keep)`` reads the cells of ``docs`` under ``key`` and over all
        queries, and the total, from the database, inside ``with cache.gate.shared():``
        (taken once it holds its connection: a reader must not wait for a connection that a
        committing writer holds), and there calls ``keep(cells)`` with them (``{(query_key,
        doc_id): (clicks, exposure)}``; the cells it lacks are 0).

        ``read_total(compare)`` reads the total alone, the same way, and there calls
        ``compare((clicks, exposure))``: when the query's cells are older than the ttl but no
        other process has written since (:meth:`_fresh`), that one lookup confirms them.

        ``read_query(key, docs, keep)`` reads the cells under ``key`` alone (at least those
        of ``docs``) and the total, in one statement (one state of the database), the same
        way, and there calls ``keep(cells)``; or does not call it (say, the query has too
        many cells for one quick read), and then ``read`` reads."""
        now = self.clock()
        with self._lock:
            fresh = self._fresh(key, doc_ids, now)
            if fresh:
                self.hits += 1
                return self._assemble(key, doc_ids)
            # The query's cells may be read alone when the candidates' counts over all
            # queries are kept: see keep_query for when they are kept. A query this process
            # has read before has cells, most likely: unless nothing was written since the
            # counts over all queries were read, they are read again with those.
            everywhere = None if read_query is None else self._everywhere(doc_ids)
            alone = everywhere is not None and (everywhere[1] or (
                now - everywhere[0] <= self.ttl and key not in self._queries))
            if alone:
                (since, current), kept_as = everywhere, (self._epoch, self._forgotten)
        if fresh is None and read_total is not None:
            confirmed = []

            def compare(total: tuple[float, float]) -> None:
                with self._lock:
                    kept = self._all.get(ALL_DOCS)
                    if kept is not None and kept[0] == total[0] and kept[1] == total[1]:
                        self._checked = max(self._checked, now)
                        if self._fresh(key, doc_ids, now):
                            confirmed.append(self._assemble(key, doc_ids))
                    else:  # another process wrote: every query is read again
                        self._epoch += 1
                        self._checked = -math.inf

            read_total(compare)
            self.checks += 1
            if confirmed:
                self.hits += 1
                return confirmed[0]
        answer = []
        if alone:

            def keep_query(cells: Mapping[Cell, tuple[float, float]]) -> None:
                """Keep the query's cells read alone when they and the counts over all
                queries kept make one state of the database: nothing was written since
                those were read (all read in this epoch, and the total read with the
                query's cells as kept: as of now), or the query has no cell for the
                candidates (it had none then either: as of ``since``, within the ttl).
                Not when the counts kept are no longer as they were found (a new epoch,
                everything forgotten)."""
                with self._lock:
                    if not self._still(kept_as, doc_ids):
                        return
                    total, kept = cells.get((ALL_QUERIES, ALL_DOCS), EMPTY), self._all[ALL_DOCS]
                    unchanged = kept[0] == total[0] and kept[1] == total[1]
                    if unchanged:
                        self._checked = max(self._checked, now)
                    else:  # another process wrote
                        self._epoch += 1
                        self._checked = -math.inf
                    if unchanged and current:
                        read, epoch = now, self._epoch
                    else:
                        wanted = set(doc_ids)
                        if now - since > self.ttl or any(
                                k == key and d in wanted for k, d in cells):
                            return
                        read, epoch = since, -1
                    self.query_reads += 1
                    self._keep_query(key, doc_ids, cells, read, epoch)
                    answer.append(self._assemble(key, doc_ids))

            if self._still(kept_as, doc_ids):  # (unless a lookup of the total changed them)
                read_query(key, list(dict.fromkeys(doc_ids)), keep_query)
                if answer:
                    return answer[0]

        def keep(cells: Mapping[Cell, tuple[float, float]]) -> None:
            with self._lock:
                self.reads += 1
                self._keep(key, doc_ids, cells, now)
                answer.append(self._assemble(key, doc_ids))

        read(key, list(dict.fromkeys(doc_ids)), keep)
        return answer[0]

    def _everywhere(self, doc_ids: list[str]) -> tuple[float, bool] | None:
        """When the counts over all queries of ``doc_ids`` and the total are all kept, with
        room for the query's cells beside them: as of when they are all known current, and
        whether all were read in the current epoch (a cell is current as of its read, and
        one read in the current epoch also as of the last lookup of the total that found it
        as kept: :meth:`_fresh`). None otherwise, and always with a ttl of 0."""
        tags = self._all_epoch
        if not self.ttl or self._size + len(doc_ids) + 1 > self.max_cells:
            return None
        epochs = set(map(tags.get, doc_ids))
        epochs.add(tags.get(ALL_DOCS))
        if None in epochs:
            return None
        read = self._all_read
        oldest = min(read[ALL_DOCS], min(map(read.__getitem__, doc_ids), default=math.inf))
        if epochs == {self._epoch}:
            return max(oldest, self._checked), True
        return oldest, False

    def _still(self, kept_as: tuple[int, int], doc_ids: list[str]) -> bool:
        """Whether :meth:`_everywhere` still holds, having held when the epoch and the
        count of forgettings were ``kept_as`` (a cell's epoch changes only to a new epoch,
        and a cell goes only when everything is forgotten)."""
        return ((self._epoch, self._forgotten) == kept_as
                and self._size + len(doc_ids) + 1 <= self.max_cells)

    def _fresh(self, key: str, doc_ids: list[str], now: float) -> bool | None:
        """Whether the search's cells are kept and current: every cell is kept, and the
        query's were read within the ttl, or (a ttl above 0) in the current epoch, every
        read since having found the store's total as kept (nothing written by another
        process: its writes change the total, which only grows), and a lookup of the total
        found it so within the ttl. None: all that holds but the last lookup is older than
        the ttl (one more tells)."""
        entry = self._queries.get(key)
        if entry is None:
            return False
        docs, every = entry[1], self._all
        if not (ALL_DOCS in every and all(d in docs and d in every for d in doc_ids)):
            return False
        if now - entry[0] <= self.ttl:
            return True
        if self.max_age is not None and now - entry[0] > self.max_age:
            return False
        if not self.ttl or entry[2] != self._epoch:
            return False
        return True if now - self._checked <= self.ttl else None

    def known(self, key: str, doc_ids: list[str]) -> tuple[np.ndarray, tuple[float, float]]:
        """The counts as :meth:`counts` gives them, from what is kept alone (0 where nothing
        is): for a search while the store cannot be read."""
        with self._lock:
            entry = self._queries.get(key)
            docs, every = ({} if entry is None else entry[1]), self._all
            counts = np.array([(*docs.get(d, EMPTY)[:2], *every.get(d, EMPTY)[:2])
                               for d in doc_ids], dtype=np.float64).reshape(len(doc_ids), 4)
            total = every.get(ALL_DOCS, EMPTY)
        return counts, (float(total[0]), float(total[1]))

    def _assemble(self, key: str, doc_ids: list[str]) -> tuple[np.ndarray, tuple[float, float]]:
        docs, every = self._queries[key][1], self._all
        n = len(doc_ids)
        # The cells' values straight into one array (the quickest way from Python tuples to
        # numpy, for the some 200 cells of a search).
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

    def _keep(self, key: str, doc_ids: list[str], got: Mapping[Cell, tuple[float, float]],
              now: float) -> None:
        if self._size + 2 * len(doc_ids) + 2 > self.max_cells:  # room: forget everything
            self._forget()
        total, kept = got.get((ALL_QUERIES, ALL_DOCS), (0.0, 0.0)), self._all.get(ALL_DOCS)
        if kept is None or kept[0] != total[0] or kept[1] != total[1]:
            # Another process wrote (or nothing was kept): the queries read before may
            # lack its writes, this one holds them, as of now.
            self._epoch += 1
            self._checked = now
        else:  # a lookup of the total like any other (see _fresh)
            self._checked = max(self._checked, now)
        # Every cell asked for, 0 unless read (one pass over the cells read, which may be
        # fewer than those asked for: a search's cells are some 200)
        docs = dict.fromkeys(doc_ids, EMPTY)
        every = dict.fromkeys(doc_ids, EMPTY)
        every[ALL_DOCS] = EMPTY
        for (cell_key, d), value in got.items():
            if cell_key == key and d in docs:
                docs[d] = (value[0], value[1])
            if cell_key == ALL_QUERIES and d in every:
                every[d] = (value[0], value[1])
        kept = self._all
        self._size += len([d for d in every if d not in kept])
        kept.update(every)
        self._all_epoch.update(dict.fromkeys(every, self._epoch))
        self._all_read.update(dict.fromkeys(every, now))
        self._put_query(key, docs, now, self._epoch)

    def _keep_query(self, key: str, doc_ids: list[str],
                    got: Mapping[Cell, tuple[float, float]], read: float, epoch: int) -> None:
        """Keep the cells of ``doc_ids`` under ``key`` alone, from ``got`` (0 unless
        there), as current as of time ``read`` in ``epoch``."""
        docs = dict.fromkeys(doc_ids, EMPTY)
        for (cell_key, d), value in got.items():
            if cell_key == key and d in docs:
                docs[d] = (value[0], value[1])
        self._put_query(key, docs, read, epoch)

    def _put_query(self, key: str, docs: dict[str, tuple], read: float, epoch: int) -> None:
        # The query's cells are those of this read alone (a document it read before and
        # not now would pass for read now).
        old = self._queries.pop(key, None)
        if old is not None:
            self._size -= 1 + len(old[1])
        self._size += 1 + len(docs)
        self._queries[key] = (read, docs, epoch)

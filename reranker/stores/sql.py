"""The event store on a SQL database: every query and rule that SQLite and PostgreSQL share.

The subclasses (:mod:`.sqlite`, :mod:`.postgres`) create the schema and say how to get a
connection, run a write transaction and read a consistent snapshot; the statements are
written once here, with ``?`` placeholders.

An impression's candidates (ids, ranking, propensities) and their features are kept packed
and compressed (:mod:`.encoding`), each feature set's names once in ``feature_sets``.

The store also keeps what the click features are computed from (:mod:`reranker.features.clicks`
computes them; the store returns counts):
every logged impression adds its shown documents' position-weighted exposures, and every
click adds one click and, when it fell in a pair the learner randomised, the counts of the
position-bias estimate. Both are written in the same transaction as the impression or the
click, so the counts always agree with the log, and a search only ever sees clicks made
before it (the features it was ranked with are logged with it, never recomputed).
"""

from __future__ import annotations

import abc
import contextlib
import functools
import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from reranker.core.errors import (
    ConflictError,
    NotFoundError,
    RerankerError,
    StoreError,
    UnprocessableError,
)
from reranker.features.clicks import PositionBias, query_key
from reranker.features.clicks.position_bias import randomized_pairs
from reranker.stores.base import PAGE_BATCH, EventStore, Reader, Retained
from reranker.stores.count_cache import ALL_DOCS, ALL_QUERIES, CLICKS, EXPOSURE, CountCache
from reranker.stores.encoding import (
    pack_candidates,
    pack_features,
    unpack_candidates,
    unpack_features,
)
from reranker.stores.events import (
    NOT_LEARNED,
    ClickResult,
    Impression,
    RewardResult,
    ServedPage,
)
from reranker.stores.group_commit import GroupCommit
from reranker.stores.write_behind import WriteBehind

log = logging.getLogger(__name__)

SCHEMA_VERSION = 5

#: Indexes on columns that a migration adds: created after the migrations ran.
LATE_INDEXES = ("CREATE INDEX IF NOT EXISTS impressions_open ON impressions (created) "
                "WHERE closed_seq IS NULL",
                "CREATE INDEX IF NOT EXISTS impressions_experiment ON impressions "
                "(experiment, closed_seq) WHERE experiment IS NOT NULL",
                "CREATE INDEX IF NOT EXISTS impressions_page ON impressions (page_key, created) "
                "WHERE page_key IS NOT NULL AND page_offset = 0")

#: Clicks written in one transaction at most (also bounds the ``IN (...)`` list of the
#: impressions they are on); also the impressions retention removes per transaction.
CLICK_BATCH = 500
#: A query's click counts are read in one range when it has at most this many cells per
#: candidate (:meth:`SQLEventStore._read_query_cells`).
QUERY_CELLS = 2
_GROUP_LOCK = threading.Lock()
#: Impressions a process queues for the store at most while the store fails: beyond them,
#: a search answers 503 (:mod:`.write_behind`).
PENDING_IMPRESSIONS = 10_000
#: Seconds the impression writer waits for more impressions before it writes what it has
#: (unless a click or a read waits for them).
IMPRESSION_LINGER = 0.01

UPSERT_STATS = ("INSERT INTO click_stats (query_key, doc_id, clicks, exposure, updated) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (query_key, doc_id) DO UPDATE SET "
                "clicks = click_stats.clicks + excluded.clicks, "
                "exposure = click_stats.exposure + excluded.exposure, "
                "updated = excluded.updated")
#: Queries whose click counts one statement of retention deletes at most.
FORGET_BATCH = 1000
#: The queries none of whose click counts changed since a time (retention's): the counts per
#: document over all queries and the total (``ALL_QUERIES``) are never among them.
STALE_QUERIES = ("SELECT query_key FROM click_stats WHERE query_key <> ? GROUP BY query_key "
                 "HAVING MAX(updated) < ? LIMIT ?")
UPSERT_REQUESTS = ("INSERT INTO request_counts (scope, slot, client, requests, mark) "
                   "VALUES (?, ?, ?, ?, ?) ON CONFLICT (scope, slot, client) DO UPDATE SET "
                   "requests = request_counts.requests + excluded.requests, "
                   "mark = excluded.mark")
UPSERT_BIAS = ("INSERT INTO position_bias (position, upper, lower) VALUES (?, ?, ?) "
               "ON CONFLICT (position) DO UPDATE SET upper = position_bias.upper + "
               "excluded.upper, lower = position_bias.lower + excluded.lower")


class SQLEventStore(EventStore):
    """The statements and rules of the SQL stores (:class:`EventStore`'s documentation says
    what each method guarantees)."""

    #: Seconds a read of the position-bias counts is reused when logging exposures.
    BIAS_REFRESH = 1.0
    #: Appended to a ``SELECT`` of rows that the transaction goes on to change or that must
    #: not change before it commits (PostgreSQL: ``FOR UPDATE``; SQLite's write transactions
    #: already exclude each other).
    FOR_UPDATE = ""
    #: The clicked positions of an impression, comma-separated, as a SQL aggregate.
    CLICK_POSITIONS = "group_concat(position)"
    #: The column type of bytes.
    BINARY = "BLOB"

    _bias: tuple[float, PositionBias] | None = None
    #: Seconds a store operation waits (``store.timeout``).
    timeout: float = 10.0
    #: Seconds the click counts read by this object serve before they are read again
    #: (``features.click_refresh``; :mod:`.count_cache`).
    click_refresh: float = 1.0
    #: Seconds after which retention deletes the counts of a query searched no more
    #: (``store.retention``): the counts this object keeps are read again after as long.
    click_memory: float | None = None

    # -- what a database says: connections and transactions ------------------------------------

    @abc.abstractmethod
    def _connection(self) -> contextlib.AbstractContextManager:
        """A connection (in autocommit mode) for the reads of one method."""

    @abc.abstractmethod
    def _write(self, durable: bool = True) -> contextlib.AbstractContextManager:
        """A write transaction on a connection: committed (durably when ``durable``) at the
        end of the block, rolled back when it raises; database errors become
        :class:`StoreError`."""

    @abc.abstractmethod
    def _snapshot(self) -> contextlib.AbstractContextManager:
        """A connection in a read transaction: every statement sees the same state."""

    #: The database driver's error classes: raised by a statement, they become a
    #: :class:`StoreError` (503) naming the store.
    DB_ERRORS: tuple[type[BaseException], ...] = ()

    #: The driver's errors of a value the database refuses, whatever its state (not the
    #: store's trouble): a write that raises one fails again if tried again.
    DATA_ERRORS: tuple[type[BaseException], ...] = ()

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except self.DB_ERRORS as exc:
            if self._is_damage(exc):
                raise self._damaged(self._error_text(exc)) from exc
            error = StoreError(f"event store {self.location} failed: {self._error_text(exc)}")
            error.permanent = isinstance(exc, self.DATA_ERRORS)
            raise error from exc

    # -- damage: files corrupt or truncated -----------------------------------------------------

    #: Seconds between two checks of a store found damaged (:meth:`check_damage`; a check
    #: may read the whole database).
    DAMAGE_RECHECK = 5.0
    _damage: str | None = None
    _damage_checked = 0.0

    def _is_damage(self, exc: BaseException) -> bool:
        """Whether a driver's error says the database's files are damaged."""
        return False

    def _verify(self) -> str | None:
        """Check the whole database; what is wrong, or None when it is sound."""
        return None

    def _damage_note(self) -> str | None:
        """What another process found damaged in this store, when they can say (a file
        beside an SQLite database)."""
        return None

    def _note_damage(self, text: str | None) -> None:
        """Tell this store's other processes that it is damaged (``text``) or sound
        (None)."""

    def _repair_advice(self) -> str:
        return "restore it from a backup"

    def _damaged(self, text: str, found: bool = True) -> StoreError:
        """The error of a store found damaged (``text``: the driver's words), noted so that
        the health checks report it until a check finds the store sound. Only damage
        ``found`` now (by a statement or a check) is noted for the other processes: what
        this process merely still remembers is not, or a process that had found the
        restored store sound would be told again that it is damaged, and two processes could
        pass the old news back and forth for as long as their checks fall out of step."""
        if self._damage is None:
            log.error("event store %s is damaged: %s", self.location, text)
            self._damage_checked = time.monotonic()
        self._damage = text
        if found:
            self._note_damage(text)
        error = StoreError(f"event store {self.location} is damaged ({text}): "
                           f"{self._repair_advice()}")
        error.damaged = True
        return error

    def check_damage(self) -> None:
        damage = self._damage or self._damage_note()
        if damage is None:
            return
        if time.monotonic() - self._damage_checked >= self.DAMAGE_RECHECK:
            self._damage_checked = time.monotonic()
            try:
                found = self._verify()
            except self.DB_ERRORS as exc:
                if not self._is_damage(exc):  # (busy, locked: the check could not say)
                    raise self._damaged(damage, found=False) from exc
                found = self._error_text(exc)
            damage = found
            if damage is None:
                log.warning("event store %s is sound again", self.location)
                self._damage = None
                self._note_damage(None)
                return
            raise self._damaged(damage)
        raise self._damaged(damage, found=False)

    def _error_text(self, exc: BaseException) -> str:
        """What a database error says, fit for a message (no secrets)."""
        return str(exc)

    def _run(self, conn, sql: str, args: Sequence = ()):
        """Execute ``sql`` (``?`` placeholders) and return the cursor."""
        return conn.execute(sql, args)

    def _run_many(self, conn, sql: str, rows: list[Sequence]) -> None:
        conn.executemany(sql, rows)

    @contextlib.contextmanager
    def _reading(self, flush: bool = True) -> Iterator[Any]:
        """A connection for reads that see every impression this object has logged (those
        still queued are written first), or, without ``flush``, what is written so far."""
        if flush:
            self.flush()
        with self._errors(), self._connection() as conn:
            yield conn

    def flush(self) -> None:
        """Wait until every impression this object has logged is written (``StoreError``
        when the store fails meanwhile, or after ``store.timeout`` seconds)."""
        if self.queued_impressions:
            self._impressions().flush(self.timeout)

    # -- writing ----------------------------------------------------------------------------

    def log_impression(self, imp: Impression) -> None:
        """Queue a served page and its shown documents' exposures for this object's writer
        thread, which writes everything queued in one transaction, not made durable by
        itself (:mod:`.write_behind`). The search's answer does not wait for the store; the
        next durable write (a click) makes the impression durable too, and waits for it to
        be written first, as every read of this object does. Until written, its exposures
        count in :meth:`click_counts` from this object's queue."""
        theta = self.position_bias().weights(imp.offset + imp.n_shown)[imp.offset:]
        exposures = exposure_rows(query_key(imp.query), imp.shown_ids(), theta) \
            if imp.learned else []
        self._counts.queue(imp.id, exposures)
        try:
            self._impressions().put(_Queued(imp, exposures))
        except BaseException:
            self._counts.unqueue([imp.id])
            raise

    @property
    def queued_impressions(self) -> int:
        log = self.__dict__.get("_impression_log")
        return 0 if log is None else log.pending

    def impressions_waiting(self) -> tuple[int, str | None]:
        log = self.__dict__.get("_impression_log")
        return (0, None) if log is None else (log.pending, log.failure)

    def _stop_writers(self) -> None:
        """Write the impressions still queued (for up to ``store.timeout`` seconds) and stop
        the writer thread: the first step of :meth:`close`."""
        log = self.__dict__.get("_impression_log")
        if log is not None:
            log.close(self.timeout)  # writes what is queued, then refuses more
            self.__dict__.pop("_impression_log", None)

    def _impressions(self) -> WriteBehind:
        """The writer of this object's impressions, made on first use."""
        return self._part("_impression_log", lambda: WriteBehind(
            self._log_impressions, name=f"{self.name} impression writer",
            what="impressions", store=self.location, max_batch=CLICK_BATCH,
            max_pending=PENDING_IMPRESSIONS, linger=IMPRESSION_LINGER,
            dropped=lambda items: self._counts.unqueue(i.impression.id for i in items)))

    @property
    def _counts(self) -> CountCache:
        """The click counts this object has read, with its own writes (:mod:`.count_cache`)."""
        return self._part("_count_cache", lambda: CountCache(
            self.click_refresh, timeout=self.timeout, max_age=self.click_memory))

    def _part(self, name: str, make: Callable[[], Any]) -> Any:
        """The part of this object kept as ``name`` (its writer, its group commits, its
        count cache), made on first use, once."""
        part = self.__dict__.get(name)
        if part is None:
            with _GROUP_LOCK:
                part = self.__dict__.get(name)
                if part is None:
                    part = self.__dict__[name] = make()
        return part

    def _log_impressions(self, items: Sequence[_Queued]) -> None:
        """Impression rows (each with its feature names) and their exposure rows in one
        transaction; the exposures of the same document added up, and written sorted (one
        order for every writer: two transactions upserting the same rows in different orders
        could deadlock where the database locks rows, PostgreSQL). An impression already
        in the store (a batch tried again after a commit whose answer was lost) is left as
        it is, its exposures not counted again."""
        with contextlib.ExitStack() as stack:
            with self._write(durable=False) as conn:
                ids = [item.impression.id for item in items]
                marks = ",".join("?" * len(ids))
                there = {found for (found,) in self._run(
                    conn, f"SELECT id FROM impressions WHERE id IN ({marks})", ids).fetchall()}
                new = [item for item in items if item.impression.id not in there]
                exposures: dict[tuple[str, str], float] = {}
                for item in new:
                    for key, doc_id, weight in item.exposures:
                        exposures[key, doc_id] = exposures.get((key, doc_id), 0.0) + weight
                names = [_names_text(item.impression.feature_names) for item in new]
                sets = self._feature_set_ids(conn, set(names))
                self._run_many(
                    conn,
                    "INSERT INTO impressions (feature_set, id, created, query, user_id, "
                    "learner, model_version, candidates, features, n_shown, log_prob, teams, "
                    "context, arm, experiment, page_offset, page_key) VALUES (?, ?, ?, ?, ?, "
                    "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(sets[text], *_impression_row(item.impression))
                     for text, item in zip(names, new, strict=True)])
                now = time.time()
                self._run_many(conn, UPSERT_STATS, sorted(
                    (key, doc_id, 0.0, weight, now) for (key, doc_id), weight
                    in exposures.items()))
                stack.enter_context(self._counts.committing())  # then COMMIT
            self._counts.committed(exposures, EXPOSURE, ids)
        self._known_sets.update(sets)  # committed: other processes see them too

    @property
    def _known_sets(self) -> dict[str, int]:
        """The ids of the feature sets this object has seen committed, by their names."""
        return self.__dict__.setdefault("_feature_sets", {})

    def _feature_set_ids(self, conn, names: Iterable[str]) -> dict[str, int]:
        """The id of each feature set (its names as a JSON list) in ``feature_sets``, added
        in the caller's transaction when it is new."""
        ids = {}
        for text in names:
            known = self._known_sets.get(text)
            if known is None:
                self._run(conn, "INSERT INTO feature_sets (names) VALUES (?) ON CONFLICT "
                          "DO NOTHING", (text,))
                known = self._run(conn, "SELECT id FROM feature_sets WHERE names = ?",
                                  (text,)).fetchone()[0]
            ids[text] = known
        return ids

    def record_click(self, impression_id: str, doc_id: str,
                     now: float | None = None) -> ClickResult:
        """Store a click, durably when this returns. Concurrent calls share one commit
        (:mod:`.group_commit`): one transaction and one flush to disk for all the clicks that
        arrived while the previous commit was under way."""
        now = time.time() if now is None else now
        return self._commits("_click_group", self.record_clicks).submit(
            (impression_id, doc_id, now))

    def _commits(self, name: str, write_batch) -> GroupCommit:
        """The store's group commit of one kind of write, made on first use."""
        return self._part(name, lambda: GroupCommit(write_batch, CLICK_BATCH))

    def record_clicks(self, clicks: Sequence[tuple[str, str, float]]
                      ) -> list[ClickResult | RerankerError]:
        self.flush()  # the impressions clicked on are written first
        outcomes: list[ClickResult | RerankerError] = []
        for start in range(0, len(clicks), CLICK_BATCH):
            outcomes.extend(self._record_batch(clicks[start:start + CLICK_BATCH]))
        return outcomes

    def _record_batch(self, clicks: Sequence[tuple[str, str, float]]
                      ) -> list[ClickResult | RerankerError]:
        """At most :data:`CLICK_BATCH` clicks in one durable transaction. Every row it
        changes is taken in one order that every writer shares (the impressions by
        ``created, seq``, as closing takes them; the counts sorted, as logging an impression
        writes them), so that two transactions never wait for each other in a circle where
        the database locks rows (PostgreSQL). A click's own error is raised before it writes
        anything, so it leaves the others of the transaction as they are. The counts it
        adds go to this object's count cache as it commits (:mod:`.count_cache`)."""
        with contextlib.ExitStack() as stack:
            outcomes, stats = self._write_clicks(clicks, stack)
            if stats:  # committed, the count cache's gate still held since before COMMIT
                self._counts.committed(stats, CLICKS)
        return outcomes

    def _write_clicks(self, clicks: Sequence[tuple[str, str, float]],
                      stack: contextlib.ExitStack
                      ) -> tuple[list[ClickResult | RerankerError], dict[tuple[str, str], float]]:
        """:meth:`_record_batch`'s transaction; the outcomes, and the clicks it added to each
        ``click_stats`` cell. When it adds any, it takes the count cache's commit gate just
        before its ``COMMIT``, onto ``stack``."""
        ids = sorted({click[0] for click in clicks})
        marks = ",".join("?" * len(ids))
        outcomes: list[ClickResult | RerankerError] = []
        stats: dict[tuple[str, str], float] = {}
        bias: dict[int, list[float]] = {}
        with self._write(durable=True) as conn:
            rows = {row[0]: row for row in self._run(
                conn, f"SELECT id, candidates, n_shown, closed_seq, query, context, "
                f"page_offset FROM impressions WHERE id IN ({marks}) ORDER BY created, seq"
                + self.FOR_UPDATE, ids).fetchall()}
            shown_of: dict[str, list[str]] = {}
            for impression_id, doc_id, now in clicks:
                row = rows.get(impression_id)
                if row is None:
                    outcomes.append(NotFoundError(f"unknown impression_id {impression_id!r}",
                                                  field="impression_id"))
                    continue
                offset, n_shown = row[6], row[2]
                shown = shown_of.get(impression_id)
                if shown is None:
                    doc_ids, ranking, _ = unpack_candidates(row[1])
                    shown = shown_of[impression_id] = [doc_ids[i] for i in
                                                       ranking[offset: offset + n_shown]]
                if doc_id not in shown:
                    outcomes.append(UnprocessableError(f"doc_id {doc_id!r} was not shown in "
                                                       f"impression {impression_id!r}",
                                                       field="doc_id"))
                    continue
                position = offset + shown.index(doc_id) + 1  # its rank in the whole ranking
                if row[3] is not None:
                    existing = self._run(conn, "SELECT 1 FROM clicks WHERE impression_id = ? "
                                         "AND doc_id = ?", (impression_id, doc_id)).fetchone()
                    outcomes.append(
                        ClickResult(impression_id, doc_id, position, duplicate=True)
                        if existing is not None else
                        ConflictError(f"impression {impression_id!r} no longer accepts "
                                      f"clicks: its feedback window has closed and it was "
                                      f"trained on", field="impression_id"))
                    continue
                cur = self._run(conn, "INSERT INTO clicks (impression_id, doc_id, position, "
                                "created) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                                (impression_id, doc_id, position, now))
                duplicate = cur.rowcount == 0
                outcomes.append(ClickResult(impression_id, doc_id, position, duplicate))
                context = json.loads(row[5]) if row[5] else None
                if duplicate or (context or {}).get(NOT_LEARNED):
                    continue
                for cell in stat_cells(query_key(row[4]), doc_id):
                    stats[cell] = stats.get(cell, 0.0) + 1.0
                pairs, p = randomized_pairs(None if offset else context, n_shown)
                for upper, top, bottom in PositionBias.pair_counts(pairs, p, [position - 1]):
                    entry = bias.setdefault(upper, [0.0, 0.0])
                    entry[0] += top
                    entry[1] += bottom
            if stats:
                now = time.time()
                self._run_many(conn, UPSERT_STATS, sorted(
                    (key, doc_id, clicks, 0.0, now) for (key, doc_id), clicks
                    in stats.items()))
            if bias:
                self._run_many(conn, UPSERT_BIAS, sorted(
                    (upper, top, bottom) for upper, (top, bottom) in bias.items()))
            if stats:
                stack.enter_context(self._counts.committing())  # then COMMIT
        return outcomes, stats

    def record_reward(self, impression_id: str, value: float,
                      now: float | None = None) -> RewardResult:
        now = time.time() if now is None else now
        self.flush()
        with self._write(durable=True) as conn:
            row = self._run(conn, "SELECT closed_seq FROM impressions WHERE id = ?"
                            + self.FOR_UPDATE, (impression_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"unknown impression_id {impression_id!r}",
                                    field="impression_id")
            before = self._run(conn, "SELECT value FROM rewards WHERE impression_id = ?",
                               (impression_id,)).fetchone()
            before = None if before is None else before[0]
            if row[0] is not None:
                if before == value:
                    return RewardResult(impression_id, value, before)
                raise ConflictError(f"impression {impression_id!r} no longer accepts a reward: "
                                    f"its feedback window has closed and it was trained on",
                                    field="impression_id")
            self._run(conn, "INSERT INTO rewards (impression_id, value, created) VALUES "
                      "(?, ?, ?) ON CONFLICT (impression_id) DO UPDATE SET value = "
                      "excluded.value, created = excluded.created", (impression_id, value, now))
            return RewardResult(impression_id, value, before)

    def close_impressions(self, before: float, limit: int | None = None) -> int:
        self.flush()
        with self._write(durable=True) as conn:
            # The counter first: two closers wait for each other here, so the numbers one
            # hands out are committed before the other reads the counter.
            start = int(self._run(conn, "SELECT value FROM meta WHERE key = 'closed_seq'"
                                  + self.FOR_UPDATE).fetchone()[0])
            rows = self._run(
                conn, "SELECT seq FROM impressions WHERE closed_seq IS NULL AND created < ? "
                "ORDER BY created, seq" + (" LIMIT ?" if limit else "") + self.FOR_UPDATE,
                (before, limit) if limit else (before,)).fetchall()
            if not rows:
                return 0
            self._run_many(conn, "UPDATE impressions SET closed_seq = ? WHERE seq = ?",
                           [(start + i + 1, seq) for i, (seq,) in enumerate(rows)])
            self._run(conn, "UPDATE meta SET value = ? WHERE key = 'closed_seq'",
                      (str(start + len(rows)),))
            return len(rows)

    def update_experiment_state(self, name: str, change, now: float) -> dict[str, Any]:
        with self._write(durable=True) as conn:
            # The row exists before it is read for update, so that two first changes wait
            # for each other too (a missing row cannot be locked).
            self._run(conn, "INSERT INTO experiment_state (name, state, updated) VALUES "
                      "(?, '{}', ?) ON CONFLICT DO NOTHING", (name, now))
            row = self._run(conn, "SELECT state FROM experiment_state WHERE name = ?"
                            + self.FOR_UPDATE, (name,)).fetchone()
            state = change(json.loads(row[0]))
            self._run(conn, "UPDATE experiment_state SET state = ?, updated = ? WHERE name = ?",
                      (json.dumps(state), now, name))
        return state

    # -- retention --------------------------------------------------------------------------

    def retain(self, before: float, readers: Sequence[Reader],
               keep_experiment: str | None = None) -> Retained:
        """In transactions of at most :data:`CLICK_BATCH` impressions, oldest first, each
        short enough that searches and clicks hardly wait for it. Only impressions logged
        before the first one (in logging order) that is recent or still open are looked at,
        so that a pass reads no more than the impressions it may remove (and those of
        ``keep_experiment`` compacted already)."""
        applied, applied_args = [], []
        for reader in readers:  # applied by the reader, or not one it reads
            marks = ",".join("?" * len(reader.arms))
            applied.append(f" AND (closed_seq <= ? OR (arm IS NOT NULL AND arm NOT IN "
                           f"({marks})))")
            applied_args += [reader.cursor, *reader.arms]
        with self._reading() as conn:
            end = self._run(conn, "SELECT COALESCE((SELECT seq FROM impressions WHERE "
                            "created >= ? OR closed_seq IS NULL ORDER BY seq LIMIT 1), "
                            "(SELECT MAX(seq) + 1 FROM impressions), 0)", (before,)
                            ).fetchone()[0]
        deleted = compacted = 0
        after = 0
        while True:
            with self._write(durable=False) as conn:
                rows = self._run(
                    conn, "SELECT seq, id, experiment, features IS NULL FROM impressions "
                    "WHERE seq > ? AND seq < ? AND created < ? AND closed_seq IS NOT NULL"
                    + "".join(applied) + " ORDER BY seq LIMIT ?",
                    (after, end, before, *applied_args, CLICK_BATCH)).fetchall()
                gone, emptied = [], []
                for seq, id_, experiment, bare in rows:
                    if keep_experiment is None or experiment != keep_experiment:
                        gone.append((seq, id_))
                    elif not bare:
                        emptied.append(seq)
                if gone:
                    marks = ",".join("?" * len(gone))
                    ids = [id_ for _, id_ in gone]
                    self._run(conn, f"DELETE FROM clicks WHERE impression_id IN ({marks})", ids)
                    self._run(conn, f"DELETE FROM rewards WHERE impression_id IN ({marks})", ids)
                    self._run(conn, f"DELETE FROM impressions WHERE seq IN ({marks})",
                              [seq for seq, _ in gone])
                if emptied:
                    self._run(conn, f"UPDATE impressions SET features = NULL WHERE seq IN "
                              f"({','.join('?' * len(emptied))})", emptied)
            deleted += len(gone)
            compacted += len(emptied)
            if len(rows) < CLICK_BATCH:
                return Retained(deleted, compacted, self._forget_queries(before))
            after = rows[-1][0]

    def _forget_queries(self, before: float) -> int:
        """Delete the click counts of the queries none of whose counts changed since
        ``before`` (no page of theirs shown, no click), :data:`FORGET_BATCH` queries per
        transaction; how many queries. A cell written meanwhile is kept (the row's own time
        is checked again as it is deleted)."""
        forgotten = 0
        while True:
            with self._write(durable=False) as conn:
                keys = [row[0] for row in self._run(
                    conn, STALE_QUERIES, (ALL_QUERIES, before, FORGET_BATCH)).fetchall()]
                if keys:
                    self._run(conn, f"DELETE FROM click_stats WHERE updated < ? AND query_key "
                              f"IN ({','.join('?' * len(keys))})", (before, *keys))
            forgotten += len(keys)
            if len(keys) < FORGET_BATCH:
                return forgotten

    # -- migrating ----------------------------------------------------------------------------

    def _migrate_from_3(self, conn) -> None:
        """Schema 3 -> 4, in the caller's transaction: every impression's ids, ranking,
        propensities and features packed (:mod:`.encoding`), and its feature names replaced
        by its feature set's id. The space the old rows took is reused for new ones."""
        self._run(conn, "ALTER TABLE impressions RENAME COLUMN features TO features_3")
        for column in ("feature_set BIGINT REFERENCES feature_sets (id)",
                       f"candidates {self.BINARY}", f"features {self.BINARY}"):
            self._run(conn, f"ALTER TABLE impressions ADD COLUMN {column}")
        after = 0
        while True:
            rows = self._run(conn, "SELECT seq, feature_names, doc_ids, ranking, propensities, "
                             "features_3 FROM impressions WHERE seq > ? ORDER BY seq LIMIT 1000",
                             (after,)).fetchall()
            if not rows:
                break
            sets = self._feature_set_ids(conn, {row[1] for row in rows})
            self._run_many(conn, "UPDATE impressions SET feature_set = ?, candidates = ?, "
                           "features = ? WHERE seq = ?", [
                               (sets[names], pack_candidates(
                                   json.loads(doc_ids), np.frombuffer(ranking, dtype=np.int32),
                                   None if propensities is None
                                   else np.frombuffer(propensities, dtype=np.float64)),
                                pack_features(np.frombuffer(features, dtype=np.float64).reshape(
                                    -1, len(json.loads(names)))), seq)
                               for seq, names, doc_ids, ranking, propensities, features in rows])
            after = rows[-1][0]
        for column in ("feature_names", "doc_ids", "ranking", "propensities", "features_3"):
            self._run(conn, f"ALTER TABLE impressions DROP COLUMN {column}")

    # -- reading ----------------------------------------------------------------------------

    def get_impression(self, impression_id: str) -> Impression:
        with self._reading() as conn:
            row = self._run(conn, f"SELECT {COLUMNS} FROM impressions WHERE id = ?",
                            (impression_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"unknown impression_id {impression_id!r}",
                                field="impression_id")
        imp = impression_from_row(row)
        imp.clicked = self._clicks([imp.id])[imp.id]
        return imp

    def closed_since(self, cursor: int, limit: int,
                     arms: tuple[str, ...] | None = None) -> list[Impression]:
        return self._closed_rows(cursor, limit, arms, COLUMNS)

    def closed_since_lean(self, cursor: int, limit: int,
                          arms: tuple[str, ...] | None = None) -> list[Impression]:
        """The candidates and features of an impression without a click or a reward are
        neither read nor decoded (most impressions of a site: reading and decoding them was
        most of a trainer's time)."""
        return self._closed_rows(cursor, limit, arms, LEAN_COLUMNS)

    def _closed_rows(self, cursor: int, limit: int, arms: tuple[str, ...] | None,
                     columns: str) -> list[Impression]:
        where, args = "closed_seq > ?", [cursor]
        if arms is not None:
            marks = ",".join("?" * len(arms))
            where += f" AND (arm IN ({marks}) OR arm IS NULL)"
            args.extend(arms)
        with self._reading() as conn:
            rows = self._run(conn, f"SELECT {columns} FROM impressions WHERE {where} ORDER BY "
                             f"closed_seq LIMIT ?", (*args, limit)).fetchall()
        imps = [impression_from_row(row) for row in rows]
        clicks = self._clicks([imp.id for imp in imps])
        for imp in imps:
            imp.clicked = clicks[imp.id]
        return imps

    def pages_since(self, since: float, arms: tuple[str, ...] | None = None
                    ) -> Iterator[ServedPage]:
        """Open and closed pages, a batch of :data:`PAGE_BATCH` per statement, each with
        its clicked ranks from ``clicks`` and, for a first page, its packed candidates (a
        later page's are not read). The first page of the window is found by walking the
        primary key from the oldest impression to the first created at ``since`` or later
        (logging order follows creation closely, so the walk stops near the window's start,
        and no impression before it can be in the window: it is the lowest ``seq`` in it);
        every batch after it is a range of the primary key."""
        with self._reading() as conn:
            start = self._run(conn, "SELECT seq FROM impressions WHERE created >= ? ORDER BY "
                              "seq LIMIT 1", (since,)).fetchone()
        if start is None:
            return
        where, args = "seq >= ? AND created >= ?", [start[0], since]
        if arms is not None:
            where += f" AND arm IN ({','.join('?' * len(arms))})"
            args.extend(arms)
        while True:
            with self._reading(flush=False) as conn:
                rows = self._run(
                    conn, f"SELECT seq, created, query, arm, page_offset, n_shown, CASE WHEN "
                    f"page_offset = 0 THEN candidates END, (SELECT {self.CLICK_POSITIONS} FROM "
                    f"clicks c WHERE c.impression_id = impressions.id) FROM impressions WHERE "
                    f"{where} ORDER BY seq LIMIT ?", (*args, PAGE_BATCH)).fetchall()
            for _, created, query, arm, offset, n_shown, candidates, positions in rows:
                yield ServedPage(
                    created, query, arm, offset, n_shown,
                    tuple(sorted(int(p) for p in positions.split(","))) if positions else (),
                    None if candidates is None else unpack_candidates(candidates)[1])
            if len(rows) < PAGE_BATCH:
                return
            args[0] = rows[-1][0] + 1

    def _clicks(self, impression_ids: list[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {i: [] for i in impression_ids}
        with self._reading() as conn:
            for start in range(0, len(impression_ids), 500):
                chunk = impression_ids[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for imp_id, doc_id in self._run(
                        conn, f"SELECT impression_id, doc_id FROM clicks WHERE impression_id IN "
                        f"({marks}) ORDER BY seq", chunk).fetchall():
                    out[imp_id].append(doc_id)
        return out

    def click_counts(self, query: str, doc_ids: list[str]
                     ) -> tuple[np.ndarray, tuple[float, float]]:
        """The counts of the clicks and impressions logged before (this object's own at once,
        even while queued; other processes' as ``features.click_refresh`` says:
        :mod:`.count_cache`)."""
        key = query_key(query)
        try:
            return self._counts.counts(key, doc_ids, self._read_cells, self._read_total,
                                       self._read_query_cells)
        except StoreError as exc:  # the search goes on with the counts this process keeps
            self._degraded("click counts", exc)
            return self._counts.known(key, doc_ids)

    def _degraded(self, what: str, exc: StoreError) -> None:
        """Log (once a minute at most) that a search went on without reading ``what``."""
        now, said = time.monotonic(), self.__dict__.setdefault("_degraded_at", {})
        if now - said.get(what, -math.inf) >= 60.0:
            said[what] = now
            log.warning("searches go on with the %s this process keeps: %s", what,
                        exc.message)

    def _read_cells(self, key: str, doc_ids: list[str], keep) -> None:
        """``keep(cells)`` with the ``click_stats`` cells of ``doc_ids`` under query ``key``
        and over all queries, and the total, as written (cells without a row are left out),
        read while no commit of this object runs (:mod:`.count_cache`). One statement reads
        them (one lookup of the primary key per cell, whatever the number of documents ever
        shown for the query); more documents than a statement's list holds take one
        statement per chunk, in one snapshot."""
        cells = {}
        chunks = range(0, max(len(doc_ids), 1), CLICK_BATCH)
        with self._snapshot() if len(chunks) > 1 else self._reading(flush=False) as conn, \
                self._counts.gate.shared():
            for start in chunks:
                chunk = doc_ids[start:start + CLICK_BATCH]
                marks = ",".join("?" * (len(chunk) + 1))
                cells.update({(row[0], row[1]): (row[2], row[3]) for row in self._run(
                    conn, f"SELECT query_key, doc_id, clicks, exposure FROM click_stats "
                    f"WHERE query_key IN (?, ?) AND doc_id IN ({marks})",
                    (key, ALL_QUERIES, ALL_DOCS, *chunk)).fetchall()})
            keep(cells)

    def _read_query_cells(self, key: str, doc_ids: list[str], keep) -> None:
        """``keep(cells)`` with the ``click_stats`` cells under query ``key`` and the total,
        read in one statement like :meth:`_read_cells`: every cell of the query, in one
        range of the primary key (none for a new query), unless it has more than
        :data:`QUERY_CELLS` per candidate (documents shown for it over many versions of the
        index), and then ``keep`` is not called (the count cache reads the candidates'
        cells instead)."""
        limit = QUERY_CELLS * max(len(doc_ids), 1)
        with self._reading(flush=False) as conn, self._counts.gate.shared():
            rows = self._run(
                conn, "SELECT query_key, doc_id, clicks, exposure FROM (SELECT query_key, "
                "doc_id, clicks, exposure FROM click_stats WHERE query_key = ? LIMIT ?) AS q "
                "UNION ALL SELECT query_key, doc_id, clicks, exposure FROM click_stats "
                "WHERE query_key = ? AND doc_id = ?",
                (key, limit + 1, ALL_QUERIES, ALL_DOCS)).fetchall()
            cells = {(row[0], row[1]): (row[2], row[3]) for row in rows}
            if len(cells) - ((ALL_QUERIES, ALL_DOCS) in cells) <= limit:
                keep(cells)

    def _read_total(self, compare) -> None:
        """``compare((clicks, exposure))`` with the total ``click_stats`` cell, read while no
        commit of this object runs (:mod:`.count_cache`)."""
        with self._reading(flush=False) as conn, self._counts.gate.shared():
            row = self._run(conn, "SELECT clicks, exposure FROM click_stats WHERE query_key = ? "
                            "AND doc_id = ?", (ALL_QUERIES, ALL_DOCS)).fetchone()
            compare((0.0, 0.0) if row is None else (row[0], row[1]))

    def position_bias(self, max_age: float | None = None) -> PositionBias:
        """The position-bias estimate from the counts logged so far (a read at most
        ``max_age`` seconds old, by default :attr:`BIAS_REFRESH`)."""
        max_age = self.BIAS_REFRESH if max_age is None else max_age
        now = time.monotonic()
        cached = self._bias
        if cached is not None and now - cached[0] <= max_age:
            return cached[1]
        try:
            with self._reading(flush=False) as conn:
                rows = self._run(conn, "SELECT position, upper, lower FROM position_bias "
                                 "ORDER BY position").fetchall()
        except StoreError as exc:  # a search's exposures take the last estimate read
            self._degraded("position-bias estimate", exc)
            return cached[1] if cached is not None else PositionBias(np.zeros(0), np.zeros(0))
        size = rows[-1][0] + 1 if rows else 0
        upper, lower = np.zeros(size), np.zeros(size)
        for position, top, bottom in rows:
            upper[position], lower[position] = top, bottom
        bias = PositionBias(upper, lower)
        self._bias = (now, bias)
        return bias

    def first_page(self, page_key: str, since: float) -> Impression | None:
        """A search reads it without waiting for the queue: the newer of the latest written
        and the latest still in this object's queue (alone while the store cannot be read)."""
        try:
            with self._reading(flush=False) as conn:
                row = self._run(conn, f"SELECT {COLUMNS} FROM impressions WHERE page_key = ? "
                                f"AND page_offset = 0 AND created >= ? ORDER BY created DESC "
                                f"LIMIT 1", (page_key, since)).fetchone()
        except StoreError as exc:
            self._degraded("first pages", exc)
            row = None
        pages = [] if row is None else [impression_from_row(row)]
        queue = self.__dict__.get("_impression_log")
        queued = None if queue is None else queue.last(
            lambda item: item.impression.page_key == page_key
            and item.impression.offset == 0 and item.impression.created >= since)
        if queued is not None:
            pages.append(queued.impression)
        return max(pages, key=lambda page: page.created, default=None)

    def experiment_rows(self, name: str, after: int, limit: int
                        ) -> list[tuple[int, str | None, str | None, int, list[int]]]:
        with self._reading() as conn:
            rows = self._run(
                conn, f"SELECT i.closed_seq, i.arm, i.teams, i.n_shown, (SELECT "
                f"{self.CLICK_POSITIONS} FROM clicks c WHERE c.impression_id = i.id) FROM "
                f"impressions i WHERE i.experiment = ? AND i.closed_seq > ? ORDER BY "
                f"i.closed_seq LIMIT ?", (name, after, limit)).fetchall()
        return [(seq, arm, teams, n_shown,
                 [int(p) for p in positions.split(",")] if positions else [])
                for seq, arm, teams, n_shown, positions in rows]

    def open_experiment_rows(self, name: str, limit: int
                             ) -> list[tuple[str | None, str | None, int, list[int]]]:
        with self._reading() as conn:
            rows = self._run(
                conn, f"SELECT i.arm, i.teams, i.n_shown, (SELECT {self.CLICK_POSITIONS} FROM "
                f"clicks c WHERE c.impression_id = i.id) FROM impressions i WHERE "
                f"i.experiment = ? AND i.closed_seq IS NULL ORDER BY i.seq DESC LIMIT ?",
                (name, limit)).fetchall()
        return [(arm, teams, n_shown, [int(p) for p in positions.split(",")] if positions else [])
                for arm, teams, n_shown, positions in reversed(rows)]

    def closed_first_pages(self, name: str, after: int, since: float, limit: int
                           ) -> tuple[int, int, int]:
        # Counted over every impression read, so the next call starts after all of them.
        with self._reading() as conn:
            last, pages, in_experiment = self._run(
                conn, "SELECT MAX(closed_seq), COALESCE(SUM(CASE WHEN page_offset = 0 AND "
                "created >= ? THEN 1 ELSE 0 END), 0), COALESCE(SUM(CASE WHEN page_offset = 0 "
                "AND created >= ? AND experiment = ? THEN 1 ELSE 0 END), 0) FROM (SELECT "
                "closed_seq, page_offset, created, experiment FROM impressions WHERE "
                "closed_seq > ? ORDER BY closed_seq LIMIT ?) AS t",
                (since, since, name, after, limit)).fetchone()
        return (after if last is None else int(last)), int(pages), int(in_experiment)

    def experiment_state(self, name: str) -> dict[str, Any]:
        # Searches read it: never behind the queue of impressions (a failing store would
        # fail them), and nothing queued changes it.
        with self._reading(flush=False) as conn:
            row = self._run(conn, "SELECT state FROM experiment_state WHERE name = ?",
                            (name,)).fetchone()
        return json.loads(row[0]) if row else {}

    def last_closed_seq(self) -> int:
        with self._reading() as conn:
            return int(self._run(conn, "SELECT value FROM meta WHERE key = 'closed_seq'")
                       .fetchone()[0])

    def signing_secret(self) -> str:
        # Made by the first process to ask; the others read the one it kept.
        with self._write(durable=True) as conn:
            self._run(conn, "INSERT INTO meta (key, value) VALUES ('signing_secret', ?) "
                      "ON CONFLICT DO NOTHING", (secrets.token_urlsafe(32),))
            return self._run(conn, "SELECT value FROM meta WHERE key = 'signing_secret'"
                             ).fetchone()[0]

    def record_trainer(self, status: Mapping[str, Any]) -> None:
        with self._write(durable=False) as conn:
            self._run(conn, "INSERT INTO meta (key, value) VALUES ('trainer_status', ?) ON "
                      "CONFLICT (key) DO UPDATE SET value = excluded.value",
                      (json.dumps(dict(status), allow_nan=False),))

    def experiment_names(self) -> list[str]:
        with self._reading() as conn:
            rows = self._run(conn, "SELECT DISTINCT experiment FROM impressions WHERE "
                             "experiment IS NOT NULL ORDER BY experiment").fetchall()
        return [row[0] for row in rows]

    def trainer_status(self) -> dict[str, Any] | None:
        with self._reading(flush=False) as conn:
            row = self._run(conn, "SELECT value FROM meta WHERE key = 'trainer_status'"
                            ).fetchone()
        try:
            status = json.loads(row[0]) if row else None
        except ValueError:
            return None
        return status if isinstance(status, dict) else None

    def pending(self, cursor: int) -> dict[str, Any]:
        # Impressions queued while writing them fails are not waited for: what is written
        # still answers (the health check counts the queued ones apart).
        with self._reading(flush=self.impressions_waiting()[1] is None) as conn:
            open_, oldest_open = self._run(conn, "SELECT COUNT(*), MIN(created) FROM "
                                           "impressions WHERE closed_seq IS NULL").fetchone()
            closed = self._run(conn, "SELECT COUNT(*) FROM impressions WHERE closed_seq > ?",
                               (cursor,)).fetchone()[0]
            oldest = self._run(conn, "SELECT created FROM impressions WHERE closed_seq > ? "
                               "ORDER BY closed_seq LIMIT 1", (cursor,)).fetchone()
        return {"open_impressions": open_, "closed_unapplied": closed,
                "oldest_unapplied": float(oldest[0]) if oldest else None,
                "oldest_open": float(oldest_open) if oldest_open is not None else None}

    def exchange_requests(self, added: Mapping[tuple[str, str, int], int], since: int,
                          prune: Mapping[str, int]
                          ) -> tuple[list[tuple[str, str, int, int]], int]:
        # The mark is taken by updating its meta row, which a concurrent exchange waits for
        # until this one commits: marks are handed out in the order of the commits, so a
        # reader that has seen a mark has seen every smaller one. The changed rows are read
        # in the same transaction: a read that failed after a commit would have the caller
        # add its requests again. A mark below ``since`` (a store that lost its last
        # commits in a crash) has everything read again.
        changed = ("SELECT scope, client, slot, requests, mark FROM request_counts "
                   "WHERE mark > ?")
        current = "SELECT value FROM meta WHERE key = 'request_mark'"
        with (self._write(durable=False) if added or prune
              else self._reading(flush=False)) as conn:
            if added:
                self._run(conn, "UPDATE meta SET value = CAST(CAST(value AS BIGINT) + 1 AS "
                          "TEXT) WHERE key = 'request_mark'")
            mark = int(self._run(conn, current).fetchone()[0])
            if added:
                self._run_many(conn, UPSERT_REQUESTS, sorted(
                    (scope, slot, client, n, mark) for (scope, client, slot), n in added.items()))
            for scope, oldest in prune.items():  # a range of the primary key
                self._run(conn, "DELETE FROM request_counts WHERE scope = ? AND slot < ?",
                          (scope, oldest))
            went_back = mark < since
            rows = self._run(conn, changed, (0 if went_back else since,)).fetchall()
        counts = [(r[0], r[1], int(r[2]), int(r[3])) for r in rows]
        if went_back:  # the caller learns so from a mark below its own
            return counts, mark
        return counts, max([since, *(int(r[4]) for r in rows)])

    def check_writable(self) -> None:
        with self._write() as conn:
            self._run(conn, "UPDATE meta SET value = value WHERE key = 'schema_version'")

    def stats(self) -> dict[str, Any]:
        with self._reading() as conn:
            impressions, open_, clicks = self._run(
                conn, "SELECT (SELECT COUNT(*) FROM impressions), "
                "(SELECT COUNT(*) FROM impressions WHERE closed_seq IS NULL), "
                "(SELECT COUNT(*) FROM clicks)").fetchone()
        return {"impressions": impressions, "open_impressions": open_, "clicks": clicks,
                "closed_seq": self.last_closed_seq()}


class _Queued(NamedTuple):
    """An impression waiting in the writer's queue (packed by the writer: the search that
    logged it does not wait for that), and its exposure rows."""

    impression: Impression
    exposures: list[tuple[str, str, float]]


def _impression_row(imp: Impression) -> tuple:
    """The columns of ``impressions`` after ``feature_set``, for :meth:`_log_impressions`."""
    return (imp.id, imp.created, imp.query, imp.user_id, imp.learner, imp.model_version,
            pack_candidates(imp.doc_ids, imp.ranking, imp.propensities),
            pack_features(imp.features), imp.n_shown, imp.log_prob,
            None if imp.teams is None else json.dumps(imp.teams),
            None if imp.context is None else json.dumps(imp.context), imp.arm,
            imp.experiment, imp.offset, imp.page_key)


@functools.lru_cache(maxsize=64)
def _names(names: tuple[str, ...]) -> str:
    return json.dumps(list(names))


def _names_text(names: list[str]) -> str:
    """A feature set's names as ``feature_sets.names`` keeps them (JSON)."""
    return _names(tuple(names))


def exposure_rows(key: str, shown: list[str], theta: np.ndarray) -> list[tuple[str, str, float]]:
    """``(query_key, doc_id, exposure)`` rows of ``click_stats`` for documents ``shown`` with
    the weights ``theta`` of their positions: each document's under the query and over all
    queries, and the total as one row instead of one per document."""
    rows = [(*cell, weight) for doc_id, weight in zip(shown, theta.tolist(), strict=True)
            for cell in stat_cells(key, doc_id)[:2]]
    rows.append((ALL_QUERIES, ALL_DOCS, float(theta.sum())))
    return rows


def stat_cells(key: str, doc_id: str) -> tuple[tuple[str, str], ...]:
    """The ``click_stats`` rows an event of ``doc_id`` under query ``key`` counts in: the
    query's, the document's over all queries, and the total."""
    return (key, doc_id), (ALL_QUERIES, doc_id), (ALL_QUERIES, ALL_DOCS)


COLUMNS = ("id, created, query, user_id, learner, model_version, (SELECT names FROM "
           "feature_sets WHERE feature_sets.id = impressions.feature_set), candidates, "
           "features, n_shown, log_prob, teams, closed_seq, context, arm, experiment, "
           "page_offset, page_key, "
           "(SELECT value FROM rewards WHERE rewards.impression_id = impressions.id)")


#: :data:`COLUMNS` with the candidates and features of an impression without a click or a
#: reward left out (NULL): such a row is read as a bare impression.
_EVIDENCE = ("EXISTS (SELECT 1 FROM clicks WHERE clicks.impression_id = impressions.id) OR "
             "EXISTS (SELECT 1 FROM rewards WHERE rewards.impression_id = impressions.id)")
LEAN_COLUMNS = COLUMNS.replace(
    "candidates, features,", f"CASE WHEN {_EVIDENCE} THEN candidates END, CASE WHEN "
                             f"{_EVIDENCE} THEN features END,", 1)


def impression_from_row(row: Sequence) -> Impression:
    """An :class:`Impression` from a row of :data:`COLUMNS` (``features`` None when
    retention compacted it), or of :data:`LEAN_COLUMNS` (bare without candidates)."""
    if row[7] is None:  # (candidates are never NULL in the table)
        return Impression(
            id=row[0], created=row[1], query=row[2], user_id=row[3], learner=row[4],
            model_version=row[5], doc_ids=[], feature_names=json.loads(row[6]), features=None,
            ranking=np.empty(0, dtype=np.intp), n_shown=row[9], log_prob=row[10],
            teams=None if row[11] is None else json.loads(row[11]), closed_seq=row[12],
            context=None if row[13] is None else json.loads(row[13]), arm=row[14],
            experiment=row[15], offset=row[16], page_key=row[17], reward=row[18], bare=True)
    doc_ids, ranking, propensities = unpack_candidates(row[7])
    return Impression(
        id=row[0], created=row[1], query=row[2], user_id=row[3], learner=row[4],
        model_version=row[5], doc_ids=doc_ids, feature_names=json.loads(row[6]),
        features=None if row[8] is None else unpack_features(row[8]), ranking=ranking,
        n_shown=row[9], log_prob=row[10], propensities=propensities,
        teams=None if row[11] is None else json.loads(row[11]), closed_seq=row[12],
        context=None if row[13] is None else json.loads(row[13]), arm=row[14],
        experiment=row[15], offset=row[16], page_key=row[17], reward=row[18])

"""The event store: impressions and clicks in SQLite (WAL).

An impression records everything needed to learn from it later without asking the backend
again: the candidates, their raw features, the ranking shown, who produced it (learner and
model version) and, for stochastic policies, the logged probabilities.

Lifecycle: an impression is *open* while it accepts clicks. Once its feedback window has
passed it is *closed* and numbered with a strictly increasing ``closed_seq``; clicks on it
are refused from then on. The trainer applies closed impressions in ``closed_seq`` order and
saves the highest number it applied inside the model file, so a restart neither loses nor
repeats an impression. A click is durable (``synchronous=FULL``) before ``/click`` answers.

The store also keeps what the click features are computed from (:mod:`reranker.clicks`):
every logged impression adds its shown documents' position-weighted exposures, and every
click adds one click and, when it fell in a pair the learner randomised, the counts of the
position-bias estimate. Both are written in the same transaction as the impression or the
click, so the counts always agree with the log, and a search only ever sees clicks made
before it (the features it was ranked with are logged with it, never recomputed).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .clicks import PositionBias, lifts_from_counts, query_key
from .clicks.position_bias import randomized_pairs
from .errors import ConflictError, NotFoundError, StoreError, UnprocessableError

SCHEMA_VERSION = 3

#: ``click_stats.query_key`` of the counts over all queries (a normalised query never holds
#: '*'), and ``doc_id`` of the counts over all documents.
ALL_QUERIES = "*"
ALL_DOCS = ""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS impressions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    created REAL NOT NULL,
    query TEXT NOT NULL,
    user_id TEXT,
    learner TEXT NOT NULL,
    model_version INTEGER NOT NULL,
    doc_ids TEXT NOT NULL,         -- JSON list, the candidates in backend order
    feature_names TEXT NOT NULL,   -- JSON list
    features BLOB NOT NULL,        -- float64 (candidates x features), raw
    ranking BLOB NOT NULL,         -- int32 candidate indices, as presented
    n_shown INTEGER NOT NULL,
    log_prob REAL,
    propensities BLOB,             -- float64 per candidate, when logged
    teams TEXT,                    -- JSON list: which learner contributed each shown hit
    closed_seq INTEGER UNIQUE,
    context TEXT,                  -- JSON: what the learner (or the experiment) logged
    arm TEXT,                      -- id of the arm that showed it alone; NULL: a mixed list
    experiment TEXT,               -- name of the experiment it was part of, if any
    page_offset INTEGER NOT NULL DEFAULT 0,  -- ranks before the shown ones (page 2: 10)
    page_key TEXT                  -- query, filters and user or session, for later pages
);
CREATE INDEX IF NOT EXISTS impressions_open ON impressions (created) WHERE closed_seq IS NULL;
CREATE TABLE IF NOT EXISTS clicks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    impression_id TEXT NOT NULL REFERENCES impressions (id),
    doc_id TEXT NOT NULL,
    position INTEGER NOT NULL,     -- 1-based rank at which the document was shown
    created REAL NOT NULL,
    UNIQUE (impression_id, doc_id)
);
""" + """
CREATE TABLE IF NOT EXISTS click_stats (
    query_key TEXT NOT NULL,       -- normalised query, or '*' for all queries
    doc_id TEXT NOT NULL,          -- or '' for all documents
    clicks REAL NOT NULL,
    exposure REAL NOT NULL,        -- sum of the examination probabilities of where it was shown
    PRIMARY KEY (query_key, doc_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS experiment_state (
    name TEXT PRIMARY KEY,         -- the experiment's name
    state TEXT NOT NULL,           -- JSON: promoted arm, held arms, with when and why
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS rewards (
    impression_id TEXT PRIMARY KEY REFERENCES impressions (id),
    value REAL NOT NULL,           -- the application's reward for the page (POST /reward)
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS position_bias (
    position INTEGER PRIMARY KEY,  -- 0-based upper position of a randomised adjacent pair
    upper REAL NOT NULL,           -- inverse-propensity-weighted clicks at it
    lower REAL NOT NULL            -- and at the position below it
);
"""

#: Indexes on columns that a migration adds: created after the migrations ran.
_LATE_INDEXES = ("CREATE INDEX IF NOT EXISTS impressions_experiment ON impressions "
                 "(experiment, closed_seq) WHERE experiment IS NOT NULL; "
                 "CREATE INDEX IF NOT EXISTS impressions_page ON impressions (page_key, created) "
                 "WHERE page_key IS NOT NULL AND page_offset = 0")

_UPSERT_STATS = ("INSERT INTO click_stats (query_key, doc_id, clicks, exposure) "
                 "VALUES (?, ?, ?, ?) ON CONFLICT (query_key, doc_id) DO UPDATE SET "
                 "clicks = clicks + excluded.clicks, exposure = exposure + excluded.exposure")
_UPSERT_BIAS = ("INSERT INTO position_bias (position, upper, lower) VALUES (?, ?, ?) "
                "ON CONFLICT (position) DO UPDATE SET upper = upper + excluded.upper, "
                "lower = lower + excluded.lower")


#: The context key of the probability that each shown result was shown at its position
#: (logged for the stochastic policies that can say it; off-policy evaluation reads it).
SHOWN_PROPENSITIES = "shown_propensities"


@dataclass(eq=False)
class Impression:
    """One logged search result page."""

    id: str
    created: float
    query: str
    user_id: str | None
    learner: str
    model_version: int
    doc_ids: list[str]
    feature_names: list[str]
    features: np.ndarray  # (n, m) raw
    ranking: np.ndarray  # (n,) candidate indices as presented
    n_shown: int
    log_prob: float | None = None
    propensities: np.ndarray | None = None
    teams: list[str] | None = None  # per shown position, when an experiment mixes learners
    context: dict | None = None  # what the learner logged with it (RankResult.context)
    arm: str | None = None  # id of the arm that showed it alone; None for a mixed list
    experiment: str | None = None  # the experiment it belongs to
    offset: int = 0  # ranks before the shown ones: the user saw ranking[offset:offset + n_shown]
    page_key: str | None = None  # query, filters and user or session (later pages find it)
    closed_seq: int | None = None
    clicked: list[str] | None = None  # doc ids, filled when read for training
    reward: float | None = None  # the application's reward for the page, if it sent one

    def shown(self) -> np.ndarray:
        """The shown candidates (indices), in the order shown."""
        return self.ranking[self.offset: self.offset + self.n_shown]

    def shown_ids(self) -> list[str]:
        return [self.doc_ids[i] for i in self.shown()]


@dataclass(frozen=True)
class ClickResult:
    impression_id: str
    doc_id: str
    position: int
    duplicate: bool


@dataclass(frozen=True)
class RewardResult:
    impression_id: str
    value: float
    replaced: float | None  # the value it replaced, if the page had one


class EventStore:
    """Impressions and clicks in one SQLite file; safe to share between threads and
    processes (each thread gets its own connection)."""

    #: Seconds a read of the position-bias counts is reused when logging exposures.
    BIAS_REFRESH = 1.0

    def __init__(self, path: str | Path, busy_timeout: float = 10.0):
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self._bias: tuple[float, PositionBias] | None = None
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        if not self.path.parent.is_dir():
            raise StoreError(f"store.path: folder {self.path.parent} does not exist")
        conn = self._conn()
        try:
            conn.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "INSERT OR IGNORE INTO meta VALUES "
                               f"('schema_version', '{SCHEMA_VERSION}'); INSERT OR IGNORE INTO "
                               "meta VALUES ('closed_seq', '0'); INSERT OR IGNORE INTO meta "
                               f"VALUES ('store_id', '{uuid.uuid4().hex}'); COMMIT;")
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            if int(meta["schema_version"]) == 1:
                self._migrate_from_1(conn)
                meta["schema_version"] = "2"
            if int(meta["schema_version"]) == 2:
                self._migrate_from_2(conn)
                meta["schema_version"] = str(SCHEMA_VERSION)
            if int(meta["schema_version"]) == SCHEMA_VERSION:
                conn.executescript(_LATE_INDEXES)
        except sqlite3.Error as exc:
            self.close()  # never leave a half-run transaction holding the write lock
            raise StoreError(f"store.path: {self.path} is not a usable SQLite database: "
                             f"{exc}") from exc
        if int(meta["schema_version"]) != SCHEMA_VERSION:
            self.close()
            raise StoreError(f"store.path: {self.path} has event schema version "
                             f"{meta['schema_version']}, this version of reranker reads "
                             f"{SCHEMA_VERSION} (and migrates 1 and 2); it was written by a "
                             f"newer reranker: upgrade reranker, or point store.path at a new "
                             f"file to start a new event log")
        #: Identifies this event log; a model's cursor is only valid for the log it came from.
        self.store_id: str = meta["store_id"]

    def _migrate_from_1(self, conn: sqlite3.Connection) -> None:
        """Schema 1 -> 2, in one transaction: the impressions' context column, and the click
        counts rebuilt from the log (exposures weighted by the prior position weights, since
        schema 1 kept no randomisation to estimate them from)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'")
                   .fetchone()[0]) == 1:  # another process may have migrated meanwhile
                conn.execute("ALTER TABLE impressions ADD COLUMN context TEXT")
                # Added up in memory and written once: the write lock is held for as short
                # a time as the log allows.
                bias = PositionBias()
                counts: dict[tuple[str, str], list[float]] = {}

                def count(key: str, doc_id: str, clicks: float, exposure: float) -> None:
                    for cell in _stat_cells(key, doc_id):
                        entry = counts.setdefault(cell, [0.0, 0.0])
                        entry[0] += clicks
                        entry[1] += exposure

                for query, doc_ids, ranking, n_shown in conn.execute(
                        "SELECT query, doc_ids, ranking, n_shown FROM impressions"):
                    ids = json.loads(doc_ids)
                    key = query_key(query)
                    shown = np.frombuffer(ranking, dtype=np.int32)[:n_shown].tolist()
                    for i, weight in zip(shown, bias.weights(n_shown).tolist(), strict=True):
                        count(key, ids[i], 0.0, weight)
                for query, doc_id in conn.execute(
                        "SELECT i.query, c.doc_id FROM clicks c JOIN impressions i ON "
                        "i.id = c.impression_id"):
                    count(query_key(query), doc_id, 1.0, 0.0)
                conn.executemany(_UPSERT_STATS, [(key, doc_id, clicks, exposure) for
                                                 (key, doc_id), (clicks, exposure)
                                                 in counts.items()])
                conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _migrate_from_2(self, conn: sqlite3.Connection) -> None:
        """Schema 2 -> 3, in one transaction: which arm showed an impression (the impressions
        logged before arms existed keep their learner's name, which the arm that takes over
        that learner's model folder answers to: :meth:`reranker.arms.Arm.prepare`), the
        experiment, and the experiments' state."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'")
                   .fetchone()[0]) == 2:
                conn.execute("ALTER TABLE impressions ADD COLUMN arm TEXT")
                conn.execute("ALTER TABLE impressions ADD COLUMN experiment TEXT")
                conn.execute("ALTER TABLE impressions ADD COLUMN page_offset INTEGER NOT NULL "
                             "DEFAULT 0")
                conn.execute("ALTER TABLE impressions ADD COLUMN page_key TEXT")
                conn.execute("UPDATE impressions SET arm = learner")
                conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                             (str(SCHEMA_VERSION),))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    # -- connections ------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(self.path, timeout=self.busy_timeout,
                                       isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA foreign_keys=ON")
            except sqlite3.Error as exc:
                raise StoreError(f"store.path: {self.path} is not a usable SQLite database: "
                                   f"{exc}") from exc
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    @contextlib.contextmanager
    def _write(self, conn: sqlite3.Connection,
               durable: bool = True) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error); SQLite failures become
        a :class:`StoreError` naming the file."""
        with self._sqlite_errors():
            conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every statement in it sees the same state of the store."""
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    @contextlib.contextmanager
    def _sqlite_errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"event store {self.path} failed: {exc}") from exc

    def close(self) -> None:
        with self._connections_lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    # -- writing ----------------------------------------------------------------------------

    def log_impression(self, imp: Impression) -> None:
        """Record a served page and its shown documents' exposures. Not fsynced by itself:
        the WAL is flushed by the next durable write (any click), and a click always refers
        to an impression written before it."""
        features = np.ascontiguousarray(imp.features, dtype=np.float64)
        theta = self.position_bias().weights(imp.offset + imp.n_shown)[imp.offset:]
        conn = self._conn()
        with self._write(conn, durable=False):
            conn.execute(
                "INSERT INTO impressions (id, created, query, user_id, learner, model_version, "
                "doc_ids, feature_names, features, ranking, n_shown, log_prob, propensities, "
                "teams, context, arm, experiment, page_offset, page_key) VALUES (?, ?, ?, ?, ?, "
                "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (imp.id, imp.created, imp.query, imp.user_id, imp.learner, imp.model_version,
                 json.dumps(imp.doc_ids), json.dumps(imp.feature_names), features.tobytes(),
                 np.asarray(imp.ranking, dtype=np.int32).tobytes(), imp.n_shown,
                 imp.log_prob,
                 None if imp.propensities is None
                 else np.asarray(imp.propensities, dtype=np.float64).tobytes(),
                 None if imp.teams is None else json.dumps(imp.teams),
                 None if imp.context is None else json.dumps(imp.context), imp.arm,
                 imp.experiment, imp.offset, imp.page_key))
            self._count_exposures(conn, query_key(imp.query), imp.shown_ids(), theta)

    @staticmethod
    def _count_exposures(conn: sqlite3.Connection, key: str, shown: list[str],
                         theta: np.ndarray) -> None:
        """Count the exposures ``theta`` (the weights of the shown positions) of the shown
        documents; the total gets one row instead of one per document."""
        rows = [(cell[0], cell[1], 0.0, weight)
                for doc_id, weight in zip(shown, theta.tolist(), strict=True)
                for cell in _stat_cells(key, doc_id)[:2]]
        rows.append((ALL_QUERIES, ALL_DOCS, 0.0, float(theta.sum())))
        conn.executemany(_UPSERT_STATS, rows)

    @staticmethod
    def _count_click(conn: sqlite3.Connection, key: str, doc_id: str) -> None:
        conn.executemany(_UPSERT_STATS, [(*cell, 1.0, 0.0) for cell in _stat_cells(key, doc_id)])

    def record_click(self, impression_id: str, doc_id: str,
                     now: float | None = None) -> ClickResult:
        """Store a click durably. Unknown impression: :class:`NotFoundError`; a document
        not shown in it: :class:`UnprocessableError`; a closed impression:
        :class:`ConflictError`. A repeated click is accepted and counted once."""
        now = time.time() if now is None else now
        conn = self._conn()
        with self._write(conn, durable=True):
            row = conn.execute("SELECT doc_ids, ranking, n_shown, closed_seq, query, context, "
                               "page_offset FROM impressions WHERE id = ?",
                               (impression_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"unknown impression_id {impression_id!r}")
            doc_ids = json.loads(row[0])
            ranking = np.frombuffer(row[1], dtype=np.int32)
            offset = row[6]
            shown = [doc_ids[i] for i in ranking[offset: offset + row[2]]]
            if doc_id not in shown:
                raise UnprocessableError(f"doc_id {doc_id!r} was not shown in impression "
                                         f"{impression_id!r}")
            position = offset + shown.index(doc_id) + 1  # its rank in the whole ranking
            if row[3] is not None:
                existing = conn.execute("SELECT 1 FROM clicks WHERE impression_id = ? AND "
                                        "doc_id = ?", (impression_id, doc_id)).fetchone()
                if existing is None:
                    raise ConflictError(f"impression {impression_id!r} no longer accepts clicks: "
                                        f"its feedback window has closed and it was trained on")
                return ClickResult(impression_id, doc_id, position, duplicate=True)
            cur = conn.execute("INSERT OR IGNORE INTO clicks (impression_id, doc_id, position, "
                               "created) VALUES (?, ?, ?, ?)",
                               (impression_id, doc_id, position, now))
            if cur.rowcount == 0:
                return ClickResult(impression_id, doc_id, position, duplicate=True)
            self._count_click(conn, query_key(row[4]), doc_id)
            pairs, p = randomized_pairs(json.loads(row[5]) if row[5] and not offset else None,
                                        row[2])
            counts = PositionBias.pair_counts(pairs, p, [position - 1])
            if counts:
                conn.executemany(_UPSERT_BIAS, counts)
            return ClickResult(impression_id, doc_id, position, duplicate=False)

    def record_reward(self, impression_id: str, value: float,
                      now: float | None = None) -> RewardResult:
        """Store the application's reward for a page durably (a later one replaces it while
        the page is open). Unknown impression: :class:`NotFoundError`; a closed impression:
        :class:`ConflictError`, unless it is the value already stored."""
        now = time.time() if now is None else now
        conn = self._conn()
        with self._write(conn, durable=True):
            row = conn.execute("SELECT closed_seq, (SELECT value FROM rewards WHERE "
                               "impression_id = ?) FROM impressions WHERE id = ?",
                               (impression_id, impression_id)).fetchone()
            if row is None:
                raise NotFoundError(f"unknown impression_id {impression_id!r}")
            closed, before = row
            if closed is not None:
                if before == value:
                    return RewardResult(impression_id, value, before)
                raise ConflictError(f"impression {impression_id!r} no longer accepts a reward: "
                                    f"its feedback window has closed and it was trained on")
            conn.execute("INSERT INTO rewards (impression_id, value, created) VALUES (?, ?, ?) "
                         "ON CONFLICT (impression_id) DO UPDATE SET value = excluded.value, "
                         "created = excluded.created", (impression_id, value, now))
            return RewardResult(impression_id, value, before)

    def close_impressions(self, before: float, limit: int | None = None) -> int:
        """Close open impressions created before ``before`` (oldest first, at most
        ``limit``), numbering them in order; return how many were closed."""
        conn = self._conn()
        with self._write(conn, durable=True):
            rows = conn.execute(
                "SELECT seq FROM impressions WHERE closed_seq IS NULL AND created < ? "
                "ORDER BY created, seq" + (" LIMIT ?" if limit else ""),
                (before, limit) if limit else (before,)).fetchall()
            if not rows:
                return 0
            start = int(conn.execute("SELECT value FROM meta WHERE key = 'closed_seq'")
                        .fetchone()[0])
            conn.executemany("UPDATE impressions SET closed_seq = ? WHERE seq = ?",
                             [(start + i + 1, seq) for i, (seq,) in enumerate(rows)])
            conn.execute("UPDATE meta SET value = ? WHERE key = 'closed_seq'",
                         (str(start + len(rows)),))
            return len(rows)

    # -- reading ----------------------------------------------------------------------------

    def get_impression(self, impression_id: str) -> Impression:
        with self._sqlite_errors():
            row = self._conn().execute(f"SELECT {_COLUMNS} FROM impressions WHERE id = ?",
                                       (impression_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"unknown impression_id {impression_id!r}")
        imp = _impression(row)
        imp.clicked = self._clicks([imp.id])[imp.id]
        return imp

    def closed_since(self, cursor: int, limit: int,
                     arms: tuple[str, ...] | None = None) -> list[Impression]:
        """Closed impressions with ``closed_seq > cursor`` in order, with their clicks; with
        ``arms``, only those one of these arm names showed alone, and the mixed lists."""
        where, args = "closed_seq > ?", [cursor]
        if arms is not None:
            marks = ",".join("?" * len(arms))
            where += f" AND (arm IN ({marks}) OR arm IS NULL)"
            args.extend(arms)
        with self._sqlite_errors():
            rows = self._conn().execute(
                f"SELECT {_COLUMNS} FROM impressions WHERE {where} ORDER BY closed_seq "
                f"LIMIT ?", (*args, limit)).fetchall()
        imps = [_impression(row) for row in rows]
        clicks = self._clicks([imp.id for imp in imps])
        for imp in imps:
            imp.clicked = clicks[imp.id]
        return imps

    def _clicks(self, impression_ids: list[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {i: [] for i in impression_ids}
        conn = self._conn()
        with self._sqlite_errors():
            for start in range(0, len(impression_ids), 500):
                chunk = impression_ids[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for imp_id, doc_id in conn.execute(
                        f"SELECT impression_id, doc_id FROM clicks WHERE impression_id IN "
                        f"({marks}) ORDER BY seq", chunk):
                    out[imp_id].append(doc_id)
        return out

    def click_features(self, query: str, doc_ids: list[str], smoothing: float) -> np.ndarray:
        """The click features of candidates ``doc_ids`` for ``query``, shape ``(n, 2)``
        (:func:`reranker.clicks.lifts_from_counts`), from the clicks and exposures logged so
        far."""
        key = query_key(query)
        counts = np.zeros((len(doc_ids), 4))
        where = {doc_id: i for i, doc_id in enumerate(doc_ids)}
        total = (0.0, 0.0)
        with self._sqlite_errors(), self._snapshot() as conn:
            # Documents shown for this query so far (usually fewer than the candidates).
            for doc_id, clicks, exposure in conn.execute(
                    "SELECT doc_id, clicks, exposure FROM click_stats WHERE query_key = ?",
                    (key,)):
                i = where.get(doc_id)
                if i is not None:
                    counts[i, 0], counts[i, 1] = clicks, exposure
            for start in range(0, len(doc_ids), 500):
                chunk = doc_ids[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for doc_id, clicks, exposure in conn.execute(
                        f"SELECT doc_id, clicks, exposure FROM click_stats WHERE query_key = ? "
                        f"AND doc_id IN ({marks})", (ALL_QUERIES, *chunk)):
                    i = where[doc_id]
                    counts[i, 2], counts[i, 3] = clicks, exposure
            row = conn.execute("SELECT clicks, exposure FROM click_stats WHERE query_key = ? "
                               "AND doc_id = ?", (ALL_QUERIES, ALL_DOCS)).fetchone()
            if row is not None:
                total = row
        return lifts_from_counts(counts, total[0], total[1], smoothing)

    def position_bias(self, max_age: float | None = None) -> PositionBias:
        """The position-bias estimate from the counts logged so far (a read at most
        ``max_age`` seconds old, by default :attr:`BIAS_REFRESH`)."""
        max_age = self.BIAS_REFRESH if max_age is None else max_age
        now = time.monotonic()
        cached = self._bias
        if cached is not None and now - cached[0] <= max_age:
            return cached[1]
        with self._sqlite_errors():
            rows = self._conn().execute("SELECT position, upper, lower FROM position_bias "
                                        "ORDER BY position").fetchall()
        size = rows[-1][0] + 1 if rows else 0
        upper, lower = np.zeros(size), np.zeros(size)
        for position, top, bottom in rows:
            upper[position], lower[position] = top, bottom
        bias = PositionBias(upper, lower)
        self._bias = (now, bias)
        return bias

    # -- experiments ------------------------------------------------------------------------

    def first_page(self, page_key: str, since: float) -> Impression | None:
        """The latest first page (offset 0) logged with ``page_key`` since ``since``, whose
        ranking later pages continue."""
        with self._sqlite_errors():
            row = self._conn().execute(
                f"SELECT {_COLUMNS} FROM impressions WHERE page_key = ? AND page_offset = 0 AND "
                f"created >= ? ORDER BY created DESC LIMIT 1", (page_key, since)).fetchone()
        return None if row is None else _impression(row)

    def experiment_rows(self, name: str, after: int, limit: int
                        ) -> list[tuple[int, str | None, str | None, int, list[int]]]:
        """The closed impressions of experiment ``name`` after ``closed_seq`` ``after``, in
        order, as ``(closed_seq, arm, teams JSON, n_shown, clicked 1-based positions)``:
        what its outcomes are counted from, without the features."""
        with self._sqlite_errors():
            rows = self._conn().execute(
                "SELECT i.closed_seq, i.arm, i.teams, i.n_shown, (SELECT group_concat(position) "
                "FROM clicks c WHERE c.impression_id = i.id) FROM impressions i WHERE "
                "i.experiment = ? AND i.closed_seq > ? ORDER BY i.closed_seq LIMIT ?",
                (name, after, limit)).fetchall()
        return [(seq, arm, teams, n_shown,
                 [int(p) for p in positions.split(",")] if positions else [])
                for seq, arm, teams, n_shown, positions in rows]

    def experiment_state(self, name: str) -> dict[str, Any]:
        """The shared state of experiment ``name`` (promotion, held arms); {} when none."""
        with self._sqlite_errors():
            row = self._conn().execute("SELECT state FROM experiment_state WHERE name = ?",
                                       (name,)).fetchone()
        return json.loads(row[0]) if row else {}

    def update_experiment_state(self, name: str, change, now: float) -> dict[str, Any]:
        """Replace the state of experiment ``name`` by ``change(state)``, atomically (two
        processes promoting at once see each other's change)."""
        conn = self._conn()
        with self._write(conn, durable=True):
            row = conn.execute("SELECT state FROM experiment_state WHERE name = ?",
                               (name,)).fetchone()
            state = change(json.loads(row[0]) if row else {})
            conn.execute("INSERT INTO experiment_state (name, state, updated) VALUES (?, ?, ?) "
                         "ON CONFLICT (name) DO UPDATE SET state = excluded.state, "
                         "updated = excluded.updated", (name, json.dumps(state), now))
        return state

    def last_closed_seq(self) -> int:
        """The highest ``closed_seq`` handed out so far."""
        with self._sqlite_errors():
            return int(self._conn().execute("SELECT value FROM meta WHERE key = 'closed_seq'")
                       .fetchone()[0])

    def pending(self, cursor: int) -> dict[str, int]:
        """Impressions still open, and closed ones after ``cursor`` (a model's) not yet
        applied (both counts use indexes, so this is cheap enough for a health check)."""
        with self._sqlite_errors():
            conn = self._conn()
            open_ = conn.execute("SELECT COUNT(*) FROM impressions WHERE closed_seq IS NULL"
                                 ).fetchone()[0]
            closed = conn.execute("SELECT COUNT(*) FROM impressions WHERE closed_seq > ?",
                                  (cursor,)).fetchone()[0]
        return {"open_impressions": open_, "closed_unapplied": closed}

    def stats(self) -> dict[str, Any]:
        with self._sqlite_errors():
            conn = self._conn()
            impressions, open_, clicks = conn.execute(
                "SELECT (SELECT COUNT(*) FROM impressions), "
                "(SELECT COUNT(*) FROM impressions WHERE closed_seq IS NULL), "
                "(SELECT COUNT(*) FROM clicks)").fetchone()
        return {"impressions": impressions, "open_impressions": open_, "clicks": clicks,
                "closed_seq": self.last_closed_seq()}


def _stat_cells(key: str, doc_id: str) -> tuple[tuple[str, str], ...]:
    """The ``click_stats`` rows an event of ``doc_id`` under query ``key`` counts in: the
    query's, the document's over all queries, and the total."""
    return (key, doc_id), (ALL_QUERIES, doc_id), (ALL_QUERIES, ALL_DOCS)


_COLUMNS = ("id, created, query, user_id, learner, model_version, doc_ids, feature_names, "
            "features, ranking, n_shown, log_prob, propensities, teams, closed_seq, context, "
            "arm, experiment, page_offset, page_key, "
            "(SELECT value FROM rewards WHERE rewards.impression_id = impressions.id)")


def _impression(row: tuple) -> Impression:
    names = json.loads(row[7])
    features = np.frombuffer(row[8], dtype=np.float64).reshape(-1, len(names))
    return Impression(
        id=row[0], created=row[1], query=row[2], user_id=row[3], learner=row[4],
        model_version=row[5], doc_ids=json.loads(row[6]), feature_names=names,
        features=features, ranking=np.frombuffer(row[9], dtype=np.int32).astype(np.intp),
        n_shown=row[10], log_prob=row[11],
        propensities=None if row[12] is None else np.frombuffer(row[12], dtype=np.float64),
        teams=None if row[13] is None else json.loads(row[13]), closed_seq=row[14],
        context=None if row[15] is None else json.loads(row[15]), arm=row[16],
        experiment=row[17], offset=row[18], page_key=row[19], reward=row[20])

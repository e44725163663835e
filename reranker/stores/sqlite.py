"""The embedded event store: one SQLite file (WAL), the default (``store.type: sqlite``).

Safe to share between the threads and processes of one machine (each thread gets its own
connection; write transactions are ``BEGIN IMMEDIATE``, so they exclude each other). A click
is durable (``synchronous=FULL``) before ``/click`` answers. Stores written by earlier
versions (schema 1 to 3) are migrated when opened.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sqlite3
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from reranker import hookimpl
from reranker.core.errors import StoreError
from reranker.core.forks import renew_in_child
from reranker.features.clicks import PositionBias, query_key
from reranker.stores.base import Leadership
from reranker.stores.sql import (
    LATE_INDEXES,
    SCHEMA_VERSION,
    SQLEventStore,
    stat_cells,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS feature_sets (
    id INTEGER PRIMARY KEY,
    names TEXT NOT NULL UNIQUE     -- JSON list of the feature names, in column order
);
CREATE TABLE IF NOT EXISTS impressions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    created REAL NOT NULL,
    query TEXT NOT NULL,
    user_id TEXT,
    learner TEXT NOT NULL,
    model_version INTEGER NOT NULL,
    feature_set INTEGER NOT NULL REFERENCES feature_sets (id),
    candidates BLOB NOT NULL,      -- packed (stores/encoding.py): ids in backend order, the
                                   -- ranking as presented, propensities when logged
    features BLOB,                 -- packed raw features; NULL once retention compacted it
    n_shown INTEGER NOT NULL,
    log_prob REAL,
    teams TEXT,                    -- JSON list: which learner contributed each shown hit
    closed_seq INTEGER UNIQUE,
    context TEXT,                  -- JSON: what the learner (or the experiment) logged
    arm TEXT,                      -- id of the arm that showed it alone; NULL: a mixed list
    experiment TEXT,               -- name of the experiment it was part of, if any
    page_offset INTEGER NOT NULL DEFAULT 0,  -- ranks before the shown ones (page 2: 10)
    page_key TEXT                  -- query, filters and user or session, for later pages
);
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
    updated REAL NOT NULL DEFAULT 0,  -- when a page or click last added to it (retention)
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
CREATE TABLE IF NOT EXISTS request_counts (
    scope TEXT NOT NULL,           -- search, click or impression (reranker.serving.limits)
    slot INTEGER NOT NULL,         -- the span of time counted in (minutes, or impression_ttl)
    client TEXT NOT NULL,          -- the client (user:, session:, address:) or impression id
    requests INTEGER NOT NULL,     -- accepted, by every process
    mark INTEGER NOT NULL,         -- the exchange that changed it last
    PRIMARY KEY (scope, slot, client)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS request_counts_mark ON request_counts (mark);
"""


#: Bytes the readiness check writes beside the database (a few pages of growth).
PROBE_BYTES = 65536
#: Seconds between a store object's checkpoints of the write-ahead log (:class:`Checkpoints`).
CHECKPOINT_SECONDS = 0.5
#: Pages of the write-ahead log past which the commit that crosses them checkpoints it,
#: should the store's own checkpoints fall behind (SQLite's ``wal_autocheckpoint``; its
#: default is 1,000).
AUTOCHECKPOINT_PAGES = 4000

log = logging.getLogger(__name__)


class Checkpoints:
    """A store object's checkpoints of the write-ahead log: every
    :data:`CHECKPOINT_SECONDS`, in a thread of its own, when the object has committed since
    the last one (``PRAGMA wal_checkpoint(PASSIVE)``, which waits for no reader or writer).

    Left to SQLite, the checkpoint runs within the commit that takes the log past 1,000
    pages: that commit then copies the pages into the database and flushes it to disk, and
    the searches waiting for it wait that long too (the count cache's reads never overlap a
    commit of their store object: :mod:`.count_cache`), 5 to 13 ms instead of about
    0.3. A commit still checkpoints past :data:`AUTOCHECKPOINT_PAGES`, should these
    checkpoints fall behind. A forked child starts its own thread at its first commit."""

    def __init__(self, store: SQLiteStore):
        self._store = weakref.ref(store)  # (the thread ends once the store is gone)
        self.location, self.timeout = store.location, store.timeout
        self._reset()
        renew_in_child(self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._commits = 0  # commits of the object, and those the last checkpoint followed
        self._checkpointed = 0

    def committed(self) -> None:
        """A commit of the object: its pages are checkpointed within the interval. (Two
        threads' counts may make one: the next commit's checkpoint takes both.)"""
        self._commits += 1
        thread = self._thread
        if thread is None or not thread.is_alive():
            with self._lock:
                if self._thread is thread:
                    self._thread = threading.Thread(
                        target=self._run, args=(self._stop,),
                        name=f"checkpoints of {self.location}", daemon=True)
                    self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(CHECKPOINT_SECONDS):
            store = self._store()
            if store is None:
                return
            commits = self._commits
            if commits != self._checkpointed:
                self._checkpoint(store, commits)
            del store

    def _checkpoint(self, store: SQLiteStore, commits: int) -> None:
        try:
            busy = store._conn().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[0]
        except Exception as exc:  # noqa: BLE001 -- logged; tried again after the next commit
            log.warning("event store %s: checkpoint of the write-ahead log failed: %s",
                        self.location, exc)
            busy = 0
        if not busy:  # (busy: another process checkpoints; the next turn tries again)
            self._checkpointed = commits

    def stop(self) -> None:
        """Stop the thread (a checkpoint under way ends first); the object's next commit
        starts another (a store closed and used again)."""
        with self._lock:
            self._stop.set()
            thread = self._thread
        if thread is not None:
            thread.join(self.timeout + 1.0)
        with self._lock:
            self._stop, self._thread = threading.Event(), None


class SQLiteStore(SQLEventStore):
    """Impressions and clicks in one SQLite file; safe to share between threads and
    processes (each thread gets its own connection)."""

    name = "sqlite"
    #: Each connection's ``wal_autocheckpoint`` (:class:`Checkpoints`).
    autocheckpoint_pages = AUTOCHECKPOINT_PAGES
    DB_ERRORS = (sqlite3.Error,)
    DATA_ERRORS = (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError)

    @classmethod
    def missing(cls, config) -> str | None:
        path = Path(config.store.path)
        return None if path.exists() else f"store.path: {path} does not exist"

    @classmethod
    def from_config(cls, config) -> SQLiteStore:
        store = cls(config.store.path, busy_timeout=config.store.timeout)
        store.click_refresh = config.features.click_refresh
        store.click_memory = config.store.retention
        return store

    def __init__(self, path: str | Path, busy_timeout: float = 10.0):
        self.path = Path(path)
        self.location = str(self.path)
        self.timeout = busy_timeout  # store.timeout: every wait of the store
        self._local = threading.local()
        #: Every connection this object opened, with the thread it serves: a connection is
        #: closed once its thread has ended (:meth:`_conn`), so threads that come and go
        #: (a server's, a caller's) do not hold files open.
        self._connections: list[tuple[threading.Thread, sqlite3.Connection]] = []
        self._connections_lock = threading.Lock()
        self._writer_lock = threading.Lock()
        self._writer_handle: int | None = None
        self._checkpoints = Checkpoints(self)
        if not self.path.parent.is_dir():
            raise StoreError(f"store.path: folder {self.path.parent} does not exist")
        conn = self._conn()
        try:
            conn.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "INSERT OR IGNORE INTO meta VALUES "
                               f"('schema_version', '{SCHEMA_VERSION}'); INSERT OR IGNORE INTO "
                               "meta VALUES ('closed_seq', '0'); INSERT OR IGNORE INTO meta VALUES "
                               "('request_mark', '0'); INSERT OR IGNORE INTO meta "
                               f"VALUES ('store_id', '{uuid.uuid4().hex}'); COMMIT;")
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            for version, step in ((1, self._migrate_from_1), (2, self._migrate_from_2),
                                  (3, self._migrate_from_3), (4, self._migrate_from_4)):
                if int(meta["schema_version"]) == version:
                    self._migrate(conn, version, step)
                    meta["schema_version"] = str(version + 1)
            if int(meta["schema_version"]) == SCHEMA_VERSION:
                conn.executescript(";".join(LATE_INDEXES))
        except sqlite3.Error as exc:
            self.close()  # never leave a half-run transaction holding the write lock
            raise StoreError(f"store.path: {self.path} is not a usable SQLite database: "
                             f"{exc}") from exc
        if int(meta["schema_version"]) != SCHEMA_VERSION:
            self.close()
            raise StoreError(f"store.path: {self.path} has event schema version "
                             f"{meta['schema_version']}, this version of reranker reads "
                             f"{SCHEMA_VERSION} (and migrates 1 to 4); it was written by a "
                             f"newer reranker: upgrade reranker, or point store.path at a new "
                             f"file to start a new event log")
        self.store_id: str = meta["store_id"]
        self._opened = True

    def check_writable(self) -> None:
        """The database takes a write, and its folder has room for more: SQLite writes into
        space its files already hold, so a full disk shows first where they must grow."""
        super().check_writable()
        try:
            with tempfile.TemporaryFile(dir=self.path.parent, prefix=".reranker-probe-") \
                    as probe:
                probe.write(b"\0" * PROBE_BYTES)
                probe.flush()
                os.fsync(probe.fileno())
        except OSError as exc:
            raise StoreError(f"event store {self.location} cannot grow: "
                             f"{exc.strerror or exc}") from exc

    @staticmethod
    def _migrate(conn: sqlite3.Connection, version: int,
                 step: Callable[[sqlite3.Connection], None]) -> None:
        """Run ``step``, the migration from schema ``version`` to the next, in one
        transaction with the new version number, unless another process has migrated the
        store meanwhile."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'")
                   .fetchone()[0]) == version:
                step(conn)
                conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                             (str(version + 1),))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @staticmethod
    def _migrate_from_1(conn: sqlite3.Connection) -> None:
        """Schema 1 -> 2: the impressions' context column, and the click counts rebuilt from
        the log (exposures weighted by the prior position weights, since schema 1 kept no
        randomisation to estimate them from)."""
        conn.execute("ALTER TABLE impressions ADD COLUMN context TEXT")
        # Added up in memory and written once: the write lock is held for as short a time as
        # the log allows.
        bias = PositionBias()
        counts: dict[tuple[str, str], list[float]] = {}

        def count(key: str, doc_id: str, clicks: float, exposure: float) -> None:
            for cell in stat_cells(key, doc_id):
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
        conn.executemany("INSERT INTO click_stats (query_key, doc_id, clicks, exposure) "
                         "VALUES (?, ?, ?, ?) ON CONFLICT (query_key, doc_id) DO UPDATE SET "
                         "clicks = click_stats.clicks + excluded.clicks, "
                         "exposure = click_stats.exposure + excluded.exposure",
                         [(key, doc_id, clicks, exposure) for
                          (key, doc_id), (clicks, exposure) in counts.items()])

    @staticmethod
    def _migrate_from_4(conn: sqlite3.Connection) -> None:
        """Schema 4 -> 5: when each click count last changed, for retention to forget the
        queries searched no more; the counts there are count from now."""
        columns = {row[1] for row in conn.execute("PRAGMA table_info(click_stats)")}
        if "updated" not in columns:  # (a store of schema 1 made the table anew)
            conn.execute(f"ALTER TABLE click_stats ADD COLUMN updated REAL NOT NULL DEFAULT "
                         f"{time.time()!r}")

    @staticmethod
    def _migrate_from_2(conn: sqlite3.Connection) -> None:
        """Schema 2 -> 3: which arm showed an impression (the impressions logged before arms
        existed keep their learner's name, which the arm that takes over that learner's model
        folder answers to: :meth:`reranker.models.arms.Arm.prepare`), the experiment, and the
        experiments' state."""
        conn.execute("ALTER TABLE impressions ADD COLUMN arm TEXT")
        conn.execute("ALTER TABLE impressions ADD COLUMN experiment TEXT")
        conn.execute("ALTER TABLE impressions ADD COLUMN page_offset INTEGER NOT NULL DEFAULT 0")
        conn.execute("ALTER TABLE impressions ADD COLUMN page_key TEXT")
        conn.execute("UPDATE impressions SET arm = learner")

    # -- damage -----------------------------------------------------------------------------

    _opened = False

    def _is_damage(self, exc: BaseException) -> bool:
        code = getattr(exc, "sqlite_errorcode", None)  # (Python 3.11 and newer)
        if code is not None:  # (an extended code, SQLITE_CORRUPT_INDEX, ...: its low byte)
            return code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
        return isinstance(exc, sqlite3.DatabaseError) and any(
            words in str(exc) for words in ("malformed", "not a database"))

    def _verify(self) -> str | None:
        """``PRAGMA quick_check`` on a connection of its own (it reads every page)."""
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        try:
            rows = conn.execute("PRAGMA quick_check(3)").fetchall()
        finally:
            conn.close()
        problems = [row[0] for row in rows]
        return None if problems == ["ok"] else "; ".join(problems)

    def _damage_path(self) -> Path:
        return self.path.with_name(self.path.name + ".damaged")

    def _damage_note(self) -> str | None:
        try:
            return self._damage_path().read_text(encoding="utf-8") or "damaged"
        except OSError:  # none: no process found it damaged
            return None

    def _note_damage(self, text: str | None) -> None:
        path = self._damage_path()
        with contextlib.suppress(OSError):  # (a full or read-only disk: this process knows)
            if text is None:
                path.unlink(missing_ok=True)
            elif self._damage_note() != text:
                path.write_text(text, encoding="utf-8")

    def _repair_advice(self) -> str:
        name = self.path.name
        return (f"restore it from a backup while the service runs with `sqlite3 {name} "
                f"\".restore BACKUP\"`, or save what it still holds with `sqlite3 {name} "
                f".recover | sqlite3 NEW` and point store.path at NEW; the health checks look "
                f"at it again every {self.DAMAGE_RECHECK:g} s")

    # -- connections ------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(self.path, timeout=self.timeout,
                                       isolation_level=None, check_same_thread=False)
                # For a new file only (a store's page size is fixed once it has content):
                # pages of 8 KiB hold three or four impressions of 100 candidates (about 2 KB
                # each, stores/encoding.py) where 4 KiB pages fit one, leaving half empty.
                conn.execute("PRAGMA page_size=8192")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA foreign_keys=ON")
                conn.execute(f"PRAGMA wal_autocheckpoint={self.autocheckpoint_pages}")
            except sqlite3.Error as exc:
                if self._is_damage(exc) and self._opened:  # (damaged since it opened)
                    raise self._damaged(str(exc)) from exc
                raise StoreError(f"store.path: {self.path} is not a usable SQLite database: "
                                 f"{exc}") from exc
            self._local.conn = conn
            with self._connections_lock:
                ended = [conn for thread, conn in self._connections if not thread.is_alive()]
                self._connections = [(thread, conn) for thread, conn in self._connections
                                     if thread.is_alive()]
                self._connections.append((threading.current_thread(), conn))
            for old in ended:
                old.close()
        return conn

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        yield self._conn()

    @contextlib.contextmanager
    def _write(self, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error), taken in turn with
        the other writers of this machine (:meth:`_writer_turn`)."""
        conn = self._conn()
        with self._errors(), self._writer_turn():
            conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
                self._checkpoints.committed()
            except BaseException:
                if conn.in_transaction:  # (a failed COMMIT too: never leave it open)
                    with contextlib.suppress(sqlite3.Error):  # the first error is the one
                        conn.execute("ROLLBACK")
                raise

    @contextlib.contextmanager
    def _writer_turn(self) -> Iterator[None]:
        """Wait for this store's writers, of this process and of the others on the machine,
        in a queue that wakes the next one as soon as the last commits: a thread lock, then
        an exclusive ``flock`` on ``<store.path>.writer``. SQLite's own wait for its write
        lock polls with sleeps growing to 100 ms, which, with several worker processes
        logging every search, left the machine idle while they slept. ``StoreError``
        after ``store.timeout`` seconds, as SQLite's own wait would."""
        deadline = time.monotonic() + self.timeout
        if not self._writer_lock.acquire(timeout=self.timeout):
            raise self._locked_error()
        try:
            fd = self._writer_fd()
            pause = 0.0001
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise self._locked_error() from None
                    time.sleep(pause)  # another process writes: its turn ends in microseconds
                    pause = min(pause * 2, 0.001)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._writer_lock.release()

    def _writer_fd(self) -> int:
        """The lock file's descriptor (a bare one: a store left unclosed leaks no file
        object), opened once per store object."""
        if self._writer_handle is None:
            lock_path = self.path.with_name(self.path.name + ".writer")
            try:
                self._writer_handle = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise StoreError(f"store.path: cannot use the writers' lock file {lock_path}: "
                                 f"{exc}") from exc
        return self._writer_handle

    def _locked_error(self) -> StoreError:
        return StoreError(f"event store {self.location} failed: its writers' turn did not come "
                          f"within store.timeout ({self.timeout:g}s)")

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        with self._errors():
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def vacuum(self) -> None:
        """``VACUUM``: rewrite the file without the free pages that removed impressions left,
        then empty the write-ahead log into it and truncate it. Holds the write lock while it
        rewrites the file (searches and clicks wait, up to ``store.timeout``)."""
        conn = self._conn()
        with self._errors(), self._writer_turn():
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def disk_bytes(self) -> int:
        """The database file and its write-ahead log."""
        return sum(path.stat().st_size for path in
                   (self.path, self.path.with_name(self.path.name + "-wal")) if path.exists())

    def trainer_leadership(self) -> Leadership | None:
        """An exclusive ``flock`` on ``<store.path>.trainer``, held until released or until
        the process ends (the kernel drops it then, also after SIGKILL)."""
        lock_path = self.path.with_name(self.path.name + ".trainer")
        try:
            handle = open(lock_path, "a+b")
        except OSError as exc:
            raise StoreError(f"store.path: cannot use the trainer's lock file {lock_path}: "
                             f"{exc}") from exc
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return None
        return FileLeadership(handle)

    def close(self) -> None:
        self._stop_writers()
        self._checkpoints.stop()  # (closing the last connection checkpoints what is left)
        with self._connections_lock:
            for _, conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()
        if self._writer_handle is not None:
            os.close(self._writer_handle)
            self._writer_handle = None


class FileLeadership(Leadership):
    def __init__(self, handle):
        self._handle = handle

    def release(self) -> None:
        self._handle.close()  # closing the file drops its lock


@hookimpl
def reranker_register_event_stores():
    return [SQLiteStore]

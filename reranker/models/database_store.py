"""Versioned models in the PostgreSQL database of the event store (``store.model_store:
database``), for machines that share nothing but that database.

It keeps what :class:`reranker.models.store.ModelStore` keeps in a folder, with the same
guarantees, in two tables beside the event tables:

* ``model_versions`` (arm, version, saved, body): one row per saved version, inserted under
  the primary key (arm, version), so two trainers never overwrite each other and a reader
  never sees half a model;
* ``model_files`` (arm, name, body): the small documents of an arm, by the names the folder
  gives its files: ``next-version`` (the number the next version gets at least, raised in
  the transaction that inserts a version: numbers are never used twice, even after pruning),
  ``pinned-version`` and ``arm.json``.

Every change sends ``NOTIFY reranker_models`` with the arm's id in the transaction that
makes it. Each process keeps one connection listening on that channel
(:class:`ModelDatabase`), and a store's :meth:`~DatabaseModelStore.stamp` is the count of the
notifications its arm received, read from memory: a serving process sees a new version or a
pin as soon as the server delivers the notification, with no query per request. While the
listening connection is down, the stamp changes every second, so that the store is read
again until it is back.

A trainer holds a session-level advisory lock per arm while it saves
(:meth:`~DatabaseModelStore.lock`), on a connection of its own, which the server releases if
the trainer dies.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator

from reranker.core.errors import ModelLoadError, ModelStoreError, StoreError
from reranker.models.model import ModelFactory, RankingModel
from reranker.models.store import (
    LOCK_FILE,
    MAX_MODEL_BYTES,
    NEXT_VERSION_FILE,
    PIN_FILE,
    SavedVersions,
    VersionExistsError,
    parse_version_number,
)

log = logging.getLogger(__name__)

#: The channel of the notifications a change of any arm's models sends (payload: the arm).
CHANNEL = "reranker_models"
#: Seconds between attempts to listen again after the listening connection broke.
RELISTEN_EVERY = 1.0
#: Tables of the model store.
TABLES = ("model_versions", "model_files")
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS model_versions (
        arm TEXT NOT NULL,
        version INTEGER NOT NULL,
        saved DOUBLE PRECISION NOT NULL,
        body BYTEA NOT NULL,
        PRIMARY KEY (arm, version))""",
    """CREATE TABLE IF NOT EXISTS model_files (
        arm TEXT NOT NULL,
        name TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (arm, name))""",
)
#: The advisory lock of an arm's trainer (the first key is the event store's lock space).
_ARM_LOCK = "SELECT pg_advisory_lock(%s, hashtext(%s))"


class ModelDatabase:
    """The models of every arm in one PostgreSQL database: the connection string, a small
    pool, and the connection that listens for changes, one of each per process (made at
    first use, and again in a forked child)."""

    def __init__(self, dsn: str, timeout: float = 10.0):
        from reranker.stores.postgres import describe

        self.dsn = dsn
        self.timeout = timeout
        self.location = f"{describe(dsn)} (store.model_store: database)"
        self._pid = -1
        self._lock = threading.Lock()
        self._pool = None
        self._stamps: dict[str, int] = {}
        #: Not listening (yet, or the connection broke): the stamps move every second.
        self._down = True
        self._listener: threading.Thread | None = None
        self._stop = threading.Event()
        self._schema_ready = False

    def __repr__(self) -> str:
        return f"ModelDatabase({self.location})"

    # -- connections --------------------------------------------------------------------

    def _connect_args(self) -> dict:
        return {"autocommit": True, "application_name": "reranker models",
                "connect_timeout": max(1, int(self.timeout))}

    def _ensure(self) -> None:
        """The pool, the schema and the listener of this process."""
        if self._pid == os.getpid() and self._pool is not None:
            return
        with self._lock:
            if self._pid == os.getpid() and self._pool is not None:
                return
            from reranker.stores.postgres import _driver

            _, psycopg_pool = _driver()
            self._pool = psycopg_pool.ConnectionPool(
                self.dsn, min_size=0, max_size=4, timeout=self.timeout, open=True,
                kwargs=self._connect_args(), name="reranker-models")
            self._stamps, self._stop, self._down = {}, threading.Event(), True
            self._pid = os.getpid()
            self._listener = threading.Thread(target=self._listen, daemon=True,
                                              name="model store notifications")
            self._listener.start()

    @contextlib.contextmanager
    def connection(self) -> Iterator:
        """A pooled connection (autocommit), its errors as :class:`ModelStoreError`."""
        self._ensure()
        try:
            with self._pool.connection() as conn:
                if not self._schema_ready:
                    self._create(conn)
                yield conn
        except (StoreError, ModelLoadError, VersionExistsError):
            raise
        except Exception as exc:  # noqa: BLE001 -- the driver's errors, named
            raise ModelStoreError(f"store.model_store: the model tables in {self.location} "
                                  f"cannot be used: {self._redact(exc)}") from exc

    def _create(self, conn) -> None:
        from reranker.stores.postgres import LOCK_SPACE

        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext('model schema'))",
                         (LOCK_SPACE,))
            for statement in _SCHEMA:
                conn.execute(statement)
        self._schema_ready = True

    def _redact(self, exc: BaseException) -> str:
        from reranker.stores.postgres import redact

        return redact(str(exc).strip(), self.dsn)

    def close(self) -> None:
        """Stop listening and close the pool (a new use opens them again)."""
        self._stop.set()
        pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.close()
        self._pid = -1

    # -- changes ------------------------------------------------------------------------

    def stamp(self, arm: str) -> int:
        """A number that changes when the arm's versions, pin or documents change (the
        notifications received for it); every second while the listening connection is
        down."""
        self._ensure()
        base = self._stamps.get(arm, 0)
        if self._down:
            return base * 1_000_000 + int(time.monotonic())
        return base

    def changed(self, conn, arm: str) -> None:
        """Tell every process that ``arm`` changed (delivered when the transaction commits)."""
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, arm))

    def _listen(self) -> None:
        from reranker.stores.postgres import _driver

        psycopg, _ = _driver()
        stop = self._stop
        while not stop.is_set():
            try:
                conn = psycopg.connect(self.dsn, **self._connect_args())
            except Exception as exc:  # noqa: BLE001 -- down: try again
                if not self._down:
                    log.warning("model store %s: cannot listen for new versions (%s); the "
                                "models are read every second until it can",
                                self.location, self._redact(exc))
                self._down = True
                stop.wait(RELISTEN_EVERY)
                continue
            try:
                with conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if self._down:  # anything may have changed meanwhile
                        for arm in list(self._stamps):
                            self._stamps[arm] += 1
                        self._down = False
                    while not stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            self._stamps[note.payload] = self._stamps.get(note.payload, 0) + 1
            except Exception as exc:  # noqa: BLE001 -- the connection broke: listen again
                if not stop.is_set():
                    log.warning("model store %s: the connection listening for new versions "
                                "broke (%s); listening again", self.location,
                                self._redact(exc))
                    self._down = True
                    stop.wait(RELISTEN_EVERY)

    # -- the stores ---------------------------------------------------------------------

    def store(self, arm: str, keep: int = 20, max_bytes: int = MAX_MODEL_BYTES
              ) -> DatabaseModelStore:
        return DatabaseModelStore(self, arm, keep=keep, max_bytes=max_bytes)

    def arms(self) -> list[str]:
        """The arms that have versions or documents here."""
        with self.connection() as conn:
            rows = conn.execute("SELECT arm FROM model_files UNION SELECT arm FROM "
                                "model_versions ORDER BY 1").fetchall()
        return [row[0] for row in rows if row[0]]


class DatabaseModelStore(SavedVersions):
    """The saved versions of one arm's model in a :class:`ModelDatabase`: the interface of
    :class:`reranker.models.store.ModelStore`, without a folder."""

    #: Seconds between full checks of the store by a serving process: a safety net only,
    #: since every change is notified.
    full_check_interval = 30.0

    def __init__(self, database: ModelDatabase, arm: str, keep: int = 20,
                 max_bytes: int = MAX_MODEL_BYTES):
        self.database = database
        self.arm = arm
        self.keep = keep
        self.max_bytes = max_bytes
        self._logged: set[int] = set()

    @property
    def location(self) -> str:
        """Where the arm's models are, for messages."""
        return f"arm {self.arm} in {self.database.location}"

    @property
    def name(self) -> str:
        return self.arm

    def exists(self) -> bool:
        """Whether anything of the arm is stored yet."""
        with self.database.connection() as conn:
            return conn.execute(
                "SELECT EXISTS (SELECT 1 FROM model_files WHERE arm = %s) OR EXISTS "
                "(SELECT 1 FROM model_versions WHERE arm = %s)",
                (self.arm, self.arm)).fetchone()[0]

    def versions(self) -> list[int]:
        with self.database.connection() as conn:
            rows = conn.execute("SELECT version FROM model_versions WHERE arm = %s ORDER BY "
                                "version", (self.arm,)).fetchall()
        return [row[0] for row in rows]

    def has(self, version: int) -> bool:
        return self.saved_at(version) is not None

    def saved_at(self, version: int) -> float | None:
        with self.database.connection() as conn:
            row = conn.execute("SELECT saved FROM model_versions WHERE arm = %s AND "
                               "version = %s", (self.arm, int(version))).fetchone()
        return None if row is None else float(row[0])

    def stamp(self) -> int:
        return self.database.stamp(self.arm)

    # -- small documents -------------------------------------------------------------------

    def read_text(self, name: str) -> str | None:
        """The arm's document ``name`` (as the folder's file of that name), None if absent."""
        with self.database.connection() as conn:
            row = conn.execute("SELECT body FROM model_files WHERE arm = %s AND name = %s",
                               (self.arm, name)).fetchone()
        return None if row is None else row[0]

    def write_text(self, name: str, text: str) -> None:
        """Replace the arm's document ``name`` (one statement: atomic), and notify."""
        with self.database.connection() as conn, conn.transaction():
            conn.execute("INSERT INTO model_files (arm, name, body) VALUES (%s, %s, %s) "
                         "ON CONFLICT (arm, name) DO UPDATE SET body = EXCLUDED.body",
                         (self.arm, name, text))
            self.database.changed(conn, self.arm)

    def document(self, name: str) -> str:
        """Where messages say the document ``name`` is."""
        return f"{name} of {self.location}"

    def document_stamp(self, name: str) -> int:
        """Changes when any document of the arm is written (:meth:`stamp`)."""
        return self.stamp()

    def _read_number(self, name: str) -> int | None:
        text = self.read_text(name)
        return None if text is None else parse_version_number(
            text, f"{name} of {self.location}", "store it again (`reranker models pin`) or "
                                                "unpin")

    # -- version numbers and pins ----------------------------------------------------------

    def next_version(self) -> int:
        with self.database.connection() as conn:
            row = conn.execute(
                "SELECT GREATEST(COALESCE((SELECT body::bigint FROM model_files WHERE arm = %s "
                "AND name = %s), 0), COALESCE((SELECT MAX(version) FROM model_versions WHERE "
                "arm = %s), 0) + 1, 1)", (self.arm, NEXT_VERSION_FILE, self.arm)).fetchone()
        return int(row[0])

    def pinned(self) -> int | None:
        return self._read_number(PIN_FILE)

    def pin(self, version: int) -> None:
        self.write_text(PIN_FILE, f"{int(version)}\n")

    def unpin(self) -> int | None:
        with self.database.connection() as conn, conn.transaction():
            row = conn.execute("DELETE FROM model_files WHERE arm = %s AND name = %s "
                               "RETURNING body", (self.arm, PIN_FILE)).fetchone()
            self.database.changed(conn, self.arm)
        if row is None:
            return None
        text = row[0].strip()
        return int(text) if text.isdigit() else None

    @contextlib.contextmanager
    def lock(self, name: str = LOCK_FILE) -> Iterator[None]:
        """Hold the arm's trainer lock, or the lock ``name`` (an advisory lock on a
        connection of its own)."""
        from reranker.stores.postgres import LOCK_SPACE, _driver

        psycopg, _ = _driver()
        try:
            conn = psycopg.connect(self.database.dsn, **self.database._connect_args())
        except Exception as exc:  # noqa: BLE001
            raise ModelStoreError(f"store.model_store: cannot lock {self.location}: "
                                  f"{self.database._redact(exc)}") from exc
        try:
            conn.execute(_ARM_LOCK, (LOCK_SPACE, f"{name}:{self.arm}"))
            yield
        finally:
            conn.close()

    # -- saving and loading -----------------------------------------------------------------

    def save(self, model: RankingModel) -> str:
        """Insert ``model`` as version ``model.version`` (raise :class:`VersionExistsError`
        if that version exists), raise the next-version mark past it and prune, in one
        transaction."""
        from reranker.stores.postgres import _driver

        psycopg, _ = _driver()
        body = (json.dumps(model.to_dict(), allow_nan=False) + "\n").encode("utf-8")
        version = int(model.version)
        with self.database.connection() as conn:
            try:
                with conn.transaction():
                    conn.execute("INSERT INTO model_versions (arm, version, saved, body) "
                                 "VALUES (%s, %s, %s, %s)", (self.arm, version, time.time(),
                                                             body))
                    self._raise_mark(conn, version + 1)
                    self._prune(conn)
                    self.database.changed(conn, self.arm)
            except psycopg.errors.UniqueViolation:
                raise VersionExistsError(f"model version {version} already exists in "
                                         f"{self.location}") from None
        return f"{self.location}, version {version}"

    def _prune(self, conn) -> None:
        """Delete all but the newest ``keep`` versions, and the pinned one."""
        pinned = conn.execute("SELECT body FROM model_files WHERE arm = %s AND name = %s",
                              (self.arm, PIN_FILE)).fetchone()
        keep_pinned = int(pinned[0].strip()) if pinned and pinned[0].strip().isdigit() else -1
        if pinned is not None and keep_pinned < 0:
            return  # a pin that names no version might name any: keep them all
        conn.execute("DELETE FROM model_versions WHERE arm = %s AND version <> %s AND "
                     "version NOT IN (SELECT version FROM model_versions WHERE arm = %s "
                     "ORDER BY version DESC LIMIT %s)",
                     (self.arm, keep_pinned, self.arm, max(int(self.keep), 1)))

    def load(self, version: int, factory: ModelFactory) -> RankingModel:
        name = f"model version {int(version)} of {self.location}"
        with self.database.connection() as conn:
            row = conn.execute("SELECT octet_length(body) FROM model_versions WHERE arm = %s "
                               "AND version = %s", (self.arm, int(version))).fetchone()
            if row is None:
                raise ModelLoadError(f"{name} does not exist")
            if row[0] > self.max_bytes:
                raise ModelLoadError(f"{name} is refused: {row[0]} bytes, more than "
                                     f"store.max_model_bytes ({self.max_bytes})")
            row = conn.execute("SELECT body FROM model_versions WHERE arm = %s AND "
                               "version = %s", (self.arm, int(version))).fetchone()
        if row is None:
            raise ModelLoadError(f"{name} does not exist")
        try:
            data = json.loads(bytes(row[0]).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ModelLoadError(f"{name} is refused: not readable JSON ({exc})") from exc
        model = factory.from_dict(data, name)
        if model.version != version:
            raise ModelLoadError(f"{name} is refused: it says it is version {model.version}")
        return model

    def _log_refused(self, version: int, message: str) -> None:
        """Log a refused version once (the service looks again whenever the arm changes)."""
        if version not in self._logged:
            self._logged.add(version)
            log.error("%s", message)

    def import_version(self, version: int, text: str, saved: float) -> bool:
        """Insert a version read from a folder as it is (its number and time kept); False
        when the arm has that version already."""
        with self.database.connection() as conn, conn.transaction():
            inserted = conn.execute(
                "INSERT INTO model_versions (arm, version, saved, body) VALUES (%s, %s, %s, "
                "%s) ON CONFLICT DO NOTHING RETURNING version",
                (self.arm, int(version), float(saved), text.encode("utf-8"))).fetchone()
            self._raise_mark(conn, int(version) + 1)
            self.database.changed(conn, self.arm)
        return inserted is not None

    def import_version_mark(self, next_version: int) -> None:
        """Raise the next-version mark to ``next_version`` (a folder's ``next-version``)."""
        with self.database.connection() as conn, conn.transaction():
            self._raise_mark(conn, int(next_version))

    def _raise_mark(self, conn, next_version: int) -> None:
        """The next version is numbered at least ``next_version`` (never lowered)."""
        conn.execute("INSERT INTO model_files (arm, name, body) VALUES (%s, %s, %s) "
                     "ON CONFLICT (arm, name) DO UPDATE SET body = GREATEST("
                     "model_files.body::bigint, EXCLUDED.body::bigint)::text",
                     (self.arm, NEXT_VERSION_FILE, str(int(next_version))))


#: One :class:`ModelDatabase` per connection string in a process: its arms share the pool and
#: the listening connection.
_DATABASES: dict[tuple[str, float], ModelDatabase] = {}
_DATABASES_LOCK = threading.Lock()


def model_place(store) -> str | ModelDatabase:
    """Where the models of a configuration's ``store`` section live: the folder
    ``store.models``, or the :class:`ModelDatabase` of ``store.dsn`` with
    ``store.model_store: database``."""
    if getattr(store, "model_store", "folder") != "database":
        return store.models
    key = (store.dsn, float(store.timeout))
    with _DATABASES_LOCK:
        if key not in _DATABASES:
            _DATABASES[key] = ModelDatabase(store.dsn, timeout=store.timeout)
        return _DATABASES[key]

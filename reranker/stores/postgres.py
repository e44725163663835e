"""The event store on a PostgreSQL server (``store.type: postgresql``), for the processes of
several machines sharing one event log.

It runs the statements of :mod:`.sql` through psycopg 3 with a pool of connections per
process (``store.pool_size``). What SQLite gets from its one writer at a time, PostgreSQL gets
from row locks (``SELECT ... FOR UPDATE``): a click and the closing of its impression wait
for each other, so a click is either counted before the impression closes or refused after;
two processes closing impressions wait on the counter row, so ``closed_seq`` numbers are
committed in order. Commits are synchronous (a click is on the server's disk when ``/click``
answers 202), except an impression's, which the next synchronous commit flushes (as on
SQLite: a click always refers to an impression written before it).

Trainers on several machines take a session-level advisory lock per model
(:meth:`PostgresStore.trainer_lock`) around each pass, on a connection of its own: the
server releases it when the connection ends, so a trainer that dies never leaves it held.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import re
import threading
import time
import uuid
from collections.abc import Iterator, Sequence

from reranker import hookimpl
from reranker.core.errors import ConfigError, StoreError
from reranker.stores.base import Leadership
from reranker.stores.sql import LATE_INDEXES, SCHEMA_VERSION, SQLEventStore

log = logging.getLogger(__name__)

#: Seconds between the attempts to connect to a server that stopped answering.
RECONNECT_EVERY = 1.0

#: First key of the advisory locks this store takes (the second tells them apart): a number
#: other applications sharing the database are unlikely to use.
LOCK_SPACE = 0x52524B  # "RRK"
_SCHEMA_LOCK = 0
_TRAINER_LOCK = "SELECT pg_advisory_lock(%s, hashtext(%s))"
_LEADER_LOCK = 1
_TRY_LEADER = "SELECT pg_try_advisory_lock(%s, %s)"

#: The tables of the event store.
TABLES = ("meta", "feature_sets", "impressions", "clicks", "click_stats", "experiment_state",
          "rewards", "position_bias", "request_counts")

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS feature_sets (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        names TEXT NOT NULL UNIQUE)""",
    """CREATE TABLE IF NOT EXISTS impressions (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        created DOUBLE PRECISION NOT NULL,
        query TEXT NOT NULL,
        user_id TEXT,
        learner TEXT NOT NULL,
        model_version INTEGER NOT NULL,
        feature_set BIGINT NOT NULL REFERENCES feature_sets (id),
        candidates BYTEA NOT NULL,
        features BYTEA,
        n_shown INTEGER NOT NULL,
        log_prob DOUBLE PRECISION,
        teams TEXT,
        closed_seq BIGINT UNIQUE,
        context TEXT,
        arm TEXT,
        experiment TEXT,
        page_offset INTEGER NOT NULL DEFAULT 0,
        page_key TEXT)""",
    """CREATE TABLE IF NOT EXISTS clicks (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        impression_id TEXT NOT NULL REFERENCES impressions (id),
        doc_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        created DOUBLE PRECISION NOT NULL,
        UNIQUE (impression_id, doc_id))""",
    """CREATE TABLE IF NOT EXISTS click_stats (
        query_key TEXT NOT NULL,
        doc_id TEXT NOT NULL,
        clicks DOUBLE PRECISION NOT NULL,
        exposure DOUBLE PRECISION NOT NULL,
        updated DOUBLE PRECISION NOT NULL DEFAULT 0,
        PRIMARY KEY (query_key, doc_id))""",
    """CREATE TABLE IF NOT EXISTS experiment_state (
        name TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        updated DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS rewards (
        impression_id TEXT PRIMARY KEY REFERENCES impressions (id),
        value DOUBLE PRECISION NOT NULL,
        created DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS position_bias (
        position INTEGER PRIMARY KEY,
        upper DOUBLE PRECISION NOT NULL,
        lower DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS request_counts (
        scope TEXT NOT NULL,
        slot BIGINT NOT NULL,
        client TEXT NOT NULL,
        requests BIGINT NOT NULL,
        mark BIGINT NOT NULL,
        PRIMARY KEY (scope, slot, client))""",
    "CREATE INDEX IF NOT EXISTS request_counts_mark ON request_counts (mark)",
    *LATE_INDEXES,
)


def _driver():
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ConfigError(f"store.type postgresql needs the psycopg and psycopg-pool packages "
                          f"({exc}); install them with pip install 'reranker[postgresql]'"
                          ) from None
    return psycopg, psycopg_pool


@functools.lru_cache(maxsize=256)
def _placeholders(sql: str) -> str:
    """The shared statements' ``?`` placeholders as psycopg's ``%s`` (they hold no other
    ``?`` or ``%``)."""
    return sql.replace("?", "%s")


class PostgresStore(SQLEventStore):
    """Impressions and clicks in a PostgreSQL database, shared by every process and machine
    that opens it."""

    name = "postgresql"
    FOR_UPDATE = " FOR UPDATE"
    CLICK_POSITIONS = "string_agg(position::text, ',' ORDER BY seq)"
    BINARY = "BYTEA"

    @classmethod
    def from_config(cls, config) -> PostgresStore:
        store = cls(config.store.dsn, pool_size=config.store.pool_size,
                    timeout=config.store.timeout)
        store.click_refresh = config.features.click_refresh
        store.click_memory = config.store.retention
        return store

    def __init__(self, dsn: str, pool_size: int = 10, timeout: float = 10.0):
        psycopg, psycopg_pool = _driver()
        self.DB_ERRORS = (psycopg.Error,)
        self.DATA_ERRORS = (psycopg.DataError, psycopg.IntegrityError)
        self.dsn = dsn
        self.location = describe(dsn)
        self.timeout = timeout
        self._pool = None
        # libpq counts whole seconds and takes 2 as its least; data the server has not
        # acknowledged within the timeout ends the connection (a network gone silent fails
        # a statement, or the pool's check of a connection, instead of hanging on it)
        self._connect_args = {"autocommit": True, "application_name": "reranker",
                              "connect_timeout": max(2, math.ceil(timeout)),
                              "tcp_user_timeout": max(1000, round(timeout * 1000))}
        try:
            conn = psycopg.connect(dsn, **self._connect_args)
        except psycopg.Error as exc:
            raise StoreError(f"store.dsn: cannot connect to the PostgreSQL server "
                             f"{self.location}: {self._error_text(exc)}") from None
        try:
            with conn:
                self._configure(conn)
                with conn.transaction():
                    # Processes starting together create the tables one after the other.
                    conn.execute("SELECT pg_advisory_xact_lock(%s, %s)",
                                 (LOCK_SPACE, _SCHEMA_LOCK))
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', %s), "
                                 "('closed_seq', '0'), ('store_id', %s), ('request_mark', '0') "
                                 "ON CONFLICT DO NOTHING",
                                 (str(SCHEMA_VERSION), uuid.uuid4().hex))
                    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
                    if int(meta["schema_version"]) == 3:
                        self._migrate_from_3(conn)
                        conn.execute("ALTER TABLE impressions ALTER COLUMN feature_set SET NOT "
                                     "NULL, ALTER COLUMN candidates SET NOT NULL")
                        meta["schema_version"] = "4"
                    if int(meta["schema_version"]) == 4:
                        # when each click count last changed, for retention (schema 5);
                        # the counts there are count from now
                        conn.execute(f"ALTER TABLE click_stats ADD COLUMN IF NOT EXISTS "
                                     f"updated DOUBLE PRECISION NOT NULL DEFAULT "
                                     f"{time.time()!r}")
                        conn.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'",
                                     (str(SCHEMA_VERSION),))
                        meta["schema_version"] = str(SCHEMA_VERSION)
        except psycopg.Error as exc:
            raise StoreError(f"store.dsn: the event tables cannot be created or read in "
                             f"{self.location}: {self._error_text(exc)}") from None
        if int(meta["schema_version"]) != SCHEMA_VERSION:
            raise StoreError(f"store.dsn: {self.location} has event schema version "
                             f"{meta['schema_version']}, this version of reranker reads "
                             f"{SCHEMA_VERSION} (and migrates 3 and 4); it was written by a newer "
                             f"reranker: upgrade "
                             f"reranker, or point store.dsn at a new database")
        self.store_id: str = meta["store_id"]
        self.pool_size = pool_size
        self._pool = self._new_pool()
        try:
            self._pool.open(wait=True, timeout=timeout)
        except psycopg.Error as exc:
            self.close()
            raise StoreError(f"store.dsn: cannot connect to the PostgreSQL server "
                             f"{self.location}: {self._error_text(exc)}") from None
        #: When the server stopped answering (monotonic), None while it answers: see
        #: :meth:`_unreachable`.
        self.unreachable_since: float | None = None
        self._outage_lock = threading.Lock()
        self._closed = threading.Event()
        self._reconnecting: threading.Thread | None = None

    def _new_pool(self):
        _, psycopg_pool = _driver()
        return psycopg_pool.ConnectionPool(
            self.dsn, min_size=1, max_size=self.pool_size, timeout=self.timeout, open=False,
            kwargs=self._connect_args, configure=self._configure, check=self._check,
            name="reranker-events")

    # -- an unreachable server ----------------------------------------------------------------
    #
    # Without a server, every operation would wait ``store.timeout`` for a connection the pool
    # cannot make, and the pool's own reconnection waits longer and longer between attempts
    # (one, two, four... seconds), so it could take half a minute to notice the server back.
    # Once an operation has waited in vain, the store is unreachable: every operation fails at
    # once (searches go on without the store's counts, clicks answer 503 at once, /readyz and
    # /healthz say so at once), and a thread tries a new connection every second; the first
    # that succeeds brings a new pool, and the store is reachable again.

    def _guarded(self):
        since = self.unreachable_since
        if since is not None:
            raise StoreError(f"event store {self.location} is unreachable (for "
                             f"{time.monotonic() - since:.0f} s; it is tried again every "
                             f"{RECONNECT_EVERY:g} s)")
        return self._pool

    def _unreachable(self, exc: BaseException) -> None:
        """Called with an error of an operation: a connection the pool could not give
        within the timeout, when a new one cannot be made either, starts an outage (and its
        thread of reconnection attempts). When a new connection can be made, the pool was
        only busy (every connection in use, under load): that operation fails alone."""
        psycopg, psycopg_pool = _driver()
        if not isinstance(exc, psycopg_pool.PoolTimeout) or self.unreachable_since is not None:
            return
        try:
            psycopg.connect(self.dsn, **self._connect_args).close()
            return
        except psycopg.Error:
            pass
        with self._outage_lock:
            if self.unreachable_since is not None or self._closed.is_set():
                return
            self.unreachable_since = time.monotonic()
            self._reconnecting = threading.Thread(
                target=self._reconnect, name="reranker-store-reconnect", daemon=True)
            self._reconnecting.start()
        log.warning("event store %s is unreachable (%s); operations fail at once until a "
                    "new connection succeeds, tried every %g s", self.location,
                    self._error_text(exc), RECONNECT_EVERY)

    def _reconnect(self) -> None:
        psycopg, _ = _driver()
        while not self._closed.wait(RECONNECT_EVERY):
            try:
                psycopg.connect(self.dsn, **self._connect_args).close()
            except psycopg.Error:
                continue
            with self._outage_lock:  # (close() takes it too: no pool opens after it)
                if self._closed.is_set():
                    return
                old, self._pool = self._pool, self._new_pool()
                try:
                    self._pool.open(wait=False)
                finally:
                    since, self.unreachable_since = self.unreachable_since, None
            log.info("event store %s answers again (after %.0f s)", self.location,
                     time.monotonic() - (since or time.monotonic()))
            with contextlib.suppress(Exception):
                old.close(timeout=self.timeout)  # (its connections are broken)
            return

    def _check(self, conn) -> None:
        """The pool's check of a connection it is about to hand out. A broken one means
        that the server restarted or ended the sessions: every other idle connection is
        checked at once then, and the broken ones replaced (the pool would wait a second,
        then two, ... before each further check, past ``store.timeout``)."""
        _, psycopg_pool = _driver()
        try:
            psycopg_pool.ConnectionPool.check_connection(conn)
        except Exception:
            if self._pool is not None:
                self._pool.check()
            raise

    def _configure(self, conn) -> None:
        # A store operation waits at most store.timeout for a row lock or a statement, as
        # SQLite waits at most that long for its write lock; then it fails with 503.
        millis = max(1, round(self.timeout * 1000))
        conn.execute(f"SET lock_timeout = {millis}")
        conn.execute(f"SET statement_timeout = {millis}")

    def _error_text(self, exc: BaseException) -> str:
        return redact(str(exc).strip(), self.dsn)

    # -- connections ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _connection(self) -> Iterator:
        try:
            with self._guarded().connection() as conn:
                yield conn
        except Exception as exc:
            self._unreachable(exc)
            raise

    @contextlib.contextmanager
    def _write(self, durable: bool = True) -> Iterator:
        with self._errors(), self._connection() as conn, conn.transaction():
            if not durable:
                conn.execute("SET LOCAL synchronous_commit = off")
            yield conn

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator:
        with self._errors(), self._connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield conn

    def _run(self, conn, sql: str, args: Sequence = ()):
        return conn.execute(_placeholders(sql), args)

    def _run_many(self, conn, sql: str, rows: list[Sequence]) -> None:
        with conn.cursor() as cursor:
            cursor.executemany(_placeholders(sql), rows)

    @contextlib.contextmanager
    def trainer_lock(self, name: str) -> Iterator[None]:
        """An advisory lock on a connection of its own, held until the block ends (or the
        process dies: the server then ends the session and releases it). A connection per
        hold, not a shared one: a session that holds an advisory lock gets it again at once,
        so two threads sharing a session would not exclude each other. No timeout: the
        other trainer's pass may take as long as it needs."""
        psycopg, _ = _driver()
        with self._errors():
            conn = psycopg.connect(self.dsn, **self._connect_args)
        try:
            with self._errors():
                conn.execute(_TRAINER_LOCK, (LOCK_SPACE, name))
            yield
        finally:
            conn.close()

    def trainer_leadership(self) -> Leadership | None:
        """A session-level advisory lock, tried without waiting, on a connection of its own
        that holds it as long as it stays open: the server releases it when the leader's
        process dies or its connection breaks, on whichever machine it runs."""
        psycopg, _ = _driver()
        with self._errors():
            conn = psycopg.connect(self.dsn, **self._connect_args)
        try:
            with self._errors():
                got = conn.execute(_TRY_LEADER, (LOCK_SPACE, _LEADER_LOCK)).fetchone()[0]
        except BaseException:
            conn.close()
            raise
        if not got:
            conn.close()
            return None
        return ConnectionLeadership(conn)

    def vacuum(self) -> None:
        """A plain ``VACUUM`` of the tables retention deletes from, which autovacuum runs by
        itself too: the space of deleted rows becomes free for new ones (and empty pages at
        a table's end go back to the file system). It runs beside searches and clicks, on a
        connection of its own without ``store.timeout``'s limit on statements."""
        psycopg, _ = _driver()
        with self._errors(), psycopg.connect(self.dsn, **self._connect_args) as conn:
            conn.execute("VACUUM impressions, clicks, rewards")

    def disk_bytes(self) -> int:
        """The event tables with their indexes and TOAST (large values) tables."""
        with self._reading() as conn:
            return int(conn.execute(
                "SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE c.relkind = 'r' AND n.nspname = "
                "current_schema() AND c.relname = ANY(%s)", (list(TABLES),)).fetchone()[0])

    def close(self) -> None:
        thread = None
        if hasattr(self, "_closed"):
            with self._outage_lock:
                self._closed.set()
                thread = self._reconnecting
        if thread is not None:
            thread.join(timeout=self.timeout + 5)  # (at most one connection attempt)
        self._stop_writers()
        if self._pool is not None:
            self._pool.close()


class ConnectionLeadership(Leadership):
    def __init__(self, conn):
        self._conn = conn

    def held(self) -> bool:
        """Whether its connection still answers (the lock lives and dies with it)."""
        try:
            self._conn.execute("SELECT 1")
        except Exception:  # noqa: BLE001 -- any failure: the session, and the lock, are gone
            return False
        return True

    def release(self) -> None:
        self._conn.close()


def describe(dsn: str) -> str:
    """The server, database and user a connection string names, as
    ``postgresql://user@host:port/database``: never its password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 -- a malformed string: connecting says what is wrong
        return "postgresql://(store.dsn)"
    user = params.get("user")
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port")
    return (f"postgresql://{user + '@' if user else ''}{host}{':' + str(port) if port else ''}"
            f"/{params.get('dbname') or ''}")


def redact(text: str, dsn: str) -> str:
    """``text`` with every form of the password in ``dsn`` replaced by ``***`` (libpq's
    messages can quote a malformed connection string)."""
    secrets = set(re.findall(r"://[^/@:]*:([^@/]+)@", dsn))
    secrets.update(match.strip("'") for match in
                   re.findall(r"password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", dsn))
    with contextlib.suppress(Exception):
        from psycopg.conninfo import conninfo_to_dict

        secrets.add(str(conninfo_to_dict(dsn).get("password") or ""))
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


@hookimpl
def reranker_register_event_stores():
    return [PostgresStore]

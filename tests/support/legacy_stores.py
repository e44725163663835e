"""Event stores as schema 3 wrote them (the version before the compact encoding): every
candidate's features as float64, its ids, names and ranking in every row. The migration tests
open such stores, and the encoding benchmark measures what schema 3 took per impression."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np

from reranker.stores.events import Impression
from reranker.stores.postgres import PostgresStore
from reranker.stores.sqlite import SQLiteStore

#: Schema 3's impressions table on SQLite, as it was.
SQLITE_IMPRESSIONS = """
CREATE TABLE impressions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    created REAL NOT NULL,
    query TEXT NOT NULL,
    user_id TEXT,
    learner TEXT NOT NULL,
    model_version INTEGER NOT NULL,
    doc_ids TEXT NOT NULL,
    feature_names TEXT NOT NULL,
    features BLOB NOT NULL,
    ranking BLOB NOT NULL,
    n_shown INTEGER NOT NULL,
    log_prob REAL,
    propensities BLOB,
    teams TEXT,
    closed_seq INTEGER UNIQUE,
    context TEXT,
    arm TEXT,
    experiment TEXT,
    page_offset INTEGER NOT NULL DEFAULT 0,
    page_key TEXT
);
CREATE INDEX impressions_open ON impressions (created) WHERE closed_seq IS NULL;
"""

#: ... and on PostgreSQL, with the references to it that dropping it took along.
POSTGRES_IMPRESSIONS = (
    """CREATE TABLE impressions (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        created DOUBLE PRECISION NOT NULL,
        query TEXT NOT NULL,
        user_id TEXT,
        learner TEXT NOT NULL,
        model_version INTEGER NOT NULL,
        doc_ids TEXT NOT NULL,
        feature_names TEXT NOT NULL,
        features BYTEA NOT NULL,
        ranking BYTEA NOT NULL,
        n_shown INTEGER NOT NULL,
        log_prob DOUBLE PRECISION,
        propensities BYTEA,
        teams TEXT,
        closed_seq BIGINT UNIQUE,
        context TEXT,
        arm TEXT,
        experiment TEXT,
        page_offset INTEGER NOT NULL DEFAULT 0,
        page_key TEXT)""",
    "ALTER TABLE clicks ADD FOREIGN KEY (impression_id) REFERENCES impressions (id)",
    "ALTER TABLE rewards ADD FOREIGN KEY (impression_id) REFERENCES impressions (id)",
)

COLUMNS = ("id, created, query, user_id, learner, model_version, doc_ids, feature_names, "
           "features, ranking, n_shown, log_prob, propensities, teams, closed_seq, context, "
           "arm, experiment, page_offset, page_key")


def row(imp: Impression) -> tuple:
    """The values of :data:`COLUMNS` that schema 3 stored for ``imp``."""
    return (imp.id, imp.created, imp.query, imp.user_id, imp.learner, imp.model_version,
            json.dumps(imp.doc_ids), json.dumps(imp.feature_names),
            np.ascontiguousarray(imp.features, dtype=np.float64).tobytes(),
            np.asarray(imp.ranking, dtype=np.int32).tobytes(), imp.n_shown, imp.log_prob,
            None if imp.propensities is None
            else np.asarray(imp.propensities, dtype=np.float64).tobytes(),
            None if imp.teams is None else json.dumps(imp.teams), imp.closed_seq,
            None if imp.context is None else json.dumps(imp.context), imp.arm,
            imp.experiment, imp.offset, imp.page_key)


def sqlite_store(path: Path, impressions: list[Impression]) -> None:
    """A SQLite store of schema 3 at ``path`` holding ``impressions`` (with their clicks)."""
    SQLiteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE impressions")
        conn.execute("DROP TABLE feature_sets")
        conn.executescript(SQLITE_IMPRESSIONS)
        _fill(conn, impressions, "?")


def postgres_store(dsn: str, impressions: list[Impression]) -> None:
    """The same on the (empty) PostgreSQL database ``dsn``."""
    import psycopg

    PostgresStore(dsn).close()
    with psycopg.connect(dsn) as conn:
        conn.execute("DROP TABLE impressions CASCADE")
        conn.execute("DROP TABLE feature_sets")
        for statement in POSTGRES_IMPRESSIONS:
            conn.execute(statement)
        _fill(conn, impressions, "%s")


def _fill(conn, impressions: list[Impression], mark: str) -> None:
    marks = ", ".join([mark] * len(COLUMNS.split(",")))
    conn.cursor().executemany(f"INSERT INTO impressions ({COLUMNS}) VALUES ({marks})",
                              [row(imp) for imp in impressions])
    conn.cursor().executemany(
        f"INSERT INTO clicks (impression_id, doc_id, position, created) VALUES ({mark}, {mark}, "
        f"{mark}, 0)", [(imp.id, doc_id, imp.shown_ids().index(doc_id) + imp.offset + 1)
                        for imp in impressions for doc_id in imp.clicked or []])
    last = max((imp.closed_seq or 0 for imp in impressions), default=0)
    conn.execute(f"UPDATE meta SET value = {mark} WHERE key = 'closed_seq'", (str(last),))
    conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")

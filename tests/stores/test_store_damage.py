"""A damaged SQLite event store never ends the process: with its file truncated or its pages
overwritten while the service runs (one process, or gunicorn workers), a click is answered 503
saying what to run, /healthz reports the store damaged and /readyz 503 from any worker, the
searches go on, and once the file is restored (online, through SQLite's backup API, as
`sqlite3 events.sqlite ".restore BACKUP"` does) every answer is as before, the clicks
acknowledged before the damage among them."""

from __future__ import annotations

import math
import os
import sqlite3
import time

import pytest

from reranker.core.errors import StoreError
from reranker.stores.conformance import impression
from reranker.stores.sqlite import SQLiteStore
from tests.support.configs import write_config
from tests.support.servers import ServeProcess, wait_until


def copy_database(source, target):
    """``source`` copied into ``target`` page by page, with SQLite's locks."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def damage(path, how):
    """Damage the database file (first moving every page the write-ahead log holds into
    it, as the service's checkpoints do)."""
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    finally:
        conn.close()
    if how == "truncated":
        os.truncate(path, 100)
    else:  # every page after the first (the header and the schema) overwritten
        size = path.stat().st_size
        with open(path, "r+b") as handle:
            handle.seek(8192)
            handle.write(os.urandom(size - 8192))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("how", ["truncated", "overwritten"])
def test_a_damaged_store_is_503_and_reported_and_used_again_once_restored(workdir, how,
                                                                         workers):
    # (pages stay open to clicks for the whole test)
    server = ServeProcess(write_config(workdir, trainer={"feedback_window": 600}),
                          "--workers", str(workers))
    store = workdir / "events.sqlite"
    try:
        server.wait_ready()
        pages = [server.post("/search", {"query": f"tea kettle {i}"}).json()
                 for i in range(30)]
        first = pages[0]
        assert server.post("/click", {"impression_id": first["impression_id"],
                                      "doc_id": first["hits"][1]["id"]}).status_code == 202
        backup = workdir / "backup.sqlite"
        copy_database(store, backup)
        damage(store, how)

        clicked = pages[1]
        answer = server.post("/click", {"impression_id": clicked["impression_id"],
                                        "doc_id": clicked["hits"][0]["id"]})
        assert answer.status_code == 503, answer.text
        message = answer.json()["error"]["message"]
        assert "event store events.sqlite is damaged" in message
        assert '`sqlite3 events.sqlite ".restore BACKUP"`' in message
        assert str(workdir) not in message  # where it is stays in the log
        for _ in range(4):  # every worker, whichever met the damage, reports it
            health = server.get("/healthz").json()
            assert "events" in health["problems"], health
            assert health["events"]["status"] == "damaged", health["events"]
            assert "is damaged" in health["events"]["error"]
            ready = server.get("/readyz")
            assert ready.status_code == 503 and "events" in ready.json()["problems"]
        # the engine still answers: searches go on, their pages wait to be written
        assert server.post("/search", {"query": "green tea"}).status_code == 200

        copy_database(backup, store)  # restored while the service runs
        wait_until(lambda: server.get("/readyz").status_code == 200)
        wait_until(lambda: all(server.get("/healthz").json()["events"]["status"] == "ok"
                               for _ in range(4)))
        answer = server.post("/click", {"impression_id": clicked["impression_id"],
                                        "doc_id": clicked["hits"][0]["id"]})
        assert answer.status_code == 202, answer.text
        again = server.post("/click", {"impression_id": first["impression_id"],
                                       "doc_id": first["hits"][1]["id"]})
        assert again.status_code == 202 and again.json()["duplicate"] is True
        assert not (workdir / "events.sqlite.damaged").exists()
    finally:
        server.stop()
    assert server.proc.returncode in (0, -15), server.log_path.read_text()


def test_processes_found_damage_once_and_a_restored_store_stays_sound_for_each(tmp_path):
    """Two processes' stores on one SQLite file: one finds the damage by a statement, the
    other learns of it from the note the first left; once the file is restored the one that
    checks first finds it sound for good, whatever the other, not yet due to check, still
    remembers: old news is not noted again, so the two cannot keep passing it back and
    forth."""
    path = tmp_path / "events.sqlite"
    note = path.with_name("events.sqlite.damaged")
    first, second = SQLiteStore(path), SQLiteStore(path)
    later = time.monotonic() + 3600  # (a check not due yet)
    try:
        for i in range(40):
            first.log_impression(impression(f"i{i}", 1000.0 + i, n=50, shown=10))
        first.flush()
        copy_database(path, tmp_path / "backup.sqlite")
        damage(path, "overwritten")
        with pytest.raises(StoreError, match="is damaged"):
            first.pending(0)
        assert note.exists()
        second._damage_checked = later
        with pytest.raises(StoreError, match="is damaged"):  # told by the note
            second.check_damage()

        copy_database(tmp_path / "backup.sqlite", path)
        first._damage_checked = -math.inf  # due to check: finds the file sound
        first.check_damage()
        assert not note.exists() and first.pending(0)["closed_unapplied"] == 0
        with pytest.raises(StoreError, match="is damaged"):  # not due yet: remembers
            second.check_damage()
        assert not note.exists()  # ... and does not tell the others again
        first._damage_checked = later
        first.check_damage()
        second._damage_checked = -math.inf
        second.check_damage()
        first.check_damage()
        assert not note.exists()
    finally:
        first.close()
        second.close()


def test_a_damaged_index_is_damage_though_sqlite_names_it_with_an_extended_code(tmp_path):
    """SQLite reports a damaged index with an extended code (SQLITE_CORRUPT_INDEX): it is
    damage all the same, not an ordinary failure to try again."""
    store = SQLiteStore(tmp_path / "events.sqlite")
    try:
        error = sqlite3.DatabaseError("database disk image is malformed")
        error.sqlite_errorcode = sqlite3.SQLITE_CORRUPT | (3 << 8)  # SQLITE_CORRUPT_INDEX
        assert store._is_damage(error)
        busy = sqlite3.OperationalError("database is locked")
        busy.sqlite_errorcode = sqlite3.SQLITE_BUSY
        assert not store._is_damage(busy)
    finally:
        store.close()


def test_a_check_that_cannot_say_keeps_what_was_found(tmp_path, monkeypatch):
    """A re-check that meets a busy database (not damage) leaves the damage as it was found,
    not replaced by "database is locked" in the note the other processes read."""
    path = tmp_path / "events.sqlite"
    store = SQLiteStore(path)
    try:
        store.log_impression(impression("i0", 1000.0))
        store.flush()
        damage(path, "truncated")
        with pytest.raises(StoreError, match="is damaged"):
            store.pending(0)
        found = path.with_name("events.sqlite.damaged").read_text()

        def busy():
            raise sqlite3.OperationalError("database is locked")

        monkeypatch.setattr(store, "_verify", busy)
        store._damage_checked = -math.inf
        with pytest.raises(StoreError, match="is damaged"):
            store.check_damage()
        assert path.with_name("events.sqlite.damaged").read_text() == found
        assert "locked" not in found
    finally:
        store.close()

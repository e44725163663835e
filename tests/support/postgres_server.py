"""A real PostgreSQL server for the store tests: the one RERANKER_TEST_POSTGRES_DSN names, or
a throwaway cluster made with Debian's initdb and pg_ctl in a temporary folder, listening on
a unix socket there only, and removed at the end of the session. Each test gets a database
of its own."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

ENV_DSN = "RERANKER_TEST_POSTGRES_DSN"


def server_binaries() -> Path | None:
    """The folder of initdb and pg_ctl (the newest installed version), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class ThrowawayCluster:
    """initdb + pg_ctl start in a temporary folder; :meth:`stop` removes it all. Without
    ``fsync`` (the tests' default) a commit is not flushed to disk: fast, and still durable
    against the death of any client process, which is what the tests kill."""

    def __init__(self, bin_dir: Path, fsync: bool = False):
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="reranker-pg-"))
        self.data = self.root / "data"
        # initdb refuses to run as root: the cluster then belongs to the postgres user
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            shutil.chown(self.root, self.user)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--no-sync", "-E", "UTF8")
        options = (f"-c listen_addresses='' -k {self.root} -c fsync={'on' if fsync else 'off'} "
                   f"-c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-o", options,
                  "-w", "-t", "60", "start")
        self.dsn = f"host={self.root} port=5432 user=postgres dbname=postgres"

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin_dir / tool), *args]
        if self.user:
            command = ["runuser", "-u", self.user, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            log = self.root / "log"
            raise RuntimeError(f"{tool} failed: {result.stdout}{result.stderr}"
                               + (log.read_text() if log.exists() else ""))

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class Databases:
    """Makes a fresh database per test on the server ``dsn`` reaches, and drops them."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self.made: list[str] = []

    def _admin(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(statement)

    def create(self) -> str:
        from psycopg.conninfo import make_conninfo

        name = f"reranker_test_{uuid.uuid4().hex[:12]}"
        self._admin(f"CREATE DATABASE {name}")
        self.made.append(name)
        return make_conninfo(self.dsn, dbname=name)

    def drop(self, dsn: str) -> None:
        from psycopg.conninfo import conninfo_to_dict

        name = conninfo_to_dict(dsn)["dbname"]
        self._admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        self.made.remove(name)

"""PostgreSQL for the benchmarks: the server a DSN names, or a throwaway cluster of Debian's
``postgresql`` (as the tests start one), with databases made for the run and dropped after."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def postgres_databases(dsn: str | None) -> Iterator:
    """A ``Databases`` (``create()`` gives the DSN of a new database) on the server ``dsn``
    names, or on a throwaway cluster (``fsync`` on) when it is None; every database it made
    is dropped, and the cluster stopped, at the end."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
    from postgres_server import Databases, ThrowawayCluster, server_binaries
    from psycopg.conninfo import make_conninfo

    cluster = None
    if not dsn:
        binaries = server_binaries()
        if binaries is None:
            raise SystemExit("no PostgreSQL server: install Debian's postgresql or pass "
                             "--postgres-dsn")
        cluster = ThrowawayCluster(binaries, fsync=True)
        dsn = cluster.dsn
    databases = Databases(dsn)
    try:
        yield databases
    finally:
        for name in list(databases.made):
            databases.drop(make_conninfo(databases.dsn, dbname=name))
        if cluster is not None:
            cluster.stop()

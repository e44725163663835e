"""The PostgreSQL event store against a real server: the service through real HTTP, trainers
that share one database, and what a wrong connection string or a blocked database does.
(The store's own guarantees are tested on both stores in test_events.py.)"""

import socket
import threading
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest
import requests
import yaml

from reranker.core.config import load_config
from reranker.core.errors import ConflictError, StoreError
from reranker.learners.base import Learner, RankResult, argmax_ranking
from reranker.learners.featuremap import FeatureMap
from reranker.models.arms import Arm
from reranker.models.model import ModelFactory
from reranker.models.trainer import Trainer
from reranker.stores.conformance import take_trainer_lock_in_thread
from reranker.stores.events import Impression
from reranker.stores.postgres import PostgresStore, describe
from tests.support.configs import write_config
from tests.support.servers import LiveServer, ServeProcess, run_cli
from tests.support.traffic import learn

SECRET = "s3cret-Pw"


def documented_postgres_config() -> dict:
    page = (Path(__file__).parents[2] / "docs" / "how-to" / "event-store.md").read_text(
        encoding="utf-8")
    section = page.split("# The event store: SQLite or PostgreSQL")[1]
    return yaml.safe_load(section.split("```yaml")[1].split("```")[0])


def test_the_documented_configuration_serves_learns_and_keeps_clicks(workdir, postgres_dsn):
    """`reranker serve` on the documented PostgreSQL config (docs/how-to/event-store.md):
    search, click (202, on the server when it answers), train in the background, serve the
    new model version."""
    config = documented_postgres_config()
    assert config["store"]["type"] == "postgresql"
    config["store"]["dsn"] = postgres_dsn
    path = write_config(workdir, store=config["store"], backend=config["backend"],
                        trainer={"feedback_window": 2.0, "interval": 0.2})
    server = ServeProcess(path)
    try:
        def search(query):
            response = requests.post(server.url + "/search", json={"query": query}, timeout=30)
            assert response.status_code == 200, response.text
            return response.json()

        def click(impression_id, doc_id):
            response = requests.post(server.url + "/click", json={
                "impression_id": impression_id, "doc_id": doc_id}, timeout=30)
            assert response.status_code == 202, response.text
            # committed when answered: another connection sees it at once
            with psycopg.connect(postgres_dsn) as conn:
                assert conn.execute("SELECT 1 FROM clicks WHERE impression_id = %s AND "
                                    "doc_id = %s", (impression_id, doc_id)).fetchone()

        assert search("tea kettle")["model_version"] == 0
        learn(search, click, pages=3)
        deadline = time.monotonic() + 60
        while search("tea kettle")["model_version"] < 1:
            assert time.monotonic() < deadline, server.log_path.read_text()
            time.sleep(0.2)
        health = requests.get(server.url + "/healthz", timeout=30).json()
        assert health["status"] == "ok" and health["model"]["clicks"] >= 2
    finally:
        server.stop()


def test_a_blocked_or_restarted_database_answers_503_and_loses_nothing(workdir, postgres_dsn):
    path = write_config(workdir, store={"type": "postgresql", "dsn": postgres_dsn,
                                        "timeout": 0.5}, trainer={"enabled": False})
    live = LiveServer(path)
    try:
        page = live.post("/search", {"query": "tea"}).json()
        doc = page["hits"][1]["id"]
        blocker = psycopg.connect(postgres_dsn)
        blocker.execute("LOCK TABLE impressions IN ACCESS EXCLUSIVE MODE")
        try:
            started = time.monotonic()
            # A search still answers: its impression waits in the process's queue.
            waiting = live.post("/search", {"query": "tea"})
            assert waiting.status_code == 200
            response = live.post("/click", {"impression_id": page["impression_id"],
                                            "doc_id": doc})
            assert response.status_code == 503, response.text
            # the client hears what failed, not where: the log has the server
            message = response.json()["error"]["message"]
            assert "event store" in message and describe(postgres_dsn) not in message
            assert time.monotonic() - started < 10  # store.timeout bounds the wait
        finally:
            blocker.rollback()
            blocker.close()
        # every connection the service held is cut, as a server restart would
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            # (waiting up to 5 s for each session to end: without the wait, a session
            # could end between the pool's check of its connection and the click's use)
            admin.execute("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                          "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        assert live.post("/search", {"query": "tea"}).status_code == 200
        response = live.post("/click", {"impression_id": page["impression_id"], "doc_id": doc})
        assert response.status_code == 202 and not response.json()["duplicate"]
        assert live.service.events.stats()["clicks"] == 1  # the refused attempt left nothing
        # the impression that waited while the table was locked is written
        assert live.service.events.get_impression(waiting.json()["impression_id"])
    finally:
        live.stop()


def test_after_the_server_ends_every_session_the_next_write_takes_a_new_connection(
        postgres_dsn):
    """A restart leaves every pooled connection broken: the first one found broken has the
    others checked at once, instead of a wait of a second before each further check."""
    store = PostgresStore(postgres_dsn, pool_size=4, timeout=0.5)
    try:
        with store._pool.connection(), store._pool.connection(), store._pool.connection():
            pass  # three connections, now idle in the pool
        assert store._pool.get_stats()["pool_available"] >= 3
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            # (waiting up to 5 s for each session to end)
            admin.execute("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                          "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        started = time.monotonic()
        store.check_writable()  # a write, on a new connection
        assert time.monotonic() - started < 0.5
    finally:
        store.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_connection_errors_name_store_dsn_and_never_the_password(postgres_databases):
    from psycopg.conninfo import make_conninfo

    cases = {
        "nobody listens": (f"postgresql://reranker:{SECRET}@127.0.0.1:{free_port()}/events",
                           "cannot connect"),
        "no such database": (make_conninfo(postgres_databases.dsn, dbname="no_such_db",
                                           password=SECRET), "no_such_db"),
        "malformed": (f"host=localhost password={SECRET} dbname", "cannot connect"),
    }
    for case, (dsn, words) in cases.items():
        with pytest.raises(StoreError) as info:
            PostgresStore(dsn, timeout=2.0)
        message = info.value.message
        assert message.startswith("store.dsn: ") and words in message, (case, message)
        assert SECRET not in message, case


def test_the_cli_reports_an_unreachable_server_by_its_key(tmp_path):
    path = write_config(tmp_path, store={
        "type": "postgresql", "timeout": 2.0,
        "dsn": f"postgresql://reranker:{SECRET}@127.0.0.1:{free_port()}/events"})
    result = run_cli("train", "-c", str(path), check=False)
    assert result.returncode != 0 and "store.dsn" in result.stderr
    assert "postgresql://reranker@127.0.0.1" in result.stderr
    assert SECRET not in result.stderr + result.stdout and "Traceback" not in result.stderr


def test_the_trainer_lock_is_dropped_with_its_session(postgres_dsn):
    """A trainer that dies (its session ends) does not keep the lock (that the lock excludes
    other objects is the store's conformance check)."""
    first, second = PostgresStore(postgres_dsn), PostgresStore(postgres_dsn)
    try:
        with first.trainer_lock("arm-a"):
            waiter, got = take_trainer_lock_in_thread(second, "arm-a")
            assert not got.wait(0.3)
            with psycopg.connect(postgres_dsn, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE "
                              "locktype = 'advisory' AND granted AND pid <> pg_backend_pid()")
            assert got.wait(10)
            waiter.join()
    finally:
        first.close()
        second.close()


class Summing(Learner):
    """Adds up the features of the clicked documents: the weights say how often each
    impression was applied, whatever the order."""

    name = "summing"
    description = "test learner"

    def _initialize(self, n_features):
        self.w_ = np.zeros(n_features)

    def _rank(self, X, n_shown, rng):
        return RankResult(ranking=argmax_ranking(X @ self.w_), scores=X @ self.w_)

    def _update(self, X, feedback):
        if not len(feedback.clicked):
            return False
        self.w_ = self.w_ + X[feedback.clicked].sum(axis=0)
        return True


def test_two_trainers_sharing_a_store_apply_every_impression_once(open_store, tmp_path):
    """Two trainers with their own connections (as on two machines) and one model folder
    train while impressions and clicks arrive: every impression is applied once."""
    factory = ModelFactory(Summing, {}, FeatureMap(5), ["a", "b"], "none")

    def trainer(store):
        arm = Arm.from_factory(factory, tmp_path / "models")
        arm.identity.aliases = ("summing",)
        return Trainer([arm], store, feedback_window=0.0, batch_size=7)

    trainers = [trainer(open_store()), trainer(open_store())]
    writer, rng = open_store(), np.random.default_rng(3)
    count, stop, reports, errors = 150, threading.Event(), [], []

    def train(t):
        while not stop.is_set():
            try:
                reports.append(t.run_once())
            except Exception as exc:  # noqa: BLE001 -- reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=train, args=(t,)) for t in trainers]
    for thread in threads:
        thread.start()
    def log(k):
        X = rng.integers(0, 5, size=(4, 2)).astype(float)
        writer.log_impression(Impression(
            id=f"i{k}", created=time.time(), query="q", user_id=None, learner="summing",
            model_version=0, doc_ids=["d0", "d1", "d2", "d3"], feature_names=["a", "b"],
            features=X, ranking=np.arange(4), n_shown=4, arm="summing"))
        try:
            writer.record_click(f"i{k}", f"d{k % 4}")
        except ConflictError:  # a trainer closed it first: a page without a click
            pass

    for k in range(count - 1):
        log(k)
    stop.set()
    for thread in threads:
        thread.join()
    assert not errors
    # the last page is clicked with no trainer running: the last pass learns from it and
    # saves (a pass that learns nothing saves no version, and its pages stay to be read)
    log(count - 1)
    reports.append(trainers[0].run_once(close_all=True))
    closed = writer.closed_since(0, 10 * count)
    assert len(closed) == count
    # (a pass that learned nothing saves no version, and the next pass reads its impressions
    # again: reports may count them twice; the saved model counts each once)
    assert sum(report.applied for report in reports) >= count
    model, _ = trainers[1].models.load_latest(factory)
    assert model.progress.impressions == count and model.progress.cursor == count
    expected = sum(imp.features[imp.doc_ids.index(doc)] for imp in closed for doc in imp.clicked)
    np.testing.assert_allclose(model.learner.w_, expected)


def test_store_settings_come_from_the_file_or_the_environment(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("store: {type: postgresql, dsn: 'host=db dbname=events', pool_size: 3}\n")
    config = load_config(path, environ={"RERANKER_STORE_DSN": "postgresql://u@other/x"})
    assert (config.store.dsn, config.store.pool_size) == ("postgresql://u@other/x", 3)
    assert load_config(path, environ={}).store.dsn == "host=db dbname=events"


def test_a_database_written_by_a_newer_reranker_is_refused(postgres_dsn):
    PostgresStore(postgres_dsn).close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match=r"store.dsn: .* has event schema version 99.*newer"):
        PostgresStore(postgres_dsn)


class Cable:
    """A TCP forwarder to the PostgreSQL server that can be unplugged (every connection cut
    and new ones refused, as when the server stops or the network fails) and plugged in
    again on the same port."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.port = free_port()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.plug()

    def plug(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                host, port = self.target
                if host.startswith("/"):  # the server's Unix socket in that folder
                    server = socket.socket(socket.AF_UNIX)
                    server.connect(f"{host}/.s.PGSQL.{port}")
                else:
                    server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def unplug(self) -> None:
        try:  # (wakes the thread blocked in accept(), which a close alone would not)
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for sock in self._sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self._sockets = []


def test_while_the_server_is_unreachable_searches_answer_and_the_rest_fails_at_once(
        workdir, postgres_dsn):
    """The server gone (its connections cut, new ones refused): after the first operation
    that waits ``store.timeout`` in vain, searches answer (without the store's counts, their
    impressions queued), clicks and /readyz answer 503 at once and /healthz says so; once it
    answers again, within a few seconds the store is back and the queued impressions are
    written: nothing a search answered is lost."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(postgres_dsn)
    cable = Cable(params.get("host") or "/var/run/postgresql", int(params.get("port") or 5432))
    dsn = make_conninfo(postgres_dsn, host="127.0.0.1", port=str(cable.port))
    path = write_config(workdir, store={"type": "postgresql", "dsn": dsn, "timeout": 1.0},
                        trainer={"enabled": False})
    live = LiveServer(path)
    try:
        page = live.post("/search", {"query": "tea"}).json()
        cable.unplug()
        live.post("/search", {"query": "kettle green"})  # (may wait for the pool's timeout)
        during = []
        for query in ("tea", "green tea", "espresso beans"):
            started = time.monotonic()
            answer = live.post("/search", {"query": query})
            assert answer.status_code == 200, answer.text
            assert time.monotonic() - started < 0.5
            during.append(answer.json()["impression_id"])
        started = time.monotonic()
        click = live.post("/click", {"impression_id": page["impression_id"],
                                     "doc_id": page["hits"][0]["id"]})
        assert click.status_code == 503 and "unreachable" in click.json()["error"]["message"]
        assert live.get("/readyz").status_code == 503
        health = live.get("/healthz").json()
        assert health["status"] == "degraded" and "events" in health["problems"]
        assert time.monotonic() - started < 1.0  # all three at once, not store.timeout each
        cable.plug()
        deadline = time.monotonic() + 10
        while live.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the store did not come back"
            time.sleep(0.2)
        click = live.post("/click", {"impression_id": during[0], "doc_id": "1"})
        assert click.status_code in (202, 422), click.text  # (422: '1' was not shown)
        live.service.events.flush()
        for impression_id in during:
            assert live.service.events.get_impression(impression_id) is not None
    finally:
        live.stop()
        cable.unplug()


def test_a_pool_whose_connections_are_all_in_use_is_busy_not_unreachable(postgres_dsn):
    """Every connection held (under load, each for up to store.timeout): an operation that
    waits in vain fails alone, and the store is not taken for unreachable."""
    store = PostgresStore(postgres_dsn, pool_size=1, timeout=0.5)
    held = threading.Event()
    release = threading.Event()

    def hold():
        with store._connection():
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        with pytest.raises(StoreError):
            store.pending(0)
        assert store.unreachable_since is None
    finally:
        release.set()
        holder.join()
    try:
        assert store.pending(0)["open_impressions"] == 0
    finally:
        store.close()

"""What an operator runs on: /metrics, /readyz on a real full disk, the public and operator
views of /healthz, errors without internal details, JSON logs, and the backend's order
serving while a learner fails or is too slow; all through the real HTTP service."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from reranker import hookimpl
from reranker.api.app import BackgroundServer, create_app
from reranker.core.config import load_config
from reranker.core.plugins import get_plugin_manager
from reranker.learners.base import Learner, Param, RankResult
from reranker.serving.monitoring import JsonFormatter, redact
from reranker.serving.ranking import BACKEND_ORDER
from reranker.serving.service import RerankerService
from tests.support.configs import write_config
from tests.support.servers import LiveServer, samples
from tests.support.traffic import learn


def test_metrics_count_requests_clicks_versions_and_the_trainers_lag(workdir):
    server = LiveServer(write_config(workdir, trainer={"enabled": False,
                                                       "feedback_window": 0.0}))
    try:
        pages = [server.post("/search", {"query": "tea kettle"}).json() for _ in range(3)]
        for page in pages:  # ranks 6 and 3: one is the lower result of its randomised pair
            for position in (5, 2):  # whichever pairing the page used, so the pass learns
                assert server.post("/click", {"impression_id": page["impression_id"],
                                              "doc_id": page["hits"][position]["id"]}
                                   ).status_code == 202
        server.post("/click", {"impression_id": pages[0]["impression_id"],
                               "doc_id": pages[0]["hits"][5]["id"]})  # again: a duplicate
        assert server.post("/click", {"impression_id": "nope", "doc_id": "1"}).status_code \
            == 403  # not an id this service signed
        assert server.post("/click", {"impression_id": 7}).status_code == 400
        server.service.events.close_impressions(before=float("inf"))
        before = samples(server)
        assert before[("reranker_request_seconds_count",
                       (("endpoint", "/search"), ("status", "200")))] == 3
        assert before[("reranker_clicks_total", (("outcome", "accepted"),))] == 6
        assert before[("reranker_clicks_total", (("outcome", "duplicate"),))] == 1
        assert before[("reranker_clicks_total", (("outcome", "forged_or_foreign"),))] == 1
        assert before[("reranker_refused_total", (("endpoint", "click"),
                                                  ("reason", "forged")))] == 1
        assert before[("reranker_clicks_total", (("outcome", "invalid"),))] == 1
        label = server.service.arms[0].labels[0]
        assert before[("reranker_trainer_lag_impressions", (("arm", label),))] == 3
        assert before[("reranker_trainer_lag_seconds", (("arm", label),))] > 0
        assert before[("reranker_store_writable", ())] == 1
        version = ("reranker_model_version", (("arm", label),
                                              ("learner", "preference_perceptron")))
        assert before[version] == server.service.model.version == 0  # nothing learned yet
        server.service.trainer.run_once()
        after = samples(server)
        assert after[("reranker_trainer_lag_impressions", (("arm", label),))] == 0
        assert after[version] == server.service.model.version > 0
    finally:
        server.stop()


def test_metrics_show_the_impressions_waiting_to_be_written(workdir):
    import threading

    server = LiveServer(write_config(workdir, trainer={"enabled": False}))
    try:
        writer = server.service.events._impressions()
        write_batch, gate = writer._write_batch, threading.Event()
        writer._write_batch = lambda batch: (gate.wait(30), write_batch(batch))
        for _ in range(2):
            assert server.post("/search", {"query": "tea kettle"}).status_code == 200
        queued = ("reranker_impressions_queued", ())
        # The gauge is read before the scrape's reads of the store, which wait for the
        # queue: the writer goes on a moment later.
        threading.Timer(0.5, gate.set).start()
        assert "reranker_impressions_queued 2.0" in server.get("/metrics").text
        assert samples(server)[queued] == 0
        assert server.service.events.stats()["impressions"] == 2
    finally:
        server.stop()


class Failing(Learner):
    """A third-party learner that fails on every ranking."""

    name = "failing_test"

    def _initialize(self, n_features):
        self.w_ = np.zeros(n_features)

    def _rank(self, X, n_shown, rng):
        raise RuntimeError("broken plugin")

    def _update(self, X, feedback):
        return False


def reverse(X):
    return np.arange(X.shape[0])[::-1].copy()


#: Results a plugin's _rank may wrongly give, and the words of the log's error.
BROKEN_RESULTS = {
    "repeats": (lambda X: RankResult(ranking=np.zeros(X.shape[0], np.intp),
                                     scores=np.zeros(X.shape[0])), "position 1 holds 0"),
    "out_of_range": (lambda X: RankResult(ranking=reverse(X) + 1, scores=np.zeros(X.shape[0])),
                     "out of range or seen before"),
    "drops_one": (lambda X: RankResult(ranking=reverse(X)[:-1], scores=np.zeros(X.shape[0])),
                  "must hold the"),
    "short_scores": (lambda X: RankResult(ranking=reverse(X), scores=np.zeros(3)),
                     "scores must hold one number per candidate"),
    "floats": (lambda X: RankResult(ranking=reverse(X).astype(float),
                                    scores=np.zeros(X.shape[0])), "as integers"),
    "not_a_result": (lambda X: reverse(X), "not a RankResult"),
}


class Broken(Failing):
    """A third-party learner whose _rank gives a result that cannot be served."""

    name = "broken_test"
    params = (Param("mode", str, "repeats", "which wrong result", choices=tuple(BROKEN_RESULTS)),)

    def _rank(self, X, n_shown, rng):
        return BROKEN_RESULTS[self.mode][0](X)


class Lists(Failing):
    """A third-party learner that gives its result as Python lists (a valid permutation)."""

    name = "lists_test"

    def _rank(self, X, n_shown, rng):
        return RankResult(ranking=reverse(X).tolist(), scores=[0.0] * X.shape[0])


class UpdateFails(Lists):
    """A third-party learner that ranks but whose every update raises (a bug)."""

    name = "update_fails_test"

    def _update(self, X, feedback):
        raise RuntimeError("update exploded")


class Slow(Failing):
    """A third-party learner that ranks correctly, in reverse, but slowly."""

    name = "slow_test"

    def _rank(self, X, n_shown, rng):
        time.sleep(0.05)
        ranking = np.arange(X.shape[0])[::-1].copy()
        return RankResult(ranking=ranking, scores=-np.arange(X.shape[0], dtype=float))


class _Plugin:
    @staticmethod
    @hookimpl
    def reranker_register_learners():
        return [Failing, Slow, Broken, Lists, UpdateFails]


def serve_with(config_path: Path):
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(_Plugin())
    service = RerankerService(load_config(config_path), pm).open()
    server = LiveServer.__new__(LiveServer)
    server.config, server.service = service.config, service
    server.server = BackgroundServer(create_app(service=service))
    server.url = server.server.url
    return server


def engine_order(server, query: str) -> list[str]:
    candidates = server.service.backend.search(query, 10, [], [])
    return candidates.ids[:10]


def engine_order_served_for_an_error(server, caplog) -> tuple[dict, str]:
    """A search whose learner fails: answered in the engine's order, under no learner, and
    counted as a fallback of the arm for an error. Returns the body and the arm's label."""
    with caplog.at_level(logging.ERROR):
        page = server.post("/search", {"query": "tea kettle"})
    assert page.status_code == 200
    body = page.json()
    assert [hit["id"] for hit in body["hits"]] == engine_order(server, "tea kettle")
    assert body["learner"] == BACKEND_ORDER
    label = server.service.arms[0].labels[0]
    assert samples(server)[("reranker_learner_fallbacks_total",
                            (("arm", label), ("reason", "error")))] == 1
    return body, label


def test_a_failing_learner_leaves_the_engines_order_serving_logged_and_counted(workdir, caplog):
    server = serve_with(write_config(workdir, learner={"name": "failing_test", "params": {}}))
    try:
        body, label = engine_order_served_for_an_error(server, caplog)
        assert "failed to rank" in caplog.text and "broken plugin" in caplog.text
        logged = server.service.events.get_impression(body["impression_id"])
        assert logged.arm == BACKEND_ORDER and logged.context == {"fallback": "learner"}
        # no arm takes the page for its own
        server.post("/click", {"impression_id": body["impression_id"],
                               "doc_id": body["hits"][3]["id"]})
        assert server.service.trainer.run_once(close_all=True).applied == 0
    finally:
        server.stop()


@pytest.mark.parametrize("mode", sorted(BROKEN_RESULTS))
def test_a_ranking_that_cannot_be_served_leaves_the_engines_order_serving(workdir, caplog,
                                                                          mode):
    """A result that is not a permutation of the candidates with one score each is the
    learner's failure: the engine's order is served and logged, never the wrong page (which
    would list a result twice or one that does not exist, and train on its clicks)."""
    server = serve_with(write_config(workdir, learner={"name": "broken_test",
                                                       "params": {"mode": mode}}))
    try:
        _, label = engine_order_served_for_an_error(server, caplog)
        assert "learner 'broken_test'" in caplog.text and BROKEN_RESULTS[mode][1] in caplog.text
        health = server.get("/healthz").json()
        assert health["status"] == "degraded" and "learner" in health["problems"]
        assert health["ranking"][label]["status"] == "failing"
        assert BROKEN_RESULTS[mode][1] in health["ranking"][label]["error"]
    finally:
        server.stop()


def test_a_ranking_given_as_lists_is_served(workdir):
    server = serve_with(write_config(workdir, learner={"name": "lists_test", "params": {}}))
    try:
        body = server.post("/search", {"query": "tea kettle"}).json()
        assert body["learner"] == "lists_test"
        engine = engine_order(server, "tea kettle")
        assert [hit["id"] for hit in body["hits"]] != engine
    finally:
        server.stop()


def learn_through(server, pages: int) -> list[dict]:
    """Pages the perceptron learns from (:func:`conftest.learn`), through HTTP; returns them."""
    shown = []

    def search(query):
        shown.append(server.post("/search", {"query": query}).json())
        return shown[-1]

    learn(search, lambda impression_id, doc_id: server.post(
        "/click", {"impression_id": impression_id, "doc_id": doc_id}), pages=pages)
    return shown


def good_and_bad(workdir, bad: str):
    """An interleaved experiment of an arm of learner ``bad`` and the perceptron."""
    return write_config(workdir, trainer={"enabled": False, "feedback_window": 0.0},
                        experiment={"mode": "interleave", "name": "trial", "window": 50,
                                    "arms": {"bad": {"name": bad},
                                             "good": {"name": "preference_perceptron"}}})


def test_one_arms_failing_learner_leaves_the_other_arms_training(workdir, caplog):
    """An interleaved experiment whose one arm's learner raises on every update: the other
    arm learns and saves versions, the failure names the arm and its learner in the log
    (with its traceback, once), the report and /healthz, and the failing arm's impressions
    wait for it (its cursor does not move)."""
    server = serve_with(good_and_bad(workdir, "update_fails_test"))
    try:
        learn_through(server, 6)
        trainer = server.service.trainer
        with caplog.at_level(logging.ERROR):
            report = trainer.run_pass()
            trainer.run_pass()
        assert report.arms["good"].versions and "bad" not in report.arms
        assert report.errors["bad"].startswith("arm bad (learner update_fails_test): ")
        assert "update exploded" in report.errors["bad"]
        assert caplog.text.count("training arm bad") == 1  # the same failure, logged once
        assert "arm bad (learner update_fails_test)" in trainer.last_error
        health = server.get("/healthz").json()
        assert health["status"] == "degraded" and "trainer" in health["problems"]
        bad = server.service.by_label["bad"]
        model, _ = bad.models.load_latest(bad.factory)
        assert model is None  # nothing of the failing arm saved: its impressions wait
    finally:
        server.stop()


def test_a_page_whose_logged_ranking_cannot_be_read_is_skipped(workdir, monkeypatch):
    """A page logged with a ranking that does not fit its candidates (logged by an earlier
    version that served what a learner gave unchecked) is skipped, not a failure that would
    stop the arm for good."""
    server = serve_with(write_config(workdir, trainer={"enabled": False,
                                                       "feedback_window": 0.0}))
    try:
        pages = learn_through(server, 3)
        arm = server.service.arms[0]
        read = type(arm).feedback

        def broken_first(self, imp):
            if imp.id == pages[0]["impression_id"]:
                raise IndexError("index 56 is out of bounds for axis 0 with size 56")
            return read(self, imp)

        monkeypatch.setattr(type(arm), "feedback", broken_first)
        report = server.service.trainer.run_once(close_all=True)
        assert not report.errors and report.skipped == 1 and report.applied == 2
    finally:
        server.stop()


def test_reranker_train_names_the_failing_arm_and_exits_1(workdir, monkeypatch):
    """reranker train, with a learner installed as a plugin would be, trains the good arm,
    names the failing one and exits 1."""
    from click.testing import CliRunner

    from reranker.commands import main as cli_module

    config = good_and_bad(workdir, "update_fails_test")
    server = serve_with(config)
    try:
        learn_through(server, 4)
    finally:
        server.stop()
    import reranker.core.plugins

    def with_the_plugin(load_entrypoints=True):
        pm = get_plugin_manager(load_entrypoints=False)
        pm.register(_Plugin())
        return pm

    monkeypatch.setattr(reranker.core.plugins, "get_plugin_manager", with_the_plugin)
    result = CliRunner().invoke(cli_module.cli, ["train", "-c", str(config), "--close-all"])
    assert result.exit_code == 1, result.output
    assert "good: applied" in result.output and "saved model version 1" in result.output
    assert "Error: training arm bad (learner update_fails_test): " in result.output
    # and the services sharing the store see it (a single pass, as from a scheduler)
    from reranker.stores import open_event_store

    events = open_event_store(load_config(config))
    try:
        status = events.trainer_status()
    finally:
        events.close()
    assert "arm bad (learner update_fails_test)" in status["last_error"]
    assert status["interval"] is None  # (the first pass recorded: no cadence yet)


def test_a_slow_learner_trips_its_breaker_and_the_engines_order_serves(workdir):
    server = serve_with(write_config(workdir, learner={"name": "slow_test", "params": {}},
                                     server={"ranking_budget_ms": 10.0, "breaker_strikes": 2,
                                             "breaker_cooldown": 60.0}))
    try:
        engine = engine_order(server, "tea kettle")
        slow = [server.post("/search", {"query": "tea kettle"}).json() for _ in range(2)]
        for page in slow:  # served by the learner (in reverse), slowly
            assert page["learner"] == "slow_test"
            assert [hit["id"] for hit in page["hits"]] != engine
        started = time.perf_counter()
        page = server.post("/search", {"query": "tea kettle"}).json()
        assert time.perf_counter() - started < 5  # (no sleep: the learner is not asked)
        assert page["learner"] == BACKEND_ORDER
        assert [hit["id"] for hit in page["hits"]] == engine
        label = server.service.arms[0].labels[0]
        assert samples(server)[("reranker_learner_fallbacks_total",
                                (("arm", label), ("reason", "slow")))] == 1
        health = server.get("/healthz").json()
        assert "learner" in health["problems"] and \
            health["ranking"][label] == {"status": "too slow"}
    finally:
        server.stop()


def test_public_health_hides_paths_and_the_operator_view_needs_the_token(workdir):
    server = LiveServer(write_config(workdir, server={"admin_token": "s3cret"}))
    try:
        public = server.get("/healthz")
        assert public.status_code == 200 and public.json()["status"] == "ok"
        assert str(workdir) not in public.text
        assert public.json()["backend"]["path"] == "index"  # the folder's name only
        assert server.get("/healthz?detail=1").status_code == 401
        wrong = server.get("/healthz?detail=1", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and "admin_token" in wrong.json()["error"]["message"]
        operator = server.get("/healthz?detail=1", headers={"Authorization": "Bearer s3cret"})
        assert operator.status_code == 200 and str(workdir) in operator.text
        assert server.get("/healthz?detail=maybe").json()["error"]["field"] == "detail"
        assert server.get("/readyz").json() == {"status": "ok", "problems": []}
    finally:
        server.stop()


def test_redaction_keeps_the_problem_and_drops_locations():
    assert redact("event store /srv/data/events.sqlite failed: disk I/O error") == \
        "event store events.sqlite failed: disk I/O error"
    assert redact("cannot reach http://es.internal:9200/products (timeout)") == \
        "cannot reach <hidden> (timeout)"
    assert redact("learner 'a/b' 1/2 of 3") == "learner 'a/b' 1/2 of 3"


@pytest.fixture
def small_disk(tmp_path):
    """A real 16 MB file system (tmpfs) to fill up (room for SQLite's write-ahead log, which
    grows to a few MB before a checkpoint); skipped where mounting is not allowed."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(folder: Path) -> Path:
    filler = folder / "filler"
    handle = open(filler, "wb", buffering=0)  # noqa: SIM115 -- closed below, full or not
    try:
        for size in (65536, 4096, 512):  # to the last block
            try:
                while True:
                    handle.write(b"\0" * size)
            except OSError:
                continue
    finally:
        handle.close()
    return filler


def test_a_read_only_folder_is_told_alike_by_healthz_and_readyz_before_during_and_after(
        workdir, small_disk):
    """The store's folder turns read-only (bound read-only over itself, as a file system
    remounted read-only on an error is seen by every new file the store opens): /healthz
    and /readyz both say the store cannot take writes while it lasts, searches still
    answer, and both say all is well once it is writable again."""
    server = LiveServer(write_config(workdir, trainer={"enabled": False},
                                     store={"path": str(small_disk / "events.sqlite")}))
    bound = False
    try:
        def story():
            health, ready = server.get("/healthz").json(), server.get("/readyz")
            return health["events"]["status"], ready.status_code, ready.json()["problems"]

        assert server.post("/search", {"query": "tea kettle"}).status_code == 200
        assert story() == ("ok", 200, [])
        done = subprocess.run(["mount", "--bind", "-o", "ro", str(small_disk),
                               str(small_disk)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot bind a folder read-only here: {done.stderr.strip()}")
        bound = True
        for _ in range(3):  # the same story from both, at every probe
            assert story() == ("unwritable", 503, ["events"])
        assert server.post("/search", {"query": "tea kettle"}).status_code == 200
        subprocess.run(["umount", str(small_disk)], check=True)
        bound = False
        assert story() == ("ok", 200, [])
    finally:
        if bound:
            subprocess.run(["umount", "-l", str(small_disk)], capture_output=True)
        server.stop()


def test_on_a_full_disk_readiness_fails_clicks_answer_503_and_nothing_is_lost(workdir,
                                                                              small_disk):
    server = LiveServer(write_config(workdir, trainer={"enabled": False},
                                     store={"path": str(small_disk / "events.sqlite")}))
    try:
        pages = [server.post("/search", {"query": "tea kettle"}).json() for _ in range(3)]
        accepted = []
        for page in pages[:2]:
            answer = server.post("/click", {"impression_id": page["impression_id"],
                                            "doc_id": page["hits"][2]["id"]})
            assert answer.status_code == 202
            accepted.append(page["impression_id"])
        filler = fill(small_disk)
        ready = server.get("/readyz")
        assert ready.status_code == 503 and ready.json()["problems"] == ["events"]
        waiting = server.post("/search", {"query": "tea kettle"})  # its impression waits
        assert waiting.status_code == 200
        refused = server.post("/click", {"impression_id": pages[2]["impression_id"],
                                         "doc_id": pages[2]["hits"][2]["id"]})
        assert refused.status_code == 503
        assert str(small_disk) not in refused.text  # the problem, not where it is
        # /healthz tells the story /readyz tells, at once, with the impressions waiting
        health = server.get("/healthz").json()
        assert health["status"] == "degraded" and "events" in health["problems"]
        assert health["events"]["status"] == "unwritable"
        assert health["events"]["queued_impressions"] >= 1
        assert "queue_failing" in health["events"]
        # a search whose impression waits in memory says so
        queued = server.post("/search", {"query": "tea kettle"})
        assert queued.status_code == 200
        assert queued.headers["Reranker-Impression"].startswith("queued; ")
        assert "impressions wait for the event store, which fails" in \
            queued.headers["Reranker-Impression"]
        filler.unlink()
        assert server.get("/readyz").status_code == 200
        again = server.post("/click", {"impression_id": pages[2]["impression_id"],
                                       "doc_id": pages[2]["hits"][2]["id"]})
        assert again.status_code == 202
        # and both say so at once once the disk has room again
        health = server.get("/healthz").json()
        assert health["status"] == "ok" and health["events"]["status"] == "ok", health
        assert health["events"]["queued_impressions"] == 0
        assert "Reranker-Impression" not in server.post("/search",
                                                        {"query": "tea"}).headers
        for impression_id in accepted:  # what was answered 202 is still there
            assert server.service.events.get_impression(impression_id).clicked
        # and the impression of the search on the full disk is written now
        assert server.service.events.get_impression(waiting.json()["impression_id"])
    finally:
        server.stop()
    shutil.rmtree(small_disk / "models", ignore_errors=True)


def test_health_probes_answer_within_a_second_and_name_what_is_stuck(workdir, monkeypatch):
    """The engine's health call and the event store hang (as a frozen database does):
    /healthz and /readyz still answer within their deadline, naming what is stuck, and a
    hung check is not started again while it hangs; once they answer, all is well again."""
    server = LiveServer(write_config(workdir))
    release = threading.Event()
    calls = {"backend": 0, "store": 0}
    backend_health, store_pending = server.service.backend.health, server.service.events.pending

    def hanging_backend():
        calls["backend"] += 1
        release.wait(30)
        return backend_health()

    def hanging_store(cursor):
        calls["store"] += 1
        release.wait(30)
        return store_pending(cursor)

    monkeypatch.setattr(server.service.backend, "health", hanging_backend)
    monkeypatch.setattr(server.service.events, "pending", hanging_store)
    try:
        for _ in range(3):
            started = time.monotonic()
            health = server.get("/healthz").json()
            ready = server.get("/readyz")
            assert time.monotonic() - started < 3.0  # each within its 0.8 s deadline
            assert health["status"] == "degraded"
            assert {"backend", "events"} <= set(health["problems"])
            assert health["backend"]["status"] == "stuck"
            assert "no answer within the health check's deadline" in health["backend"]["error"]
            assert health["events"]["status"] == "stuck"
            assert ready.status_code == 503 and ready.json()["stuck"] == ["backend"]
        assert calls == {"backend": 1, "store": 1}  # one hung call each, not one per probe
        release.set()
        time.sleep(0.1)
        assert server.get("/healthz").json()["status"] == "ok"
        assert server.get("/readyz").json() == {"status": "ok", "problems": []}
    finally:
        release.set()
        server.stop()


def test_health_probes_reuse_their_threads_and_connections(live):
    """Every probe runs its checks in the same threads, so a load balancer probing for
    days does not open a database connection (three files) per probe."""
    def open_files():
        return len(os.listdir("/proc/self/fd"))

    for _ in range(5):
        assert live.get("/healthz").status_code == 200
        assert live.get("/readyz").status_code == 200
    before = open_files()
    for _ in range(150):
        live.get("/healthz")
        live.get("/readyz")
    assert open_files() - before < 10


def test_a_search_stuck_on_a_frozen_store_is_answered_503_in_time_and_not_logged(
        workdir, monkeypatch):
    """The event store stops answering the searches' reads (as a frozen database does):
    each search is answered 503 after server.search_timeout, naming the setting; once every
    search thread waits on one, the next is refused at once; /healthz still answers in time;
    the searches answered 503 log no page; and once the store answers, searches go on."""
    server = LiveServer(write_config(workdir, server={"search_timeout": 0.5, "threads": 4}))
    release = threading.Event()
    read_counts = server.service.events.click_counts

    def frozen(*args, **kwargs):
        release.wait(30)
        return read_counts(*args, **kwargs)

    monkeypatch.setattr(server.service.events, "click_counts", frozen)
    try:
        answers = []
        for _ in range(5):
            started = time.monotonic()
            answer = server.post("/search", {"query": "tea kettle"})
            answers.append((answer, time.monotonic() - started))
        for answer, _ in answers:
            assert answer.status_code == 503
            assert "server.search_timeout" in answer.json()["error"]["message"]
        # four searches held the four threads for their 0.5 s; the fifth found none free
        assert all(seconds >= 0.45 for _, seconds in answers[:4])
        assert "every search thread of this process waits" in \
            answers[4][0].json()["error"]["message"]
        assert server.get("/healthz").status_code == 200
        assert "reranker_searches_timed_out_total 5.0" in server.get("/metrics").text
        release.set()
        deadline = time.monotonic() + 10
        while server.service.searches.busy and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.service.searches.busy == 0
        page = server.post("/search", {"query": "tea kettle"})
        assert page.status_code == 200
        server.service.events.flush()
        # only the page answered 200 was logged: the stuck searches were answered 503
        assert server.service.events.stats()["impressions"] == 1
    finally:
        release.set()
        server.stop()


def test_json_log_lines_carry_each_requests_fields(workdir):
    lines = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(JsonFormatter().format(record))

    access = logging.getLogger("reranker.access")
    handler = Collect()
    access.addHandler(handler)
    old_level = access.level
    access.setLevel(logging.INFO)
    server = LiveServer(write_config(workdir))
    try:
        server.post("/search", {"query": "tea kettle"})
        server.post("/click", {"impression_id": "nope", "doc_id": "1"})
    finally:
        server.stop()
        access.removeHandler(handler)
        access.setLevel(old_level)
    entries = [json.loads(line) for line in lines]
    assert [(e["method"], e["path"], e["status"]) for e in entries] == [
        ("POST", "/search", 200), ("POST", "/click", 403)]
    assert all(e["ms"] >= 0 and e["level"] == "info" and e["time"].endswith("Z")
               and e["pid"] == os.getpid() for e in entries)


def test_a_trainer_in_another_process_that_stops_or_fails_is_seen_by_healthz_and_metrics(
        workdir, monkeypatch):
    """With training apart from serving (trainer.enabled false, `train --follow`), the
    service sees the trainer through what it keeps in the event store: impressions left open
    past their window (no trainer runs), a trainer whose last pass failed, or one that has
    stopped while impressions wait; and the lag counts from where the trainer applied, not
    from the served model."""
    import reranker.serving.health
    from reranker.models.trainer import Trainer

    monkeypatch.setattr(reranker.serving.health, "TRAINER_GRACE", 0.3)
    server = LiveServer(write_config(workdir, trainer={"enabled": False, "interval": 0.01,
                                                       "feedback_window": 0.0}))
    try:
        events, arm = server.service.events, server.service.arms[0]
        page = server.post("/search", {"query": "tea kettle"}).json()
        assert server.get("/healthz").json()["status"] == "ok"
        time.sleep(0.5)  # nobody closes it
        health = server.get("/healthz").json()
        assert "trainer" in health["problems"] and health["trainer"]["overdue_seconds"] >= 0
        assert samples(server)[("reranker_trainer_overdue_seconds", ())] > 0.3
        # a trainer runs (as `train --follow` would): closed, applied, recorded
        trainer = Trainer.from_config(server.service.config, events)
        trainer.interval = 0.01
        server.post("/click", {"impression_id": page["impression_id"],
                               "doc_id": page["hits"][3]["id"]})
        assert trainer.run_pass() is not None
        health = server.get("/healthz").json()
        assert health["status"] == "ok", health
        assert health["trainer"]["shared"]["last_error"] is None
        assert samples(server)[("reranker_trainer_lag_impressions",
                                (("arm", arm.labels[0]),))] == 0
        # a served model behind the trainer (pinned, or not reloaded yet): the trainer's
        # cursor counts
        served = arm.model.progress.cursor
        assert server.service.applied_cursor(arm, {"cursors": {arm.id: served + 7}}) == \
            served + 7
        assert server.service.applied_cursor(arm, {"cursors": {"other": 99}}) == served
        # its last pass failed
        events.record_trainer({"last_run": time.time(), "last_error": "No space left on device",
                               "cursors": {arm.id: 1}, "interval": 0.01})
        health = server.get("/healthz").json()
        assert "trainer" in health["problems"]
        assert health["trainer"]["shared"]["last_error"] == "No space left on device"
        # it stopped while impressions wait
        server.post("/search", {"query": "tea"})
        events.close_impressions(float("inf"))
        events.record_trainer({"last_run": time.time() - 5, "last_error": None,
                               "cursors": {arm.id: 1}, "interval": 0.01})
        health = server.get("/healthz").json()
        assert "trainer" in health["problems"] and health["trainer"]["stalled_seconds"] >= 5
    finally:
        server.stop()


def test_the_results_of_plugins_are_checked_and_those_of_built_in_learners_by_their_tests():
    """A plugin's results are checked on every search; the built-in learners' are checked
    by the conformance suite in the project's own tests instead (the check costs a tenth of
    the in-process ranking), and so are those of a plugin that subclasses one."""
    pm = get_plugin_manager(load_entrypoints=False)
    from reranker.core.plugins import learner_classes

    assert all(cls._shipped for cls in learner_classes(pm).values())

    class Subclass(learner_classes(pm)["preference_perceptron"]):
        name = "subclass_test"

    assert not Broken._shipped and not Subclass._shipped


def test_one_arms_model_folder_in_trouble_leaves_the_other_arms_training(workdir):
    server = serve_with(good_and_bad(workdir, "lists_test"))
    try:
        learn_through(server, 4)
        bad = server.service.by_label["bad"]
        folder = bad.models.dir
        if folder.exists():
            shutil.rmtree(folder)
        folder.write_text("not a folder")  # its models cannot be read
        report = server.service.trainer.run_once(close_all=True)
        assert report.arms["good"].versions
        assert report.errors["bad"].startswith("arm bad (learner lists_test): store.models: ")
    finally:
        server.stop()

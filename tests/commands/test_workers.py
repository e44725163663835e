"""Serving from several processes, for real: `reranker serve --workers 2` (gunicorn worker
processes over HTTP) sharing one event store and model folder, with one trainer among them;
`reranker train --follow`; and clicks answered 202 that survive a SIGKILL of the server."""

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import requests

from reranker.core.config import load_config
from reranker.stores import open_event_store
from reranker.testing import cli_env, reranker_command
from tests.support.configs import write_config
from tests.support.servers import ServeProcess, follow, run_cli, stop_following, wait_for_version
from tests.support.stores import store_rows
from tests.support.traffic import learn


def worker_sessions(url: str, timeout: float = 60) -> dict[bool, requests.Session]:
    """One keep-alive session on each of the two workers, told apart by whether the worker
    leads the trainers (``/healthz``: ``trainer.leading``): a kept-alive connection stays
    with the worker that accepted it."""
    sessions: dict[bool, requests.Session] = {}
    deadline = time.monotonic() + timeout
    while len(sessions) < 2:
        assert time.monotonic() < deadline, f"did not reach both workers: {sessions}"
        session = requests.Session()
        leading = session.get(url + "/healthz", timeout=30).json()["trainer"]["leading"]
        if leading is None or leading in sessions:
            session.close()
            time.sleep(0.05)
            continue
        sessions[leading] = session
    return sessions


def test_two_workers_share_the_store_and_one_trains(workdir, store_section):
    """Searches and clicks on both workers land in one store; one worker trains, applying
    every impression exactly once; both serve the new model version afterwards."""
    path = write_config(workdir, store=store_section,
                        trainer={"feedback_window": 5.0, "interval": 0.2})
    server = ServeProcess(path, "--workers", "2")
    try:
        server.wait_ready()
        sessions = worker_sessions(server.url)
        impressions = clicks = 0
        for session in sessions.values():
            def search(query, session=session):
                response = session.post(server.url + "/search", json={"query": query},
                                        timeout=30)
                assert response.status_code == 200, response.text
                return response.json()

            def click(impression_id, doc_id, session=session):
                nonlocal clicks
                response = session.post(server.url + "/click", json={
                    "impression_id": impression_id, "doc_id": doc_id}, timeout=30)
                assert response.status_code == 202, response.text
                clicks += 1

            assert search("tea kettle")["model_version"] == 0
            learn(search, click, pages=3)
            impressions += 4
            forged = session.post(server.url + "/click", json={"impression_id": "nope",
                                                               "doc_id": "1"}, timeout=30)
            assert forged.status_code == 403  # refused on each worker
        deadline = time.monotonic() + 90
        while True:
            health = {leading: session.get(server.url + "/healthz", timeout=30).json()
                      for leading, session in sessions.items()}
            model = health[True]["model"]
            if model["impressions"] == impressions and all(
                    h["model_version"] == health[True]["model_version"] for h in health.values()):
                break
            assert time.monotonic() < deadline, (health, server.log_path.read_text())
            time.sleep(0.2)
        assert model["clicks"] == clicks and model["version"] >= 1
        assert health[True]["trainer"]["last_run"] is not None
        assert health[False]["trainer"]["last_run"] is None  # it never trained
        for session in sessions.values():  # both workers rank with the trained model
            page = session.post(server.url + "/search", json={"query": "tea kettle"},
                                timeout=30).json()
            assert page["model_version"] == model["version"]
        for session in sessions.values():  # either worker's /metrics counts both workers'
            metrics = session.get(server.url + "/metrics", timeout=30).text
            assert f'reranker_clicks_total{{outcome="accepted"}} {float(clicks)}' in metrics
            assert 'reranker_refused_total{endpoint="click",reason="forged"} 2.0' in metrics
            assert f'reranker_model_version{{arm="{health[True]["learner"]}",learner="' \
                   f'{health[True]["learner"]}"}} {float(model["version"])}' in metrics
    finally:
        server.stop()
    stats = _store_stats(path)
    assert stats["impressions"] == impressions + 2 and stats["clicks"] == clicks


def _store_stats(path) -> dict:
    store = open_event_store(load_config(path))
    try:
        return store.stats()
    finally:
        store.close()


def test_a_separate_follow_trainer_trains_for_services_without_one(workdir):
    """`reranker serve --workers 2 --no-trainer` beside `reranker train --follow`: the
    follower trains, the workers serve its versions; SIGTERM stops it cleanly."""

    path = write_config(workdir, trainer={"feedback_window": 1.0, "interval": 0.2})
    server = ServeProcess(path, "--workers", "2", "--no-trainer")
    follower = follow(path)
    try:
        server.wait_ready()

        def search(query):
            return requests.post(server.url + "/search", json={"query": query},
                                 timeout=30).json()

        def click(impression_id, doc_id):
            response = requests.post(server.url + "/click", json={
                "impression_id": impression_id, "doc_id": doc_id}, timeout=30)
            assert response.status_code == 202, response.text

        learn(search, click, pages=3)
        wait_for_version(search, 1, server.log_path)
        health = requests.get(server.url + "/healthz", timeout=30).json()
        assert health["trainer"]["last_run"] is None  # the workers did not train
    finally:
        server.stop()
        output = stop_following(follower, timeout=30)
    assert follower.returncode == 0, output
    assert "runs the trainer" in output


def test_json_logs_from_workers_are_json_lines_gunicorn_s_too(workdir):
    """With server.log_format json, every line the workers and gunicorn's arbiter log is a
    JSON object (a log collector reads them all)."""
    import json

    path = write_config(workdir, server={"log_format": "json"})
    server = ServeProcess(path, "--workers", "2", "--no-trainer",
                          env={"RERANKER_SERVER_PROT": "9"})  # a misspelt key: said once
    try:
        server.wait_ready()
        assert requests.post(server.url + "/search", json={"query": "tea"},
                             timeout=30).status_code == 200
    finally:
        server.stop()
    lines = [line for line in server.log_path.read_text(encoding="utf-8").splitlines()
             if line.strip()]
    records = [json.loads(line) for line in lines]  # each a JSON object, or this fails
    loggers = {record.get("logger") for record in records}
    assert "gunicorn.error" in loggers and "reranker.access" in loggers, loggers
    misspelt = [r for r in records if "RERANKER_SERVER_PROT" in r["message"]]
    assert len(misspelt) == 1 and misspelt[0]["logger"] == "reranker.core.config"


def test_workers_out_of_range_is_an_error_naming_the_key(workdir):
    path = write_config(workdir, server={"workers": -1})
    result = run_cli("serve", "-c", str(path), check=False)
    assert result.returncode == 1 and "server.workers" in result.stderr


@pytest.mark.parametrize("workers", [0, 2])
def test_clicks_answered_202_survive_a_sigkill(workdir, store_section, workers):
    """Clicks from eight concurrent clients; the server is killed with SIGKILL in the middle
    of the stream; every click that was answered 202 is in the store afterwards."""
    path = write_config(workdir, store=store_section,
                        trainer={"feedback_window": 3600.0, "interval": 1.0})
    server = ServeProcess(path, "--no-trainer", "--workers", str(workers))
    accepted, lock = [], threading.Lock()
    try:
        server.wait_ready()
        pages = []
        for i in range(30):
            page = requests.post(server.url + "/search", json={"query": f"tea kettle {i % 5}"},
                                 timeout=60).json()
            pages.extend((page["impression_id"], hit["id"]) for hit in page["hits"])
        enough = threading.Event()

        def clicker(chunk):
            with requests.Session() as session:
                for impression_id, doc_id in chunk:
                    try:
                        response = session.post(server.url + "/click", json={
                            "impression_id": impression_id, "doc_id": doc_id}, timeout=60)
                    except requests.RequestException:
                        return  # the server is gone
                    if response.status_code == 202:
                        with lock:
                            accepted.append((impression_id, doc_id))
                            if len(accepted) >= len(pages) // 3:
                                enough.set()

        threads = [threading.Thread(target=clicker, args=(pages[i::8],)) for i in range(8)]
        for thread in threads:
            thread.start()
        assert enough.wait(120), server.log_path.read_text()
        _kill_all(server)
        for thread in threads:
            thread.join(60)
    except BaseException as exc:  # the server's log says what it was doing
        _kill_all(server)
        raise AssertionError(f"{exc!r}\nserver log:\n{server.log_path.read_text()}") from exc
    store = open_event_store(load_config(path))
    try:
        stored = set(store_rows(store, "SELECT impression_id, doc_id FROM clicks"))
    finally:
        store.close()
    assert len(accepted) >= len(pages) // 3
    assert [click for click in accepted if click not in stored] == []


def _kill_all(server: ServeProcess) -> None:
    """SIGKILL the server and, with workers, every worker process at the same moment."""
    for pid in [server.proc.pid, *_children(server.proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    server.kill()


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_a_workers_app_leaves_its_start_up_objects_out_of_the_cycle_collector(workdir):
    """What a serving process holds once it is open lives as long as the process: frozen,
    Python's full collections no longer walk it (a pause of tens of milliseconds each)."""
    import gc

    from reranker.api.wsgi import app

    gc.unfreeze()
    served = app(str(write_config(workdir, trainer={"enabled": False})))
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # the modules, the index, the kernels, Flask
        assert served.test_client().post("/search", json={"query": "tea"}).status_code == 200
    finally:
        gc.unfreeze()
        served.extensions["reranker"].close()


def test_a_worker_that_cannot_start_again_is_retried_while_the_others_serve(workdir):
    """With workers running, one that dies and cannot start again (no saved version of its
    model loads: every file was overwritten) waits and exits to be started again: the others
    go on serving (gunicorn stops every worker when one fails to boot), and once the files
    are restored a new worker starts."""
    from reranker.serving.service import RerankerService

    path = write_config(workdir, trainer={"enabled": False, "feedback_window": 0.0})
    service = RerankerService(load_config(path)).open()
    try:
        learn(lambda q: service.search(q, 10), service.click, pages=3)
        version = service.trainer.run_once(close_all=True).version
    finally:
        service.close()
    server = ServeProcess(path, "--workers", "2", "--no-trainer")
    try:
        server.wait_ready()
        first = set(_children(server.proc.pid))
        assert len(first) == 2
        (model_file,) = (workdir / "models").glob(f"*/model-{version:06d}.json")
        kept = model_file.read_bytes()
        model_file.write_text("{}")
        os.kill(sorted(first)[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while "cannot start (it is started again in 5 s)" not in server.log_path.read_text():
            assert time.monotonic() < deadline, server.log_path.read_text()
            time.sleep(0.2)
        for _ in range(5):  # the healthy worker serves; the master is still there
            assert server.post("/search", {"query": "tea"}).status_code == 200
        assert server.proc.poll() is None
        model_file.write_bytes(kept)
        # then a new worker starts and stays: the same two workers, and no failure more, for
        # longer than a failing worker waits before it exits
        from reranker.api.wsgi import WORKER_RETRY

        deadline, last, since = time.monotonic() + 60, None, time.monotonic()
        while True:
            state = (frozenset(_children(server.proc.pid)),
                     server.log_path.read_text().count("cannot start"))
            if state != last or len(state[0]) != 2:
                last, since = state, time.monotonic()
            elif time.monotonic() - since > WORKER_RETRY + 2:
                break
            assert time.monotonic() < deadline, server.log_path.read_text()
            time.sleep(0.2)
        assert last[0] - first  # a new worker among them
        assert server.post("/search", {"query": "tea"}).status_code == 200
    finally:
        server.stop()


def test_a_problem_every_worker_would_have_is_one_error_before_any_starts(workdir):
    import subprocess

    path = write_config(workdir)
    result = subprocess.run([*reranker_command(), "serve", "-c", str(path), "--workers", "2",
                             "--port", "0"], capture_output=True, text=True, timeout=120,
                            env={**cli_env(), "RERANKER_SIGNING_KEYS": "k4:short"})
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "RERANKER_SIGNING_KEYS" in result.stderr and "serving" not in result.stdout

"""A damaged embedded index never ends the process: files truncated or overwritten while the
service runs, or another collection's index swapped in, are answered 503 and reported by
/healthz and /readyz, and the service searches again once the files are restored."""

from __future__ import annotations

import os
import shutil

import pytest

from reranker.core.config import load_config
from reranker.core.plugins import backend_class, get_plugin_manager
from tests.support.configs import write_config
from tests.support.servers import LiveServer, ServeProcess, wait_until


def segment_files(index):
    return sorted(p for p in index.iterdir() if p.suffix in (".idx", ".term", ".store"))



def damage(index, how):
    if how == "truncated":
        for path in segment_files(index):
            os.truncate(path, 10)
    elif how == "overwritten":
        for path in segment_files(index):
            data = bytearray(path.read_bytes())
            data[len(data) // 4: len(data) // 2] = os.urandom(len(data) // 2 - len(data) // 4)
            path.write_bytes(bytes(data))
    else:  # another collection's index, built with other fields, swapped in
        other = index.parent / "other"
        other.mkdir()
        config = load_config(write_config(other, backend={"fields": ["name"],
                                                          "path": str(other / "index")}))
        backend = backend_class(get_plugin_manager(), "embedded")(config)
        report = backend.index_documents(iter([("a", {"id": "a", "name": "tea kettle"})]),
                                         recreate=True)
        assert report.indexed == 1, report
        backend.close()
        index.rename(index.parent / "moved-away")
        (other / "index").rename(index)


@pytest.mark.parametrize("how, workers", [("truncated", 0), ("overwritten", 0),
                                          ("swapped", 0), ("truncated", 2)])
def test_a_damaged_index_is_503_and_reported_and_searched_again_once_restored(workdir, how,
                                                                             workers):
    index = workdir / "index"
    good = workdir / "good-copy"
    shutil.copytree(index, good)
    if workers:  # gunicorn's worker processes, each with the index open
        live = ServeProcess(workdir / "config.yaml", "--workers", str(workers), "--no-trainer")
        live.wait_ready()
    else:
        live = LiveServer(workdir / "config.yaml")
    try:
        for _ in range(2 * workers + 1):
            assert live.post("/search", {"query": "tea kettle"}).status_code == 200
        damage(index, how)
        # a query never searched before: nothing is answered from the caches
        answer = live.post("/search", {"query": "espresso grinder"})
        assert answer.status_code == 503, answer.text
        message = answer.json()["error"]["message"]
        assert "embedded index" in message and "reranker index --recreate" in message
        assert str(workdir) not in message  # where it is stays in the log
        for _ in range(1 + 2 * workers):  # whichever process answers
            health = live.get("/healthz").json()
            assert health["status"] == "degraded" and "backend" in health["problems"]
            assert health["backend"]["status"] == "unavailable"
            ready = live.get("/readyz")
            assert ready.status_code == 503 and ready.json()["problems"] == ["backend"]
        for _ in range(3 + 2 * workers):  # every process stays up and keeps answering
            assert live.post("/search", {"query": "green tea"}).status_code == 503
        # restored: a check in a child process finds it sound, and searches go on
        shutil.rmtree(index)
        shutil.copytree(good, index)
        wait_until(lambda: live.post("/search", {"query": "green tea"}).status_code == 200)
        wait_until(lambda: all(live.get("/healthz").json()["status"] == "ok"
                               and live.get("/readyz").status_code == 200
                               and live.post("/search", {"query": "green tea"}).status_code
                               == 200 for _ in range(1 + 2 * workers)))
    finally:
        live.stop()
    if workers:  # no worker ended and was replaced meanwhile
        log = live.log_path.read_text(encoding="utf-8")
        assert log.count("Booting worker") == workers, log

"""Bad input and broken surroundings: clear errors, nothing lost, learning goes on."""

import json
import os
import shutil
import sqlite3

import numpy as np
import pytest
import requests

from reranker.core.config import load_config
from reranker.core.errors import ModelLoadError, StoreError
from reranker.learners.base import Learner, RankResult, argmax_ranking
from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import Feedback
from reranker.models.arms import Arm
from reranker.models.model import ModelFactory, checksum
from reranker.models.trainer import Trainer
from reranker.serving.service import RerankerService
from reranker.stores.events import Impression
from reranker.stores.sqlite import SQLiteStore
from tests.support.configs import write_config, write_docs
from tests.support.servers import run_cli


class Fragile(Learner):
    """Sums features of clicked documents; its update fails when a clicked document has a
    negative first feature (a stand-in for any update that blows up)."""

    name = "fragile"
    description = "test learner"

    def _initialize(self, n_features):
        self.w_ = np.zeros(n_features)

    def _rank(self, X, n_shown, rng):
        scores = X @ self.w_
        return RankResult(ranking=argmax_ranking(scores), scores=scores)

    def _update(self, X, feedback: Feedback):
        if not len(feedback.clicked):
            return False
        self.w_ += X[feedback.clicked].sum(axis=0)  # mutate first, then fail
        if (X[feedback.clicked, 0] < 0).any():
            raise ValueError("negative feature")
        return True


def log_impression(store, imp_id, X, clicked_doc=None, arm="fragile"):
    n = len(X)
    store.log_impression(Impression(
        id=imp_id, created=0.0, query="q", user_id=None, learner="fragile", model_version=0,
        doc_ids=[f"d{i}" for i in range(n)], feature_names=["a", "b"], features=X,
        ranking=np.arange(n), n_shown=n, arm=arm))
    if clicked_doc:
        store.record_click(imp_id, clicked_doc)


def test_an_impression_whose_update_fails_is_skipped_and_learning_goes_on(tmp_path, store):
    events = store
    factory = ModelFactory(Fragile, {}, FeatureMap(5), ["a", "b"], "none")
    arm = Arm.from_factory(factory, tmp_path / "models")
    arm.identity.aliases = ("fragile",)  # the name its impressions are logged under here
    trainer = Trainer([arm], events, feedback_window=0.0)
    log_impression(events, "good1", np.array([[1.0, 0.0], [2.0, 1.0]]), "d1")
    log_impression(events, "poison", np.array([[-5.0, 7.0], [1.0, 1.0]]), "d0")
    log_impression(events, "good2", np.array([[1.0, 0.0], [0.5, 3.0]]), "d1")
    report = trainer.run_once()
    assert (report.applied, report.skipped) == (2, 1)
    model, _ = trainer.models.load_latest(factory)
    # the poison's partial update was undone: only the two good clicks count
    np.testing.assert_array_equal(model.learner.w_, [2.5, 4.0])
    assert model.progress.skipped == 1 and model.progress.cursor == 3
    log_impression(events, "good3", np.array([[1.0, 1.0], [0.0, 0.0]]), "d1")
    assert trainer.run_once().applied == 1


def test_huge_feature_values_are_clipped_and_do_not_break_serving(tmp_path, corpus):
    docs = [dict(d) for d in corpus.documents[:30]]
    docs[0]["popularity"] = 1.5e308
    docs[1]["popularity"] = -1.5e308
    for normalization in ("per_query_minmax", "zscore"):
        folder = tmp_path / normalization
        folder.mkdir()
        path = write_config(folder, features={"normalization": normalization})
        run_cli("index", "-c", str(path), str(write_docs(folder, docs)))
        service = RerankerService(load_config(path)).open()
        try:
            for _ in range(3):
                query = docs[0]["title"]
                page = service.search(query, 10)
                # three ranks apart: one is the lower result of its pair whichever pairing the
                # page used, so the pass learns and saves a version
                for hit in (page["hits"][-1], page["hits"][-4]):
                    service.click(page["impression_id"], hit["id"])
            report = service.trainer.run_once(close_all=True)
            assert report.applied == 3 and report.skipped == 0
            assert all(np.isfinite(service.model.learner.w_))
            assert service.search(query, 10)["model_version"] == 1
        finally:
            service.close()


def test_health_reports_a_failing_trainer(live):
    lock = live.service.models.dir / ".trainer.lock"
    lock.mkdir(parents=True)  # the lock file cannot be opened
    page = live.post("/search", {"query": "tea kettle"}).json()
    live.post("/click", {"impression_id": page["impression_id"], "doc_id": page["hits"][2]["id"]})
    report = live.service.trainer.run_pass()  # the arm's model folder fails: that arm's
    (error,) = report.errors.values()         # training, named, while the pass goes on
    assert error.startswith("arm ") and ".trainer.lock" in error
    health = live.get("/healthz").json()
    assert health["status"] == "degraded" and "trainer" in health["problems"]
    assert ".trainer.lock" in health["trainer"]["last_error"]
    assert health["events"]["closed_unapplied"] + health["events"]["open_impressions"] >= 1
    lock.rmdir()
    assert live.service.trainer.run_pass().applied >= 1
    assert live.get("/healthz").json()["status"] == "ok"


def test_a_model_is_refused_with_an_event_store_it_was_not_trained_from(workdir):
    config = load_config(workdir / "config.yaml")
    service = RerankerService(config).open()
    page = service.search("tea kettle", 10)
    # three ranks apart: one is the lower result of its pair whichever pairing the
    # page used, so the pass learns and saves a version
    for hit in (page["hits"][3], page["hits"][6]):
        service.click(page["impression_id"], hit["id"])
    service.trainer.run_once(close_all=True)
    service.close()
    for suffix in ("", "-wal", "-shm"):
        try:
            os.remove(config.store.path + suffix)
        except FileNotFoundError:
            pass
    with pytest.raises(StoreError, match="trained from another event store"):
        RerankerService(config).open()


def test_a_model_folder_that_is_a_file(workdir, live):
    path = write_config(workdir, store={"models": "config.yaml"})
    result = run_cli("serve", "-c", str(path), "--port", "0", check=False)
    assert result.returncode != 0 and "store.models" in result.stderr
    assert "Traceback" not in result.stderr
    # at run time: the folder becomes unreadable; the last good model keeps serving
    shutil.rmtree(live.service.models.dir)
    live.service.models.dir.write_text("not a folder")
    live.service.arms[0].served.FULL_CHECK_INTERVAL = 0.0
    assert live.post("/search", {"query": "tea"}).status_code == 200
    health = live.get("/healthz").json()
    assert health["status"] == "degraded" and "model folder" in health["model_errors"][0]


def test_a_model_with_a_valid_checksum_but_wrong_structure_is_refused(live):
    model = live.service.factory.new()
    model.version = 1
    data = model.to_dict()
    data["features"]["normalization"] = "per_query_minmax"  # a string, not an object
    data["checksum"] = checksum(data)
    with pytest.raises(ModelLoadError, match="must be objects"):
        live.service.factory.from_dict(data, "m.json")
    data["state"] = {"w_": "oops", "n_features_in_": 5}
    data["features"]["normalization"] = {"method": "per_query_minmax", "state": {}}
    data["checksum"] = checksum(data)
    live.service.models.dir.mkdir(parents=True, exist_ok=True)
    live.service.models.path(1).write_text(json.dumps(data))
    assert live.post("/search", {"query": "tea"}).json()["model_version"] == 0
    assert "model-000001.json is refused" in live.get("/healthz").json()["model_errors"][0]


def test_a_busy_event_store_answers_503_naming_the_file(live):
    """A search still answers while another process holds the write lock (its impression
    waits in the queue); a click, which needs it written, answers 503 naming the file, and
    both go through once the lock is released."""
    page = live.post("/search", {"query": "tea"}).json()
    live.service.events.close()
    live.service.events.timeout = 0.2
    blocker = sqlite3.connect(live.config.store.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        waiting = live.post("/search", {"query": "tea"})
        assert waiting.status_code == 200
        response = live.post("/click", {"impression_id": page["impression_id"],
                                        "doc_id": page["hits"][0]["id"]})
        assert response.status_code == 503
        assert "events.sqlite" in response.json()["error"]["message"]
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert live.post("/search", {"query": "tea"}).status_code == 200
    response = live.post("/click", {"impression_id": page["impression_id"],
                                    "doc_id": page["hits"][0]["id"]})
    assert response.status_code == 202
    assert live.service.events.get_impression(waiting.json()["impression_id"])


def test_clicks_are_committed_with_a_full_sync(tmp_path):
    store = SQLiteStore(tmp_path / "e.sqlite")
    log_impression(store, "i", np.array([[1.0, 0.0], [0.0, 1.0]]), "d1")
    assert store._conn().execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


@pytest.mark.parametrize("body, field", [
    ('{"query": "tea \\ud800"}', "'query'"),
    ('{"query": "tea", "user_id": "\\udfff"}', "'user_id'"),
    ('{"query": "tea \\u0000"}', "'query'"),  # PostgreSQL holds no NUL in a text
    ('{"query": "tea", "session_id": "a\\u0000b"}', "'session_id'"),
])
def test_lone_surrogates_are_client_errors(live, body, field):
    response = requests.post(live.url + "/search", data=body, timeout=10,
                             headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert field in response.json()["error"]["message"]


def test_lone_surrogate_in_a_click_is_400(live):
    response = requests.post(live.url + "/click", data='{"impression_id": "\\ud800", '
                             '"doc_id": "d1"}', headers={"Content-Type": "application/json"},
                             timeout=10)
    assert response.status_code == 400 and "'impression_id'" in response.text


def test_new_versions_are_found_even_when_the_folder_time_did_not_change(live):
    service = live.service

    def train_once():
        page = service.search("tea kettle", 10)
        # three ranks apart: one is the lower result of its pair whichever pairing the
        # page used, so the pass learns and saves a version
        for hit in (page["hits"][4], page["hits"][1]):
            service.click(page["impression_id"], hit["id"])
        service.trainer.run_once(close_all=True)

    train_once()
    assert service.model.version == 1
    stamp = os.stat(service.models.dir).st_mtime_ns
    train_once()
    os.utime(service.models.dir, ns=(stamp, stamp))  # as if both saves fell in one clock tick
    service.arms[0].served.FULL_CHECK_INTERVAL = 3600.0
    assert service.model.version == 1  # the folder's time alone does not reveal version 2
    service.arms[0].served.FULL_CHECK_INTERVAL = 0.0
    assert service.model.version == 2


@pytest.mark.parametrize("sections, message", [
    ({"features": {"numeric_fields": ["title"]}}, "in both backend.fields and"),
    ({"backend": {"fields": ["title", "_id"]}}, "'_id' cannot be a field"),
    ({"backend": {"fields": ["title", "-x"]}}, "'-x' cannot be a field"),
    ({"backend": {"id_field": "body"}}, "backend.id_field 'body'"),
])
def test_field_names_that_cannot_work_are_named(tmp_path, sections, message):
    path = write_config(tmp_path, **sections)
    result = run_cli("index", "-c", str(path), str(write_docs(tmp_path, [{"id": "a"}])),
                     check=False)
    assert result.returncode != 0 and message in result.stderr
    assert "Traceback" not in result.stderr and "panic" not in result.stderr.lower()


def test_duplicate_yaml_keys_are_refused(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("store: {path: a.sqlite}\nstore: {path: b.sqlite}\n")
    result = run_cli("train", "-c", str(path), check=False)
    assert result.returncode != 0 and "duplicate key 'store'" in result.stderr


def test_index_reports_a_number_too_large_and_a_path_that_is_a_file(tmp_path):
    path = write_config(tmp_path, features={"numeric_fields": ["popularity"]})
    docs = write_docs(tmp_path, [{"id": "a", "title": "tea", "body": "x",
                                  "popularity": 10 ** 400},
                                 {"id": "b", "title": "tea", "body": "y", "popularity": 3}])
    result = run_cli("index", "-c", str(path), str(docs), check=False)
    assert result.returncode == 1
    assert "line 1" in result.stderr and "too large" in result.stderr
    assert "indexed 1 documents" in result.stdout
    (tmp_path / "afile").write_text("x")
    path = write_config(tmp_path, backend={"path": "afile"})
    result = run_cli("index", "-c", str(path), str(docs), check=False)
    assert "afile is a file" in result.stderr and "Traceback" not in result.stderr


def test_serve_on_a_busy_port_names_it(workdir, live):
    port = live.url.rsplit(":", 1)[1]
    result = run_cli("serve", "-c", str(workdir / "config.yaml"), "--port", port, check=False)
    assert result.returncode != 0 and "server.port" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_serving_process_does_not_import_scipy_stats():
    """scipy.stats (some 45 MB and 0.4 s) is for the tests and the reports of others."""
    import subprocess
    import sys

    code = ("import sys, reranker.serving.service, reranker.api.app; "
            "print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"

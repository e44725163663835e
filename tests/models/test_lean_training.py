"""A trainer of a learner that learns only from clicks reads the pages without a click bare
(``EventStore.closed_since_lean``): the model it saves is the one a full read gives, for
the default learner and PDGD, and a learner of per-item rewards still reads every page."""

import numpy as np
import pytest

from reranker.core.config import load_config
from reranker.models.trainer import Trainer
from reranker.serving.service import RerankerService
from tests.support.configs import write_config
from tests.support.traffic import users_search


@pytest.mark.parametrize("learner", ["preference_perceptron", "pdgd"])
def test_bare_pages_train_the_model_a_full_read_trains(workdir, corpus, learner, monkeypatch):
    path = write_config(workdir, learner={"name": learner})
    service = RerankerService(load_config(path)).open()
    try:
        rng = np.random.default_rng(4)
        for t in range(4):  # searches with clicks between many without, as on a site
            users_search(service_client(service), corpus, 10, seed=t)
            for _ in range(20):
                service.search(corpus.queries[rng.integers(len(corpus.queries))][0], 10)
        service.events.close_impressions(float("inf"))
        arms, events = service.arms, service.events
        read = {"bare": 0, "full": 0}
        lean = events.closed_since_lean

        def counting(cursor, limit, arms=None):
            batch = lean(cursor, limit, arms)
            read["bare"] += sum(imp.bare for imp in batch)
            read["full"] += sum(not imp.bare for imp in batch)
            return batch

        monkeypatch.setattr(events, "closed_since_lean", counting)
        first = Trainer(arms, events, feedback_window=0.0).run_once()
        assert read["bare"] >= 80 and read["full"] >= 30, read  # most pages had no click
        model_lean, _ = arms[0].models.load_latest(arms[0].factory)
        for version in arms[0].models.versions():  # start again, reading every page in full
            arms[0].models.path(version).unlink()
        (arms[0].models.dir / "next-version").unlink()
        monkeypatch.setattr(events, "closed_since_lean", events.closed_since)
        second = Trainer(arms, events, feedback_window=0.0).run_once()
        model_full, _ = arms[0].models.load_latest(arms[0].factory)
    finally:
        service.close()
    assert first.applied == second.applied == 120 and first.updates == second.updates > 0
    assert vars(model_lean.progress) == vars(model_full.progress)
    state_lean, state_full = model_lean.learner.get_state(), model_full.learner.get_state()
    assert state_lean.keys() == state_full.keys()
    for key, value in state_lean.items():
        assert np.array_equal(np.asarray(value), np.asarray(state_full[key])), key


def test_a_learner_of_per_item_rewards_reads_every_page(workdir):
    path = write_config(workdir, learner={"name": "linucb"})
    service = RerankerService(load_config(path)).open()
    try:
        assert not service.arms[0].learning.learns_only_from_clicks()
    finally:
        service.close()
    zscore = write_config(workdir, features={"numeric_fields": ["popularity"],
                                             "normalization": "zscore"})
    service = RerankerService(load_config(zscore)).open()
    try:  # running statistics learn from every page
        assert not service.arms[0].learning.learns_only_from_clicks()
    finally:
        service.close()


class service_client:
    """The service called in-process as ``users_search`` calls a server."""

    def __init__(self, service):
        self.service = service

    def post(self, path, body):
        if path == "/search":
            return _Answer(self.service.search(body["query"], body.get("size", 10)))
        self.service.click(body["impression_id"], body["doc_id"])
        return _Answer({}, 202)


class _Answer:
    def __init__(self, data, status=200):
        self.data, self.status_code, self.text = data, status, ""

    def json(self):
        return self.data

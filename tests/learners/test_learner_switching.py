"""Learners selected in YAML serve live traffic."""

import numpy as np
import pytest

from reranker.core.config import load_config
from reranker.serving.service import RerankerService
from tests.support.configs import write_config


def serve(path):
    return RerankerService(load_config(path)).open()


def train_some(service, query="tea kettle", clicks=3):
    for i in range(clicks):
        page = service.search(query, 10)
        # and three ranks above: one of the two is the lower result of its pair whichever
        # pairing the page used, so every page teaches the perceptrons something
        for position in (-1 - i, -4 - i):
            service.click(page["impression_id"], page["hits"][position]["id"])
    return service.trainer.run_once(close_all=True)


def test_switching_learner_name_switches_the_live_learner(workdir):
    service = serve(workdir / "config.yaml")
    assert service.search("tea", 5)["learner"] == "preference_perceptron"
    train_some(service)
    service.close()
    # (the clicks above judge "tea kettle"'s results: without specialisation each of the new
    # learner's pages teaches it, as the clicks below are placed to)
    path = write_config(workdir, learner={"name": "noregret_klrank", "seed": 3,
                                          "specialize": False})
    service = serve(path)
    try:
        page = service.search("tea kettle", 5)
        assert page["learner"] == "noregret_klrank" and page["model_version"] == 0
        imp = service.events.get_impression(page["impression_id"])
        assert imp.learner == "noregret_klrank" and imp.log_prob is not None and imp.log_prob < 0
        report = train_some(service)
        assert report.version == 1 and report.updates >= 3
        folder = service.arms[0].models.dir
        assert folder.parent == workdir / "models" and folder.name.startswith("noregret_klrank-")
        assert (folder / "model-000001.json").exists()
        assert service.search("tea", 5)["model_version"] == 1
    finally:
        service.close()


def test_the_default_learner_logs_what_it_shows_and_a_seed_reproduces_it(workdir):
    queries = ["tea", "tea kettle", "green tea", "kettle"] * 3
    runs = []
    for run in range(2):  # each on a new event store: the click features start alike
        path = write_config(workdir, learner={"seed": 5},
                            store={"path": f"events{run}.sqlite", "models": f"models{run}"})
        service = serve(path)
        try:
            pages = [service.search(query, 10) for query in queries]
            for page in pages:
                imp = service.events.get_impression(page["impression_id"])
                # a fair coin picks the pairing, then each pair of it whose upper result is
                # shown is swapped with probability p (the last may reach the first candidate
                # left out); the unswapped argmax can come from either pairing
                offset, k, n = imp.context["pair_offset"], imp.n_shown, len(imp.doc_ids)
                p, swapped = imp.context["swap_probability"], len(imp.context["swapped"])
                assert p == 0.5
                pairs = {h: len(range(h, min(k, n - 1), 2)) for h in (0, 1)}
                if swapped:
                    expected = 0.5 * p ** swapped * (1 - p) ** (pairs[offset] - swapped)
                else:
                    expected = 0.5 * (1 - p) ** pairs[0] + 0.5 * (1 - p) ** pairs[1]
                assert imp.log_prob == pytest.approx(np.log(expected))
            runs.append([[hit["id"] for hit in page["hits"]] for page in pages])
        finally:
            service.close()
    assert runs[0] == runs[1]
    by_query = {}
    for query, ids in zip(queries, runs[0], strict=True):
        by_query.setdefault(query, set()).add(tuple(ids))
    assert any(len(orders) > 1 for orders in by_query.values())  # it does perturb

"""Learners selected in YAML serve live traffic; new features grow the models that can."""

import numpy as np
import pytest
from conftest import write_config

from reranker.config import load_config
from reranker.errors import ModelLoadError
from reranker.service import RerankerService


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
    path = write_config(workdir, learner={"name": "noregret_klrank", "seed": 3})
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


@pytest.mark.parametrize("name", ["greedy_klrank", "online_ranknet", "noregret_klrank"])
def test_a_new_feature_in_config_grows_the_model(workdir, name):
    features = {"numeric_fields": [], "click_features": False}
    path = write_config(workdir, features=features, learner={"name": name})
    service = serve(path)
    train_some(service)
    theta = service.model.learner.theta_.copy()
    page = service.search("tea kettle", 10)  # logged with the old features, not yet trained
    service.click(page["impression_id"], page["hits"][5]["id"])
    service.close()
    path = write_config(workdir, features={**features, "numeric_fields": ["popularity"]},
                        learner={"name": name})
    service = serve(path)
    try:
        model = service.model
        assert model.feature_names[-1] == "field_value:popularity"
        np.testing.assert_array_equal(model.learner.theta_, np.append(theta, 0.0))
        assert service.search("tea kettle", 10)["hits"]
        report = train_some(service)
        assert report.skipped >= 1  # impressions logged with the old features are passed over
        assert report.updates >= 3
        assert service.model.learner.theta_[-1] != 0.0  # the new feature is being learned
    finally:
        service.close()


def test_a_new_feature_is_refused_by_a_learner_without_growth(workdir):
    learner = {"name": "exponentiated_preference_perceptron"}
    path = write_config(workdir, features={"click_features": False}, learner=learner)
    service = serve(path)
    train_some(service)
    service.close()
    path = write_config(workdir, features={"click_features": True}, learner=learner)
    with pytest.raises(ModelLoadError, match="does not support new features"):
        serve(path)


def test_a_model_from_before_the_click_features_keeps_learning(workdir):
    """An upgrade: a perceptron trained without click features grows to take them, with
    zero weights, and keeps its learned weights."""
    path = write_config(workdir, features={"click_features": False})
    service = serve(path)
    train_some(service)
    w = service.model.learner.w_.copy()
    service.close()
    path = write_config(workdir, features={"click_features": True}, learner={"seed": 1})
    service = serve(path)
    try:
        model = service.model
        assert model.feature_names[-2:] == ("click_lift:query_doc", "click_lift:doc")
        np.testing.assert_array_equal(model.learner.w_, np.append(w, [0.0, 0.0]))
        # the starting ranking takes the query's click rate in, as a new model's does
        np.testing.assert_array_equal(model.learner.prior_[-2:], [1.0, 0.0])
        report = train_some(service, clicks=6)  # (each click informs with chance 1/2)
        assert report.updates >= 1 and service.model.version == 2
    finally:
        service.close()

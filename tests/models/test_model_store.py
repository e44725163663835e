import json

import numpy as np
import pytest

from reranker.core.errors import ModelLoadError
from reranker.models.store import ModelStore, VersionExistsError
from tests.support.models import factory, trained_model


def test_save_and_load_round_trip(tmp_path):
    store = ModelStore(tmp_path, "preference_perceptron")
    store.save(trained_model(1))
    loaded = store.load(1, factory())
    np.testing.assert_array_equal(loaded.learner.w_, [0.1, -2.5, 1e-17])
    assert loaded.progress.cursor == 7 and loaded.version == 1
    X = np.random.default_rng(0).random((8, 3))
    np.testing.assert_array_equal(loaded.rank(X, 8, np.random.default_rng(1)).ranking,
                                  trained_model().rank(X, 8, np.random.default_rng(1)).ranking)


def test_a_version_is_never_overwritten(tmp_path):
    store = ModelStore(tmp_path, "preference_perceptron")
    store.save(trained_model(1))
    with pytest.raises(VersionExistsError):
        store.save(trained_model(1))
    assert [p.name for p in store.dir.iterdir() if p.suffix == ".tmp"] == []


def test_old_versions_are_pruned(tmp_path):
    store = ModelStore(tmp_path, "preference_perceptron", keep=3)
    for v in range(1, 7):
        store.save(trained_model(v))
    assert store.versions() == [4, 5, 6]


def corrupt(path, how):
    if how == "truncated":
        path.write_text(path.read_text()[:100])
    elif how == "edited":
        data = json.loads(path.read_text())
        data["state"]["w_"][0] = 99.0
        path.write_text(json.dumps(data))
    elif how == "garbage":
        path.write_bytes(b"\x00\xff not json")


@pytest.mark.parametrize("how, message", [("truncated", "not readable JSON"),
                                          ("edited", "checksum mismatch"),
                                          ("garbage", "not readable JSON")])
def test_corrupt_versions_are_refused_and_the_last_good_one_loads(tmp_path, how, message):
    store = ModelStore(tmp_path, "preference_perceptron")
    store.save(trained_model(1))
    store.save(trained_model(2))
    corrupt(store.path(2), how)
    with pytest.raises(ModelLoadError, match=message) as info:
        store.load(2, factory())
    assert "model-000002.json" in info.value.message
    model, errors = store.load_latest(factory())
    assert model.version == 1
    assert len(errors) == 1 and message in errors[0]


def test_a_refused_version_is_logged_once_until_it_changes(tmp_path, caplog):
    """The service looks for new versions every second: a file that stays broken is
    logged once (each look still returns its error, for /healthz)."""
    store = ModelStore(tmp_path, "preference_perceptron")
    store.save(trained_model(1))
    store.save(trained_model(2))
    corrupt(store.path(2), "truncated")
    with caplog.at_level("ERROR", logger="reranker.models.store"):
        for _ in range(3):
            model, errors = store.load_latest(factory())
            assert model.version == 1 and len(errors) == 1
        assert len(caplog.records) == 1
        corrupt(store.path(2), "garbage")  # rewritten, still broken: said again
        store.load_latest(factory())
    assert len(caplog.records) == 2 and "model-000002.json" in caplog.records[1].getMessage()


@pytest.mark.parametrize("other, message", [
    (factory(names=("a", "b", "d")), "other features than the config gives (adds d; drops c)"),
    (factory(normalization="zscore"), "normalisation 'per_query_minmax'"),
    (factory(depth=5), "feature map"),
])
def test_models_that_do_not_fit_the_config_are_refused(tmp_path, other, message):
    store = ModelStore(tmp_path, "preference_perceptron")
    store.save(trained_model(1))
    with pytest.raises(ModelLoadError) as info:
        store.load(1, other)
    assert message in info.value.message


def test_state_with_wrong_shape_is_refused(tmp_path):
    model = trained_model(1)
    data = model.to_dict()
    data["state"]["w_"] = [1.0, 2.0]
    from reranker.models.model import checksum
    data["checksum"] = checksum(data)
    with pytest.raises(ModelLoadError, match="shape"):
        factory().from_dict(data, "m.json")


def test_a_versions_origin_is_kept_and_a_malformed_one_refused(tmp_path):
    from reranker.models.model import checksum

    store = ModelStore(tmp_path, "preference_perceptron")
    model = trained_model(1)
    model.origin = {"rollback_of": 4, "cursor_of": 6}
    store.save(model)
    assert store.load(1, factory()).origin == {"rollback_of": 4, "cursor_of": 6}
    assert "origin" not in trained_model(2).to_dict()  # a trained version has none
    for bad in (["rollback_of", 4], {"rollback_of": "4"}, {"rollback_of": True}):
        data = model.to_dict()
        data["origin"] = bad
        data["checksum"] = checksum(data)
        with pytest.raises(ModelLoadError, match="section 'origin'"):
            factory().from_dict(data, "m.json")


def test_the_query_weight_is_kept_with_the_model_and_a_corrupt_one_named(tmp_path):
    from reranker.models.model import checksum

    store = ModelStore(tmp_path, "preference_perceptron")
    model = trained_model(1)
    model.query_weight.observe([(True, True)] * 16)  # the doubled weight won 16 of 16
    model.query_weight.observe([(False, False)] * 3)
    store.save(model)
    loaded = store.load(1, factory()).query_weight
    assert loaded.weight == 2.0 and loaded.halved == [0, 3]
    data = model.to_dict()
    del data["query_weight"]  # a model saved before the query weight: weight 1
    data["checksum"] = checksum(data)
    assert factory().from_dict(data, "m.json").query_weight.weight == 1.0
    data["query_weight"] = {"level": "3", "doubled": [0, 0], "halved": [0, 0]}
    data["checksum"] = checksum(data)
    with pytest.raises(ModelLoadError, match="m.json.*query_weight.level"):
        factory().from_dict(data, "m.json")


def test_the_evidence_gate_is_kept_with_the_model_and_a_corrupt_one_named(tmp_path):
    from reranker.models.model import checksum

    store = ModelStore(tmp_path, "preference_perceptron")
    model = trained_model(1)
    model.evidence_gate.observe([(True, True)] * 7)  # the looser level won 7 of 7
    model.evidence_gate.observe([(True, False), (False, True)])
    store.save(model)
    loaded = store.load(1, factory()).evidence_gate
    assert loaded.level == 1 and loaded.confidence(0.95) == pytest.approx(0.90)
    assert loaded.looser == [0, 1] and loaded.stricter == [1, 0]
    data = model.to_dict()
    del data["evidence_gate"]  # a model saved before the gate: learner.confidence itself
    data["checksum"] = checksum(data)
    assert factory().from_dict(data, "m.json").evidence_gate.level == 0
    data["evidence_gate"] = {"level": 1, "looser": [0, 0], "stricter": "none"}
    data["checksum"] = checksum(data)
    with pytest.raises(ModelLoadError, match="m.json.*evidence_gate.stricter"):
        factory().from_dict(data, "m.json")


def test_a_model_saved_before_the_starting_ranking_loads_and_ranks_as_it_did(tmp_path):
    """A model file written before learners kept a starting ranking (no prior_, step_sum_,
    steps_ in its state) loads with none: it ranks by its weights alone, as it did."""
    from reranker.models.model import checksum

    store = ModelStore(tmp_path, "preference_perceptron")
    path = store.save(trained_model(1))
    payload = json.loads(path.read_text())
    for key in ("prior_", "step_sum_", "steps_"):
        del payload["state"][key]
    payload["checksum"] = checksum(payload)
    path.write_text(json.dumps(payload))
    loaded = store.load(1, factory())
    np.testing.assert_array_equal(loaded.learner.prior_, [0.0, 0.0, 0.0])
    X = np.random.default_rng(0).random((8, 3))
    np.testing.assert_array_equal(loaded.learner.rank(X).scores, X @ [0.1, -2.5, 1e-17])


def test_a_page_logs_the_version_of_the_model_that_ranked_it(workdir, monkeypatch):
    """A new version can be published while a search is under way: the page and its
    impression name the version of the model that ranked it, read once per search."""
    import copy

    from reranker.core.config import load_config
    from reranker.serving.service import RerankerService

    service = RerankerService(load_config(workdir / "config.yaml")).open()
    try:
        arm = service.arms[0]
        old = arm.model
        new = copy.deepcopy(old)
        new.version = old.version + 1
        ranked = []
        for model in (old, new):
            def rank(*args, _model=model, _rank=model.rank, **kwargs):
                ranked.append(_model.version)
                return _rank(*args, **kwargs)

            monkeypatch.setattr(model, "rank", rank)
        reads = iter([old, new, new, new])  # the new version lands after the first read
        monkeypatch.setattr(type(arm), "model", property(lambda self: next(reads)))
        page = service.search("tea kettle", 10)
        service.events.flush()
        logged = service.events.get_impression(page["impression_id"])
        assert ranked == [old.version]
        assert page["model_version"] == logged.model_version == old.version
    finally:
        service.close()

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


# A level learned from duels, kept with the model: the duels (tag, won) of its pages, its
# state after them, what a model saved before it had loads as, and a corrupt field that is named.
DUELLED = {
    # a page whose doubled weight won 16 of 16 (it moves at the 7th, and the page's other
    # duels tested the old weight), then one whose halved weight lost 3
    "query_weight": ([[(True, True)] * 16, [(False, False)] * 3],
                     {"level": 1, "doubled": [0, 0], "halved": [0, 3]},
                     lambda weight: weight.weight == 2.0, lambda weight: weight.weight == 1.0,
                     ("level", "3")),
    # pages of queries first specialised at level 1 (0.90): the looser levels won 9 of 9
    # (each of the three tests at 0.05 / 3; the nearest moves); then, at level 1, a page of
    # a query first specialised at level 2 lost for levels 2 and 3, and one first
    # specialised at level 1 won for level 0
    "evidence_gate": ([[(1, True)] * 9, [(2, False), (1, True)]],
                      {"level": 1, "duels": {"0": [1, 0], "2": [0, 1], "3": [0, 1]}},
                      lambda gate: gate.confidence(0.95) == pytest.approx(0.90),
                      lambda gate: gate.confidence(0.95) == 0.95,  # learner.confidence
                      ("duels", {"1": [0, 0]})),
}


@pytest.mark.parametrize("name", sorted(DUELLED))
def test_a_level_learned_from_duels_is_kept_with_the_model_and_a_corrupt_one_named(tmp_path,
                                                                                   name):
    from reranker.models.model import checksum

    pages, state, learned, before, (field, bad) = DUELLED[name]
    store = ModelStore(tmp_path, "preference_perceptron")
    model = trained_model(1)
    for outcomes in pages:
        getattr(model, name).observe(outcomes)
    store.save(model)
    loaded = getattr(store.load(1, factory()), name)
    assert loaded.to_dict() == state and learned(loaded)
    data = model.to_dict()
    del data[name]  # a model saved before it: the level it starts at
    data["checksum"] = checksum(data)
    assert before(getattr(factory().from_dict(data, "m.json"), name))
    data[name] = {**state, field: bad}
    data["checksum"] = checksum(data)
    with pytest.raises(ModelLoadError, match=f"m.json.*{name}.{field}"):
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

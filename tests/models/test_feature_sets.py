"""A change of the feature set never strands a deployment: each feature set's models live
apart, a new one starts from the old weights on the features both share (or afresh, with the
reason), with a one-line warning, and the clicks logged under any feature set still train the
model they belong to."""

from __future__ import annotations

import json
import logging
import sqlite3

import numpy as np
import pytest

from reranker.core.config import load_config
from reranker.serving.service import RerankerService
from tests.support.configs import write_config
from tests.support.servers import LiveServer, run_cli
from tests.support.traffic import learn

NO_CLICK_FEATURES = {"numeric_fields": ["popularity"], "click_features": False}


def serve(path):
    return RerankerService(load_config(path)).open()


def learn_in(service, pages: int = 2) -> None:
    learn(lambda q: service.search(q, 10), service.click, pages)


def prefer(search, click, pages: int = 6, query: str = "tea kettle") -> None:
    """Pages on which users click the same two results (those the first page showed at
    ranks 6 and 3) wherever they are shown: consistent preferences, which randomised pairs
    cannot cancel out as they can clicks by position."""
    first = search(query)
    liked = [first["hits"][5]["id"], first["hits"][2]["id"]]
    for page in [first] + [search(query) for _ in range(pages - 1)]:
        for hit in page["hits"]:
            if hit["id"] in liked:
                click(page["impression_id"], hit["id"])


def weights(model) -> dict[str, float]:
    return dict(zip(model.feature_names, model.learner.learned_weights(), strict=True))


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and r.name == "reranker.models.arms"]


def test_a_changed_feature_set_starts_from_the_shared_weights_and_old_clicks_still_train(
        workdir, caplog):
    old_path = workdir / "old.yaml"
    write_config(workdir, features=NO_CLICK_FEATURES).rename(old_path)
    live = LiveServer(old_path)
    try:
        prefer(lambda q: live.post("/search", {"query": q}).json(),
               lambda i, d: live.post("/click", {"impression_id": i, "doc_id": d}), pages=6)
        out = run_cli("train", "-c", str(old_path), "--close-all").stdout
        assert "saved model version 1" in out, out
        # a page logged under the old feature set, clicked and not yet trained on
        page = live.post("/search", {"query": "tea kettle"}).json()
        for position in (5, 2):
            live.post("/click", {"impression_id": page["impression_id"],
                                 "doc_id": page["hits"][position]["id"]})
        old_arm = live.service.arms[0]
        old_weights = weights(old_arm.model)
    finally:
        live.stop()
    assert any(old_weights.values())

    # the new configuration drops popularity and adds the click features
    new_path = write_config(workdir, features={"numeric_fields": [], "click_features": True})
    listing = run_cli("models", "list", "-c", str(new_path)).stdout
    assert f"the first `serve` or `train` starts from the newest model of {old_arm.id}" \
        in listing, listing
    caplog.clear()
    live = LiveServer(new_path)
    try:
        arm = live.service.arms[0]
        assert arm.id != old_arm.id and arm.models.dir.parent == old_arm.models.dir.parent
        lines = warnings_of(caplog)
        assert len(lines) == 1 and "\n" not in lines[0], lines
        # (the general model's click feature: the query's own lift is not the model's)
        assert "the feature set changed (adds click_lift:doc; drops field_value:popularity)" \
            in lines[0]
        assert old_arm.id in lines[0] and "starts from the weights of version 1" in lines[0]
        model = arm.model
        assert model.version == 1  # the carried model is the new folder's first version
        carried = weights(model)
        for name, value in carried.items():  # the shared weights, the new ones at zero
            assert value == old_weights.get(name, 0.0), name
        assert json.loads((arm.models.dir / "arm.json").read_text())["carried_from"] == {
            "arm": old_arm.id, "version": 1,
            "change": "adds click_lift:doc; drops field_value:popularity"}
        page = live.post("/search", {"query": "tea kettle"}).json()
        assert page["model_version"] == 1 and page["hits"]
        learn(lambda q: live.post("/search", {"query": q}).json(),
              lambda i, d: live.post("/click", {"impression_id": i, "doc_id": d}), pages=2)
    finally:
        live.stop()
    # the new model learns from its own pages only; the old page waits for the old model
    out = run_cli("train", "-c", str(new_path), "--close-all").stdout
    assert "saved model version 2" in out and "applied 3 impressions" in out, out
    assert old_arm.models.versions() == [1]
    listing = run_cli("models", "list", "-c", str(new_path)).stdout
    assert f"started from version 1 of {old_arm.id} when the feature set changed" in listing
    out = run_cli("train", "-c", str(old_path), "--close-all").stdout
    assert "saved model version 2" in out and "applied 1 impressions" in out, out
    # and going back serves the old feature set's own model again, without a warning
    caplog.clear()
    service = serve(old_path)
    try:
        assert service.arms[0].id == old_arm.id and service.model.version == 2
        assert warnings_of(caplog) == []
    finally:
        service.close()


@pytest.mark.parametrize("name", ["second_order_preference_perceptron", "greedy_klrank"])
def test_learners_with_other_state_carry_over_by_feature_name(workdir, name):
    features = {"numeric_fields": ["popularity"], "click_features": True}
    path = write_config(workdir, features=features, learner={"name": name})
    service = serve(path)
    prefer(lambda q: service.search(q, 10), service.click, pages=8)
    service.trainer.run_once(close_all=True)
    old = service.model
    service.close()
    assert old.version >= 1 and np.any(old.learner.learned_weights())
    # reordered (click features first) and popularity dropped
    path = write_config(workdir, features={**features, "numeric_fields": []},
                        learner={"name": name})
    service = serve(path)
    try:
        model = service.model
        assert model.version == 1 and "field_value:popularity" not in model.feature_names
        before, after = weights(old), weights(model)
        assert after == {k: v for k, v in before.items() if k in after}
        if name == "second_order_preference_perceptron":  # A^-1 is the inverse of A again
            np.testing.assert_allclose(model.learner.A_inv_ @ model.learner.A_,
                                       np.eye(len(model.feature_names)), atol=1e-9)
        learn_in(service, pages=2)
        assert service.trainer.run_once(close_all=True).updates >= 1
    finally:
        service.close()


@pytest.mark.parametrize("learner, normalization, reason", [
    ("exponentiated_preference_perceptron", "per_query_minmax",
     "cannot carry its learned state onto another feature set"),
    ("preference_perceptron", "zscore", "zscore normalisation keeps statistics per feature"),
])
def test_a_model_that_cannot_be_carried_over_starts_afresh_with_the_reason(
        workdir, caplog, learner, normalization, reason):
    features = {**NO_CLICK_FEATURES, "normalization": normalization}
    path = write_config(workdir, features=features, learner={"name": learner})
    service = serve(path)
    learn_in(service)
    service.trainer.run_once(close_all=True)
    old_folder = service.arms[0].models.dir
    service.close()
    caplog.clear()
    path = write_config(workdir, features={**features, "click_features": True},
                        learner={"name": learner})
    service = serve(path)
    try:
        assert service.model.version == 0 and service.search("tea kettle", 10)["hits"]
        lines = warnings_of(caplog)
        assert len(lines) == 1 and "a new model starts" in lines[0] and reason in lines[0]
        assert sorted(p.name for p in old_folder.glob("model-*.json")) == ["model-000001.json"]
    finally:
        service.close()


def test_a_folder_from_before_feature_sets_had_their_own_is_taken_over(workdir):
    """An arm folder named without its feature set (the previous version) whose models have
    exactly these features becomes this arm's, and its impressions keep counting."""
    path = write_config(workdir)
    service = serve(path)
    learn_in(service)
    service.trainer.run_once(close_all=True)
    folder = service.arms[0].models.dir
    service.close()
    old_id = "preference_perceptron-0123456789"
    arm_file = folder / "arm.json"
    data = json.loads(arm_file.read_text())
    arm_file.write_text(json.dumps({k: v for k, v in data.items() if k != "features"}))
    folder.rename(folder.parent / old_id)
    with sqlite3.connect(workdir / "events.sqlite") as conn:
        conn.execute("UPDATE impressions SET arm = ?", (old_id,))
    service = serve(path)
    try:
        assert service.arms[0].models.dir == folder and service.model.version == 1
        assert not (folder.parent / old_id).exists()
        assert old_id in json.loads(arm_file.read_text())["aliases"]
        # a page logged under the old id, closed only now, is still this arm's to learn from
        with sqlite3.connect(workdir / "events.sqlite") as conn:
            conn.execute("UPDATE impressions SET closed_seq = NULL WHERE seq = 1")
        assert service.trainer.run_once(close_all=True).applied == 1
    finally:
        service.close()

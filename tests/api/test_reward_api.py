"""POST /reward: the application's reward for a page, validated like clicks, and learned
from by EELS through the real HTTP API."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.configs import write_config
from tests.support.servers import LiveServer


@pytest.fixture
def eels_live(workdir):
    path = write_config(workdir, learner={
        "name": "eels", "params": {"positions": 3, "min_rounds": 40, "min_eigenvalue": 2.0}})
    server = LiveServer(path)
    yield server
    server.stop()


def test_rewards_are_validated_like_clicks(eels_live):
    page = eels_live.post("/search", {"query": "tea kettle", "size": 3}).json()
    imp = page["impression_id"]
    answer = eels_live.post("/reward", {"impression_id": imp, "value": 2.5})
    assert answer.status_code == 202
    assert answer.json() == {"accepted": True, "impression_id": imp, "value": 2.5,
                             "replaced": None}
    again = eels_live.post("/reward", {"impression_id": imp, "value": 4})
    assert again.status_code == 202 and again.json()["replaced"] == 2.5
    for body, status, words in (
            ({"impression_id": imp, "value": "lots"}, 400, "'value' must be a finite number"),
            ({"impression_id": imp, "value": True}, 400, "'value' must be a finite number"),
            ({"impression_id": imp}, 400, "'value' must be a finite number"),
            ({"value": 1.0}, 400, "'impression_id' must be a non-empty string"),
            ({"impression_id": imp, "value": 1, "extra": 1}, 400, "extra"),
            ({"impression_id": "nope", "value": 1}, 403, "not a signed impression id")):
        answer = eels_live.post("/reward", body)
        assert answer.status_code == status, (body, answer.text)
        assert words in answer.json()["error"]["message"]
    eels_live.service.trainer.run_once(close_all=True)
    closed = eels_live.post("/reward", {"impression_id": imp, "value": 1.0})
    assert closed.status_code == 409 and "no longer accepts a reward" in closed.text
    assert eels_live.post("/reward", {"impression_id": imp, "value": 4.0}).status_code == 202
    assert eels_live.service.events.get_impression(imp).reward == 4.0


def test_eels_learns_the_position_weights_from_the_rewards_through_the_api(eels_live):
    truth = np.array([1.0, 3.0, 0.5])  # the second position is worth most here
    rng = np.random.default_rng(3)
    for _ in range(60):
        page = eels_live.post("/search", {"query": "tea kettle", "size": 3}).json()
        clicks = rng.random(3) < 0.5
        for hit, clicked in zip(page["hits"], clicks, strict=True):
            if clicked:
                eels_live.post("/click", {"impression_id": page["impression_id"],
                                          "doc_id": hit["id"]})
        eels_live.post("/reward", {"impression_id": page["impression_id"],
                                   "value": float(truth @ clicks)})
    report = eels_live.service.trainer.run_once(close_all=True)
    assert report.applied == 60
    learner = eels_live.service.model.learner
    assert learner.exploiting_ and learner.rounds_ >= 40
    np.testing.assert_allclose(learner.w_hat_, truth, atol=1e-9)
    page = eels_live.post("/search", {"query": "tea kettle", "size": 3}).json()
    scores = {hit["id"]: hit["score"] for hit in page["hits"]}
    ids = [hit["id"] for hit in page["hits"]]
    # the oracle's best result sits on the position of the largest weight, the second
    assert scores[ids[1]] == max(scores.values())

"""Late clicks: the default feedback window fits real sessions, results are provisional while
pages are open, and a click after the window is refused with its reason and counted."""

from __future__ import annotations

import time

import pytest

from reranker.api.app import start_trainer
from reranker.core.config import load_config
from tests.support.configs import ENGINE, PERCEPTRON, write_config
from tests.support.servers import LiveServer, samples
from tests.support.traffic import users_search


@pytest.mark.slow
def test_with_the_defaults_a_click_two_minutes_after_its_search_counts(workdir, corpus):
    """With the default trainer settings (nothing shortened), an interleaved experiment's
    pages stay open while the trainer runs: /experiments gives provisional results, marked
    as such, and a click two minutes after its search is accepted."""
    path = write_config(workdir, trainer=None, experiment={
        "mode": "interleave", "name": "late", "arms": {"perceptron": PERCEPTRON,
                                                       "engine": ENGINE}})
    config = load_config(path)
    assert config.trainer.enabled and config.trainer.feedback_window == 600.0
    server = LiveServer(path)
    _, stop = start_trainer(server.service, config.trainer.interval)
    try:
        first = server.post("/search", {"query": "tea kettle", "size": 10}).json()
        searched = time.monotonic()
        pages = users_search(server, corpus, 30)
        clicks = sum(len(server.service.events.get_impression(page["impression_id"]).clicked)
                     for page, _ in pages)
        time.sleep(2.5 * config.trainer.interval)  # passes of the trainer run meanwhile
        status = server.get("/experiments").json()
        assert status["impressions"] == 0 and status["pending"] == 31
        provisional = status["provisional"]
        assert provisional["pending"] == 31 and provisional["impressions"] == 31
        assert sum(arm["clicks"] for arm in provisional["arms"].values()) >= clicks > 0
        assert any(note["text"].startswith("provisional: 31 pages are still open")
                   for note in status["notes"])
        time.sleep(max(0.0, 120.0 - (time.monotonic() - searched)))
        answer = server.post("/click", {"impression_id": first["impression_id"],
                                        "doc_id": first["hits"][4]["id"]})
        assert answer.status_code == 202, answer.text
        assert server.service.events.get_impression(first["impression_id"]).clicked == \
            [first["hits"][4]["id"]]
        assert samples(server).get(("reranker_clicks_total", (("outcome", "late"),)), 0) == 0
    finally:
        stop.set()
        server.stop()


def test_a_click_after_the_window_is_refused_with_the_reason_and_counted(workdir):
    """A window shortened through the configuration: once the trainer closes the page, its
    click is refused (409) naming the window, and /metrics counts it as late."""
    server = LiveServer(write_config(workdir, trainer={"feedback_window": 0.5,
                                                       "enabled": False}))
    try:
        page = server.post("/search", {"query": "tea kettle", "size": 10}).json()
        time.sleep(0.6)
        assert server.service.trainer.run_once().closed == 1
        answer = server.post("/click", {"impression_id": page["impression_id"],
                                        "doc_id": page["hits"][2]["id"]})
        assert answer.status_code == 409
        message = answer.json()["error"]["message"]
        assert "no longer accepts clicks" in message
        assert "trainer.feedback_window, 0.5 s, after its search" in message
        counted = samples(server)
        assert counted[("reranker_clicks_total", (("outcome", "late"),))] == 1
        reward = server.post("/reward", {"impression_id": page["impression_id"], "value": 1})
        assert reward.status_code == 409 and "0.5 s" in reward.json()["error"]["message"]
    finally:
        server.stop()

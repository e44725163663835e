"""An A/A experiment -- two identical arms -- looked at after every 100 impressions is
declared significant no more often than the significance level says: the always-valid
sequential test keeps its promise under peeking, as the fixed-horizon sign test does not."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from reranker.experiments.interleaving import perturb_pairs, team_draft
from reranker.experiments.outcomes import Tally
from reranker.experiments.spec import ExperimentSpec
from reranker.offline.click_models import cascade_model

EXPERIMENTS = 200
IMPRESSIONS = 1500
LOOK_EVERY = 100
ALPHA = 0.05


def aa_setup(seed: int, mode: str, shares: dict[str, float]):
    """An A/A experiment's parts: its random numbers, tally, users, and 50 queries' labels
    with the scores of the one ranker both arms are."""
    rng = np.random.default_rng(seed)
    spec = ExperimentSpec(name="aa", mode=mode, labels=("a", "b"), shares=shares, alpha=ALPHA)
    labels = rng.integers(0, 3, size=(50, 20)) * (rng.random((50, 20)) < 0.4)
    scores = labels + rng.normal(0, 1.0, size=labels.shape)
    return rng, spec, Tally(spec), cascade_model("informational", 3), labels, scores


def run_experiment(seed: int) -> tuple[bool, bool]:
    """One simulated A/A experiment through the experiment's own code (team draft,
    randomised pairs, credit, tally, test); returns whether the sequential test, and whether
    a naive sign test, declared a difference at any look."""
    rng, spec, tally, users, labels, scores = aa_setup(seed, "interleave",
                                                       {"a": 1.0, "b": 1.0})
    sequential = naive = False
    for t in range(1, IMPRESSIONS + 1):
        q = rng.integers(50)
        ranking = np.argsort(-scores[q], kind="stable")
        mixed, teams = team_draft([ranking, ranking], rng, length=10)
        mixed, teams, _, _ = perturb_pairs(mixed, teams, 10, rng)
        clicks = np.flatnonzero(users.clicks(labels[q][mixed[:10]], rng)) + 1
        tally.add(None, [spec.labels[i] for i in teams[:10].tolist()], 10, clicks.tolist())
        if t % LOOK_EVERY == 0:
            (pair,) = tally.pair_summaries()
            sequential |= pair["significant"]
            naive |= pair["p_value"] is not None and pair["p_value"] <= ALPHA
    return sequential, naive


@pytest.mark.slow
def test_an_aa_experiment_watched_every_100_impressions_keeps_its_false_positive_rate():
    results = np.array([run_experiment(seed) for seed in range(EXPERIMENTS)])
    sequential, naive = results[:, 0].sum(), results[:, 1].sum()
    # the rate is at most alpha: the 99% interval of the observed rate reaches below it
    interval = binomtest(int(sequential), EXPERIMENTS).proportion_ci(0.99)
    assert interval.low <= ALPHA, (sequential, interval)
    # while peeking at a fixed-horizon test finds differences that are not there
    assert binomtest(int(naive), EXPERIMENTS).proportion_ci(0.99).low > ALPHA, naive


def run_split_experiment(seed: int) -> bool:
    """One simulated A/A bucket split, the arms taking unequal shares (3:1) of the traffic in
    a random order; returns whether the sequential test declared a difference at any look."""
    rng, _, tally, users, labels, scores = aa_setup(seed, "split", {"a": 3.0, "b": 1.0})
    significant = False
    for t in range(1, IMPRESSIONS + 1):
        q = rng.integers(50)
        arm = "a" if rng.random() < 0.75 else "b"
        shown = np.argsort(-scores[q], kind="stable")[:10]
        clicks = np.flatnonzero(users.clicks(labels[q][shown], rng)) + 1
        tally.add(arm, [arm] * 10, 10, clicks.tolist())
        if t % LOOK_EVERY == 0:
            significant |= tally.pair_summaries()[0]["significant"]
    return significant


@pytest.mark.slow
def test_an_aa_split_with_unequal_shares_keeps_its_false_positive_rate():
    """The split's pairing (each page with the other arm's latest waiting one) depends on
    the order of the pages alone: identical arms are declared different no more often than
    alpha says, however unequal their shares."""
    significant = sum(run_split_experiment(seed) for seed in range(EXPERIMENTS))
    interval = binomtest(int(significant), EXPERIMENTS).proportion_ci(0.99)
    assert interval.low <= ALPHA, (significant, interval)


LIVE_EXPERIMENTS = 30
LIVE_PAGES = 200


@pytest.mark.slow
def test_a_live_aa_experiment_with_even_starts_keeps_its_false_positive_rate(workdir, corpus):
    """Through the live HTTP API: a perceptron that learned before, compared with itself
    (two labels with the same settings share one model) in 30 interleaved experiments,
    each started with experiment.even_start (the model starts again from its initial
    version) and learning from the mixed pages as simulated users click, each watched
    after every 50 pages: the sequential test declares a difference no more often than
    alpha says."""
    from tests.support.configs import PERCEPTRON, write_config
    from tests.support.servers import LiveServer
    from tests.support.traffic import users_search

    learner = LiveServer(write_config(workdir))  # the perceptron learns before any experiment
    try:
        users_search(learner, corpus, 100)
        learner.service.trainer.run_once(close_all=True)
        learned = learner.service.model.version
        assert learned > 0
    finally:
        learner.stop()
    significant = 0
    for experiment in range(LIVE_EXPERIMENTS):
        server = LiveServer(write_config(workdir, experiment={
            "mode": "interleave", "name": f"aa-{experiment}", "even_start": True,
            "arms": {"a": PERCEPTRON, "b": PERCEPTRON}}))
        try:
            status = server.get("/experiments").json()
            for label in ("a", "b"):  # both from the initial model, whatever came before
                assert status["arms"][label]["started"].startswith("from its initial model")
            found = False
            for look in range(LIVE_PAGES // LOOK_EVERY_LIVE):
                users_search(server, corpus, LOOK_EVERY_LIVE, seed=1000 * experiment + look)
                server.service.trainer.run_once(close_all=True)
                status = server.get("/experiments").json()
                found |= status["pairs"][0]["significant"]
            assert status["impressions"] == LIVE_PAGES
            assert status["arms"]["a"]["learning"]["updates"] > 0  # it learned meanwhile
            significant += found
        finally:
            server.stop()
    print(f"live A/A: {significant} of {LIVE_EXPERIMENTS} experiments declared a difference")
    interval = binomtest(significant, LIVE_EXPERIMENTS).proportion_ci(0.99)
    assert interval.low <= ALPHA, (significant, interval)


LOOK_EVERY_LIVE = 50

"""End to end through the real CLI and the real HTTP service in subprocesses."""

import random
import sqlite3
import subprocess
import threading
import time

import numpy as np
import requests

from reranker.core.config import load_config
from reranker.core.plugins import get_plugin_manager
from reranker.features.clicks.counts import query_key
from reranker.models.arms import arms_from_config
from reranker.models.balance import QueryBalance
from reranker.stores.sqlite import SQLiteStore
from reranker.testing import cli_env, reranker_command
from tests.support.configs import write_config, write_docs
from tests.support.servers import ServeProcess, run_cli


def ranks(page):
    return {hit["id"]: hit["rank"] for hit in page["hits"]}


def test_clicked_result_moves_up(tmp_path, corpus):
    # the default learner perturbs what it shows; a seed makes the pages reproducible, and
    # without the query balance every page of the one query clicked is learned from (with
    # it, a coin drawn from each page's random id passes over most of them: it learns from
    # each query's pages as if the queries were searched equally often)
    config = write_config(tmp_path, trainer={"feedback_window": 3600.0},
                          learner={"seed": 11, "query_balance": False})
    docs = write_docs(tmp_path, corpus.documents)
    out = run_cli("index", "-c", str(config), str(docs)).stdout
    assert f"indexed {len(corpus.documents)} documents" in out

    server = ServeProcess(config)
    try:
        for query, topic in corpus.queries:  # a query with a relevant result on rank 5 or lower
            page = server.post("/search", {"query": query}).json()
            relevant_low = [hit for hit in page["hits"]
                            if hit["rank"] >= 5 and corpus.label(topic, hit["id"]) > 0]
            if relevant_low:
                break
        target = relevant_low[-1]["id"]
        before = ranks(page)[target]
        clicks = 0
        # (after a few clicks the query's page is specialised: the target rises at once, and
        # the general model learns the pairs its clicks judge, which takes some more)
        for _ in range(20):
            page = server.post("/search", {"query": query}).json()
            if target in ranks(page):  # the perturbation may show the 11th in its place
                answer = server.post("/click", {"impression_id": page["impression_id"],
                                                "doc_id": target})
                assert answer.status_code == 202
                clicks += 1
        assert clicks >= 12
        out = run_cli("train", "-c", str(config), "--close-all").stdout
        assert "saved model version 1" in out and f"{clicks} clicks" in out, out  # (in full)
        after_page = server.post("/search", {"query": query}).json()
        assert after_page["model_version"] == 1
        after = ranks(after_page).get(target, 99)
        assert after < before, (before, after)
    finally:
        server.stop()


def expected_weights(config, events):
    """The default Preference Perceptron's learned weights recomputed from the event log,
    independently of the trainer: w = sum over impressions of phi(ybar) - phi(y) (Coactive
    Learning, Alg. 1), where ybar swaps each shown pair of the impression's random pairing,
    (1, 2), (3, 4), ... or (2, 3), (4, 5), ..., whose lower result alone was clicked (Raman
    et al. 2013), each swap's part weighted by 1 / (2p) if the pair was shown swapped and
    1 / (2 (1 - p)) if not, with per-query min-max features (the click feature raw) and
    log2 discounts at depth 10; a page its query's clicks specialised adds, once clicked,
    each judged pair of the general model's own ranking that it logged (docs/algorithms.md,
    "General model and query specialisation"): the better result over the other, at their
    places in that ranking. The model's features leave the query's own click lift out; the
    pages of a query searched more than the average are passed over as the query balance
    decides (docs/algorithms.md, "Evidence across queries")."""
    g = np.append(1.0 / np.log2(np.arange(2, 12)), 0.0)  # 0 below depth 10
    w = np.zeros(5)  # score, title, body, popularity, the click feature over other queries
    balance = QueryBalance()  # every query weighing alike (learner.query_balance)
    for imp in events.closed_since(0, 10**9):
        if not balance.keeps(query_key(imp.query), imp.id):
            continue
        X = np.delete(imp.features, imp.feature_names.index("click_lift:query_doc"), axis=1)
        span = X.max(axis=0) - X.min(axis=0)
        Xn = np.where(span > 0, (X - X.min(axis=0)) / np.where(span > 0, span, 1), 0.0)
        Xn[:, 4:] = X[:, 4:]
        y = list(imp.ranking)
        clicked = {i for i in y if imp.doc_ids[i] in set(imp.clicked)}
        if "specialised" in imp.context:
            general = imp.context["general"]
            for upper, lower_better in imp.context["judged"] if clicked else []:
                better, worse = (general[upper + 1], general[upper]) if lower_better else \
                    (general[upper], general[upper + 1])
                w += (g[upper] - g[upper + 1]) * (Xn[better] - Xn[worse])
            continue
        p, swapped = imp.context["swap_probability"], set(imp.context["swapped"])
        for upper in range(imp.context["pair_offset"], imp.n_shown - 1, 2):
            if y[upper + 1] in clicked and y[upper] not in clicked and upper < 10:
                weight = 0.5 / p if upper in swapped else 0.5 / (1 - p)
                w += weight * (g[upper] - g[upper + 1]) * (Xn[y[upper + 1]] - Xn[y[upper]])
    return w


def test_restarts_neither_lose_nor_repeat_clicks(tmp_path, corpus):
    config_path = write_config(tmp_path, trainer={"feedback_window": 0.2, "interval": 0.05,
                                                  "batch_size": 2})
    run_cli("index", "-c", str(config_path), str(write_docs(tmp_path, corpus.documents)))
    rng = random.Random(3)
    accepted = set()
    trainers = []
    for round_ in range(4):
        server = ServeProcess(config_path)
        killer = threading.Timer(rng.uniform(0.8, 1.5), server.kill)
        killer.start()
        if round_ % 2 == 0:  # a concurrent `reranker train`, killed at a random moment
            proc = subprocess.Popen(reranker_command() + ["train", "-c", str(config_path)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env=cli_env())
            trainers.append(proc)
            threading.Timer(rng.uniform(0.3, 1.2), proc.kill).start()
        deadline = time.time() + 3
        while time.time() < deadline:
            try:
                query, _ = rng.choice(corpus.queries)
                page = server.post("/search", {"query": query}).json()
                for hit in rng.sample(page["hits"], k=min(3, len(page["hits"]))):
                    body = {"impression_id": page["impression_id"], "doc_id": hit["id"]}
                    for _ in range(rng.choice([1, 1, 2])):  # some clicks are repeated
                        answer = server.post("/click", body)
                        if answer.status_code == 202:
                            accepted.add((page["impression_id"], hit["id"]))
            except requests.RequestException:
                break  # the server was killed mid-request: that click's fate is unknown
        killer.join()
        if server.proc.poll() is None:
            server.kill()
    for proc in trainers:
        proc.wait(timeout=60)
    run_cli("train", "-c", str(config_path), "--close-all")

    config = load_config(config_path)
    with sqlite3.connect(config.store.path) as conn:
        stored = set(conn.execute("SELECT impression_id, doc_id FROM clicks"))
        n_impressions = conn.execute("SELECT COUNT(*) FROM impressions").fetchone()[0]
    assert len(accepted) > 20
    assert accepted <= stored, "a click answered with 202 was lost"
    arm = arms_from_config(config, get_plugin_manager())[0]
    factory, store = arm.factory, arm.models
    model, errors = store.load_latest(factory)
    assert not errors
    assert len(store.versions()) > 1
    # exactly once: every stored click and impression up to the model's cursor is in the
    # model, none twice; the ones after it taught nothing (a pass that learns nothing saves
    # no version) and wait for the next version that learns (the weights below check that)
    with sqlite3.connect(config.store.path) as conn:
        applied = {row[0] for row in conn.execute(
            "SELECT id FROM impressions WHERE closed_seq <= ?", (model.progress.cursor,))}
    assert n_impressions - len(applied) < 10 * config.trainer.batch_size
    assert model.progress.clicks == len([c for c in stored if c[0] in applied])
    assert model.progress.impressions == len(applied)
    np.testing.assert_allclose(model.learner.w_,
                               expected_weights(config, SQLiteStore(config.store.path)),
                               rtol=1e-9, atol=1e-9)

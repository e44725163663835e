"""Off-policy estimates of clicks@10 from another stochastic policy's logs cover the
target's true on-policy value, and unsupported targets are refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reranker.evaluation.estimators import LoggedPage, SupportError, evaluate, mean_estimate
from reranker.learners.policies import gumbel_top_k, plackett_luce_position_marginals

QUERIES, DOCS, FEATURES, DEPTH = 30, 12, 4, 10
THETA = (1.0 / np.arange(1, DEPTH + 1)) ** 0.8  # position-based examination


def world(seed: int = 0):
    rng = np.random.default_rng(seed)
    X = [rng.random((DOCS, FEATURES)) for _ in range(QUERIES)]
    truth = np.array([2.0, -1.0, 1.0, 0.5])
    attraction = [1.0 / (1.0 + np.exp(-(x @ truth - 1.0))) for x in X]
    return X, attraction


class PolicyCache:
    """pi(d at r) of a Plackett-Luce policy, per query's feature matrix (computed once)."""

    def __init__(self, w: np.ndarray):
        self.w, self.cache = w, {}

    def __call__(self, X: np.ndarray, k: int) -> np.ndarray:
        key = (id(X), k)
        if key not in self.cache:
            self.cache[key] = plackett_luce_position_marginals(X @ self.w, k)
        return self.cache[key]


def log_pages(X, attraction, logging: PolicyCache, n: int, rng) -> list[LoggedPage]:
    pages = []
    for q in rng.integers(QUERIES, size=n).tolist():
        ranking = gumbel_top_k(X[q] @ logging.w, rng)[:DEPTH]
        at = logging(X[q], DEPTH)
        chance = THETA * attraction[q][ranking]
        pages.append(LoggedPage(X=X[q], shown=ranking,
                                clicks=(rng.random(DEPTH) < chance).astype(float),
                                propensities=at[ranking, np.arange(DEPTH)],
                                shown_marginals=at.sum(axis=1)))
    return pages


def true_value(X, attraction, target: PolicyCache) -> float:
    return float(np.mean([(target(x, DEPTH) * (attraction[q][:, None] * THETA)).sum()
                          for q, x in enumerate(X)]))


def test_estimates_cover_the_true_value_in_at_least_90_of_100_repetitions():
    X, attraction = world()
    logging = PolicyCache(np.array([0.5, 0.5, 0.5, 0.5]))
    target = PolicyCache(np.array([3.0, -1.5, 1.5, 0.0]))
    truth = true_value(X, attraction, target)
    logged_truth = true_value(X, attraction, logging)
    assert truth - logged_truth > 0.2  # a target clearly unlike the logging policy
    covered = {"IPS": 0, "SNIPS": 0, "DR": 0}
    rng = np.random.default_rng(1)
    for _ in range(100):
        result = evaluate(target, log_pages(X, attraction, logging, 1500, rng), DEPTH)
        assert result.logged_interval[0] - 0.1 < logged_truth < result.logged_interval[1] + 0.1
        for estimate in result.estimates:
            covered[estimate.name] += estimate.low <= truth <= estimate.high
    assert all(count >= 90 for count in covered.values()), covered


def test_a_target_the_logs_cannot_support_is_refused():
    X, attraction = world()
    rng = np.random.default_rng(2)
    logging = PolicyCache(np.array([0.5, 0.5, 0.5, 0.5]))
    pages = log_pages(X, attraction, logging, 50, rng)
    for page in pages:  # a logging policy that never shows candidate 11
        page.shown_marginals = page.shown_marginals.copy()
        page.shown_marginals[11] = 0.0
    pages[0].id = "abc"
    with pytest.raises(SupportError, match="impression abc: candidate 11, which the target "
                                           "shows with probability"):
        evaluate(PolicyCache(np.zeros(FEATURES)), pages, DEPTH)


# -- reranker evaluate, on a real event store -------------------------------------------


def attraction(doc_id: str) -> float:
    return 0.05 + 0.6 * (sum(map(ord, doc_id)) % 7) / 6


def log_traffic(workdir, learner: str, searches: int, seed: int = 0):
    """A service with ``learner`` serving simulated users (position-based clicks), its
    impressions closed; returns the config path and the pages' candidates per query."""
    from reranker.core.config import load_config
    from reranker.serving.service import RerankerService
    from tests.support.configs import write_config

    path = write_config(workdir, learner={"name": learner, "seed": seed},
                        features={"numeric_fields": ["popularity"], "click_features": False})
    service = RerankerService(load_config(path)).open()
    rng = np.random.default_rng(seed)
    queries = ["tea kettle", "green tea", "espresso"]
    candidates = {}
    try:
        for i in range(searches):
            query = queries[i % len(queries)]
            page = service.search(query, DEPTH)
            imp = service.events.get_impression(page["impression_id"])
            candidates[query] = imp
            for r, hit in enumerate(page["hits"]):
                if rng.random() < attraction(hit["id"]) / (r + 1):
                    service.click(page["impression_id"], hit["id"])
        service.trainer.run_once(close_all=True)
    finally:
        service.close()
    return path, candidates


def test_reranker_evaluate_estimates_a_target_from_random_logs(workdir):

    from reranker.core.config import load_config
    from reranker.core.plugins import get_plugin_manager, learner_classes
    from reranker.features.extraction import FeatureSpec
    from reranker.learners.featuremap import FeatureMap
    from reranker.models.model import ModelFactory
    from tests.support.servers import run_cli

    learners = learner_classes(get_plugin_manager())
    path, candidates = log_traffic(workdir, "random", 900)
    out = run_cli("evaluate", "-c", str(path), "--learner", "preference_perceptron",
                  "--json").stdout
    result = json.loads(out)
    assert result["pages"] == 900 and result["metric"] == "clicks@10"
    assert {e["estimator"] for e in result["estimates"]} == {"IPS", "SNIPS", "DR"}
    # the truth: the target's own chance of each result at each position, the users' clicks
    config = load_config(path)
    model = ModelFactory(learners["preference_perceptron"], {}, FeatureMap(
        config.learner.depth, config.learner.discount), FeatureSpec.from_config(config).names,
        config.features.normalization).new()
    truth = np.mean([
        (model.learner.position_marginals(model.normalize(imp.features), DEPTH)
         * np.array([[attraction(d) for d in imp.doc_ids]]).T
         / np.arange(1, DEPTH + 1)).sum() for imp in candidates.values()])
    for estimate in result["estimates"]:
        half = (estimate["high"] - estimate["low"]) / 2
        assert abs(estimate["value"] - truth) < 4 * half, (estimate, truth)
        assert estimate["effective_sample_size"] > 20
    table = run_cli("evaluate", "-c", str(path), "--learner", "preference_perceptron").stdout
    assert "target, DR" in table and "logged policy" in table
    # version 0, the initial model, as /search calls it (here also what the default takes)
    initial = run_cli("evaluate", "-c", str(path), "--learner", "preference_perceptron",
                      "--version", "0", "--json").stdout
    assert json.loads(initial)["estimates"] == json.loads(run_cli(
        "evaluate", "-c", str(path), "--learner", "preference_perceptron", "--json").stdout
    )["estimates"]


def test_reranker_evaluate_refuses_what_the_logs_cannot_tell(workdir):
    from tests.support.configs import write_config
    from tests.support.servers import run_cli

    path, _ = log_traffic(workdir, "backend_order", 30)
    result = run_cli("evaluate", "-c", str(path), "--learner", "random", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "the logging policy gave zero probability to what the target would show on 30 " \
           "of 30 pages" in result.stderr
    result = run_cli("evaluate", "-c", str(path), "--learner", "dbgd", check=False)
    assert result.returncode == 1
    assert "learner 'dbgd' cannot say where it would place each result" in result.stderr
    # errors name the options as the command takes them
    for args, fragments in [
            (["--learner", "pdgd", "--param", "pdgd.learnig_rate=0.05"],
             ["--param: learner 'pdgd' has no parameter 'learnig_rate'"]),
            (["--learner", "pdgd", "--version", "3"],
             ["--version: learner 'pdgd' (", "has no version 3 in"]),
            (["--learner", "pdgdd"], ["--learner: unknown learner 'pdgdd'"])]:
        result = run_cli("evaluate", "-c", str(path), *args, check=False)
        assert result.returncode == 1, result.stderr
        assert all(fragment in result.stderr for fragment in fragments), result.stderr
    # a mistake in the config file is named as the config's, not as an option's
    bad = write_config(workdir, learner={"name": "pdgd", "params": {"learnig_rate": 0.1}})
    result = run_cli("evaluate", "-c", str(bad), check=False)
    assert result.returncode == 1
    assert "learner.params: learner 'pdgd' has no parameter 'learnig_rate'" in result.stderr
    assert "--param" not in result.stderr
    # a store that is not there is named, not created
    missing = write_config(workdir, store={"path": "no-such-events.sqlite"})
    result = run_cli("evaluate", "-c", str(missing), "--learner", "random", check=False)
    assert result.returncode == 1 and "no-such-events.sqlite does not exist" in result.stderr
    assert not (workdir / "no-such-events.sqlite").exists()


def test_simulate_checks_the_estimates_against_the_true_value(tmp_path):
    """`reranker simulate --evaluate TARGET`: each learner's logged pages estimate the
    target's clicks@10, reported beside its true on-policy value; a deterministic logging
    policy is refused, and so are pages specialised by their query's clicks where their
    randomised pairs cannot show what the target shows (the refusal says so)."""

    from tests.support.paths import SHARED_DATA
    from tests.support.servers import run_cli

    data = SHARED_DATA / "letor4-mq2008"
    if not data.is_dir():
        pytest.skip("shared MQ2008 data not present beside the project")

    def simulate(out, *extra):
        # (pdgd from the papers' random start: a logging policy that explores from the
        # first page; from the engine's order it is all but deterministic at first)
        result = run_cli("simulate", "--train", str(data / "S1.txt.gz"), "--test",
                         str(data / "S5.txt.gz"), "--learner", "pdgd", "--param",
                         "pdgd.prior_steps=0", "--click-model",
                         "pbm:1", "--impressions", "600", "--runs", "2", "--checkpoints", "2",
                         "--evaluate", "random", "--out", str(out), "--workers", "1", *extra)
        assert "Off-policy check: random's clicks@10" in result.stdout
        learners = json.loads((out / "summary.json").read_text())["learners"]
        return {("pdgd" if key.startswith("pdgd(") else key): value
                for key, value in learners.items()}

    summary = simulate(tmp_path / "own", "--no-specialize")
    for logging in ("pdgd", "random"):
        check = summary[logging]["off_policy"]
        assert check["target"] == "random" and check["runs"] == 2
        truth = check["true"]["mean"]
        assert 0 < truth < 10
        for name in ("IPS", "SNIPS", "DR"):
            assert abs(check[name]["mean"] - truth) < 0.2, (logging, name, check)
    floor = next(key for key in summary if key.startswith("backend_order"))
    assert "gave zero probability" in summary[floor]["off_policy"]["refused"]
    assert "specialised" not in summary[floor]["off_policy"]["refused"]

    specialised = simulate(tmp_path / "specialised")
    refused = specialised["pdgd"]["off_policy"]["refused"]
    assert "gave zero probability" in refused and "specialised by their query's clicks" in refused
    assert "IPS" in specialised["random"]["off_policy"]  # a floor is never specialised


def test_reranker_evaluate_takes_the_part_of_a_log_its_policy_can_tell(workdir):
    """A log of a deterministic learner's pages, then a stochastic one's: refused whole
    (with the way out said), evaluated on the stochastic part with --logged-by or --since."""
    import json
    import time

    from tests.support.servers import run_cli

    log_traffic(workdir, "backend_order", 30)
    time.sleep(0.05)
    between = time.time()
    time.sleep(0.05)
    path, _ = log_traffic(workdir, "random", 200, seed=1)
    whole = run_cli("evaluate", "-c", str(path), "--learner", "preference_perceptron",
                    check=False)
    assert whole.returncode == 1 and "on 30 of 230 pages" in whole.stderr
    assert "--logged-by LEARNER or --since TIME" in whole.stderr
    from datetime import datetime, timezone

    moment = datetime.fromtimestamp(between, timezone.utc).isoformat()
    for option in (["--logged-by", "random"], ["--since", moment]):
        answer = json.loads(run_cli("evaluate", "-c", str(path), "--learner",
                                    "preference_perceptron", "--json", *option).stdout)
        assert answer["pages"] == 200
        assert sum(answer["skipped"].values()) == 30, answer["skipped"]
    bad = run_cli("evaluate", "-c", str(path), "--since", "yesterday", check=False)
    assert bad.returncode == 1 and "--since must be an ISO 8601 date and time" in bad.stderr


def test_mean_estimate_of_one_value_is_unbounded():
    """Four values give the mean with its normal interval; one value gives no spread, so
    the estimate's interval is unbounded rather than a point that looks certain."""
    mean, low, high = mean_estimate(np.array([1.0, 2.0, 3.0, 4.0]))
    half = 1.959963985 * np.sqrt(5 / 3) / 2
    assert (mean, low, high) == pytest.approx((2.5, 2.5 - half, 2.5 + half))
    assert mean_estimate(np.array([4.0])) == (4.0, -np.inf, np.inf)

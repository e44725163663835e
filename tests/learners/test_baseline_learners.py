"""The baselines PDGD, DBGD and Ranking SVM: their updates on pages worked out by hand, their
probabilities, and the published numbers they reproduce."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from reranker_plugins.dbgd import DBGD
from reranker_plugins.pdgd import PDGD, clicked_and_skipped, swap_log_ratio

from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import feedback_from_clicks
from reranker.learners.policies import (
    plackett_luce_position_marginals,
    plackett_luce_prefix_log_prob,
)

X = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])


def learner(cls, **params):
    out = cls(feature_map=FeatureMap(depth=5), **params)
    out.initialize(2, ["a", "b"])
    return out


def test_pdgd_pairs_are_clicked_over_unclicked_above_the_last_click_and_just_below():
    ranking = np.arange(8)
    # every clicked position is paired with every skipped one
    assert clicked_and_skipped(feedback_from_clicks(ranking, 6, np.array([1, 3]))) == (
        [1, 3], [0, 2, 4])
    assert clicked_and_skipped(feedback_from_clicks(ranking, 6, np.array([5]))) == (
        [5], [0, 1, 2, 3, 4])  # the last shown: nothing below it on the page
    assert clicked_and_skipped(feedback_from_clicks(ranking, 6, np.array([6]))) == ([], [])
    assert clicked_and_skipped(feedback_from_clicks(ranking, 6, np.array([]))) == ([], [])


@pytest.mark.parametrize("scores, ranking", [
    (np.array([1.0, 0.0, 0.0, 2.0]), np.array([3, 0, 1, 2])),
    # hundreds apart, as a starting ranking that weighs much gives: the smaller terms
    # underflow in the shifted exponentials, and the ratio is taken in log space
    (np.array([900.0, 0.0, -300.0, 1000.0, 950.0]), np.array([3, 4, 0, 1, 2])),
    (np.array([900.0, 0.0, -300.0, 1000.0, 950.0]), np.array([3, 0, 4, 2, 1])),
])
def test_pdgd_swap_ratio_is_the_plackett_luce_probability_ratio(scores, ranking):
    for a, b in ((0, 1), (1, 2), (0, 3), (1, 3), (2, 3)):
        swapped = ranking.copy()
        swapped[[a, b]] = swapped[[b, a]]
        expected = (plackett_luce_prefix_log_prob(scores, swapped)
                    - plackett_luce_prefix_log_prob(scores, ranking))
        got = swap_log_ratio(scores, ranking, a, b)
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-12), (a, b)


def test_pdgd_update_by_hand():
    """Scores (1, 0, 0), page (0, 1, 2), a click on the second result: the pairs are 1 > 0
    (rho = 2 / (e + 3), weight e / (1 + e)^2) and 1 > 2 (rho = 1/2, weight 1/4)."""
    pdgd = learner(PDGD)
    pdgd.w_ = np.array([1.0, 0.0])
    assert pdgd.update(X, feedback_from_clicks(np.array([0, 1, 2]), 3, np.array([1])))
    e = math.e
    gradient = (2 / (e + 3)) * (e / (1 + e) ** 2) * (X[1] - X[0]) + 0.5 * 0.25 * (X[1] - X[2])
    np.testing.assert_allclose(pdgd.w_, np.array([1.0, 0.0]) + 0.1 * gradient, atol=1e-15)
    assert pdgd.eta_ == pytest.approx(0.1 * 0.9999977) and pdgd.n_updates_ == 1
    # no click, no pair: nothing changes
    before = pdgd.w_.copy()
    assert not pdgd.update(X, feedback_from_clicks(np.array([0, 1, 2]), 3, np.array([])))
    assert np.array_equal(pdgd.w_, before)


def test_pdgd_logs_its_plackett_luce_probabilities():
    pdgd = learner(PDGD)
    pdgd.w_ = np.array([1.5, -0.5])
    rng = np.random.default_rng(3)
    result = pdgd.rank(X, 2, rng)
    scores = X @ pdgd.w_
    assert result.log_prob == pytest.approx(
        plackett_luce_prefix_log_prob(scores, result.ranking[:2]))
    np.testing.assert_allclose(result.propensities,
                               plackett_luce_position_marginals(scores, 2).sum(axis=1))


def test_plackett_luce_position_marginals_are_exact():
    rng = np.random.default_rng(0)
    for n, k, scale in ((4, 2, 1.0), (5, 3, 5.0), (6, 6, 20.0)):
        scores = rng.normal(size=n) * scale
        exact = np.zeros((n, k))


        for top in itertools.permutations(range(n), k):
            p = math.exp(plackett_luce_prefix_log_prob(scores, np.array(top)))
            for r, i in enumerate(top):
                exact[i, r] += p
        np.testing.assert_allclose(plackett_luce_position_marginals(scores, k), exact,
                                   atol=1e-11)
    # scores far apart in places (a starting ranking that weighs much): the blocks between
    # the wide drops are computed alone, still exact
    scores = np.array([3.0, 2.0, -60.0, -61.5, -62.0, -150.0, -151.0])
    exact = np.zeros((7, 4))
    for top in itertools.permutations(range(7), 4):
        p = math.exp(plackett_luce_prefix_log_prob(scores, np.array(top)))
        for r, i in enumerate(top):
            exact[i, r] += p
    np.testing.assert_allclose(plackett_luce_position_marginals(scores, 4), exact, atol=1e-11)
    # ... and scores 45 to 100 apart (thousands from first to last) place each of the
    # first k at its own rank
    scores = np.random.default_rng(3).permutation(
        -np.cumsum(np.random.default_rng(4).uniform(45.0, 100.0, size=100)))
    by_rank = np.argsort(-scores)
    marginals = plackett_luce_position_marginals(scores, 10)
    np.testing.assert_allclose(marginals[by_rank[:10]], np.eye(10), atol=1e-9)
    assert not marginals[by_rank[10:]].any()


def test_dbgd_steps_toward_the_direction_only_when_it_wins():
    dbgd = learner(DBGD)
    rng = np.random.default_rng(5)
    X4 = rng.random((6, 2))
    for _ in range(50):  # a page where the two rankings differ below a common prefix
        result = dbgd.rank(X4, 4, rng)
        teams = result.context["dbgd"]["teams"]
        if 0 in teams and 1 in teams:
            break
    u = np.array(result.context["dbgd"]["u"])
    assert np.linalg.norm(u) == pytest.approx(1.0)
    ranking = result.ranking
    shown = ranking[:4].tolist()
    by_team = {team: [shown[i] for i, t in enumerate(teams) if t == team] for team in (0, 1)}
    # the current ranking's result clicked: it stays
    feedback = feedback_from_clicks(ranking, 4, np.array(by_team[0][:1]))
    feedback.context = result.context
    assert not dbgd.update(X4, feedback) and not dbgd.w_.any()
    # one click each: a tie, it stays
    feedback = feedback_from_clicks(ranking, 4, np.array([by_team[0][0], by_team[1][0]]))
    feedback.context = result.context
    assert not dbgd.update(X4, feedback) and not dbgd.w_.any()
    # the candidate's result clicked: w moves by eta u
    feedback = feedback_from_clicks(ranking, 4, np.array(by_team[1][:1]))
    feedback.context = result.context
    assert dbgd.update(X4, feedback)
    np.testing.assert_allclose(dbgd.w_, 0.01 * u, atol=1e-15)
    assert dbgd.eta_ == pytest.approx(0.01 * 0.9999977)


def test_dbgd_credits_neither_ranking_for_their_common_top():
    dbgd = learner(DBGD)
    dbgd.w_ = np.array([5.0, 0.0])  # the candidate keeps the same first result
    Xc = np.array([[1.0, 0.0], [0.0, 0.2], [0.0, 0.1]])
    result = dbgd.rank(Xc, 3, np.random.default_rng(1))
    assert result.ranking[0] == 0 and result.context["dbgd"]["teams"][0] == -1
    feedback = feedback_from_clicks(result.ranking, 3, np.array([0]))
    feedback.context = result.context
    assert not dbgd.update(Xc, feedback)
    assert result.log_prob is None and result.propensities is None


#: Oosterhuis & de Rijke, CIKM 2018, Table 2: MQ2008, offline NDCG@10 after 10,000
#: impressions, under the reference implementation's protocol.
PUBLISHED = {"pdgd": {"perfect": 0.716, "navigational": 0.714, "informational": 0.709},
             "dbgd": {"perfect": 0.706, "navigational": 0.697, "informational": 0.665}}


@pytest.mark.slow
@pytest.mark.parametrize("click_model", ["perfect", "navigational", "informational"])
def test_pdgd_and_dbgd_reproduce_the_published_numbers(click_model):
    """Train S1-S3, test S5, models from zero, no click features, the reference's stop coin
    at every examined position: the mean over 10 runs is within 0.01 of the paper's."""
    from reranker.offline.simulation import LearnerSpec, Settings, prepare, simulate, summarize
    from tests.support.paths import SHARED_DATA

    folder = SHARED_DATA / "letor4-mq2008"
    if not folder.is_dir():
        pytest.skip("shared MQ2008 data not present beside the project")
    data = prepare([folder / f"S{i}.txt.gz" for i in (1, 2, 3)], folder / "S5.txt.gz")
    settings = Settings(impressions=10_000, runs=10, click_model=f"{click_model}-every",
                        start="zero", click_features=False, checkpoints=1)
    summary = summarize(simulate(data, [LearnerSpec("pdgd"), LearnerSpec("dbgd")], settings))
    for name, published in PUBLISHED.items():
        ours = summary[name]["offline_ndcg@10"]["mean"]
        assert abs(ours - published[click_model]) <= 0.01, (name, click_model, ours)


def test_ranking_svm_fits_the_preferences_on_its_schedule():
    from reranker_plugins.ranking_svm import RankingSVM, fit_pairwise_svm

    svm = learner(RankingSVM, swap_probability=0.0, prior_steps=0.0)
    rng = np.random.default_rng(2)
    fits = []
    for step in range(1, 16):
        Xs = rng.random((4, 2))
        ranking = np.arange(4)
        feedback = feedback_from_clicks(ranking, 4, np.array([2]))  # ybar: 2 on top
        before = svm.fitted_pairs_
        assert svm.update(Xs, feedback)
        if svm.fitted_pairs_ != before:
            fits.append(step)
        if step == 1:  # one preference d: the SVM puts it exactly on the margin, w = d/|d|^2
            d = svm.feature_map.phi_difference(Xs, feedback.improved, ranking)
            np.testing.assert_allclose(svm.w_, d / (d @ d), rtol=1e-3)
    # refit whenever the pairs grew by 10% since the last fit: every pair up to 10, then
    # at 11, 13, 15
    assert fits == [*range(1, 12), 13, 15]
    pairs = svm.get_state()["pairs_"]
    assert pairs.shape == (15, 2)
    np.testing.assert_allclose(svm.w_, fit_pairwise_svm(pairs, 100.0), atol=1e-9)


@pytest.mark.parametrize("name", ["pdgd", "dbgd", "ranking_svm", "epsilon_greedy", "linucb"])
def test_the_baselines_serve_and_learn_through_the_service(workdir, name):
    """Each one ranks live searches, logs what its policy can say of its probabilities,
    and learns from the clicks in the trainer."""
    from reranker.core.config import load_config
    from reranker.serving.service import RerankerService
    from tests.support.configs import write_config

    path = write_config(workdir, learner={"name": name, "seed": 4})
    service = RerankerService(load_config(path)).open()
    try:
        for _ in range(8):
            page = service.search("tea kettle", 10)
            for position in (5, 2):
                service.click(page["impression_id"], page["hits"][position]["id"])
        imp = service.events.get_impression(page["impression_id"])
        if name == "pdgd":  # a Plackett-Luce sample: its probability and the marginals
            assert imp.log_prob is not None and imp.log_prob < 0
            assert imp.propensities is not None and len(imp.propensities) == len(imp.doc_ids)
            assert imp.propensities.sum() == pytest.approx(10.0)
        if name == "dbgd":
            assert imp.log_prob is None and "dbgd" in imp.context
        report = service.trainer.run_once(close_all=True)
        assert report.applied == 8 and report.updates >= 1
    finally:
        service.close()

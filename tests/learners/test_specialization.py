"""The general model and each query's own clicks, kept apart (docs/algorithms.md, "General
model and query specialisation"): judgments, the decisions they make on constructed data,
what a specialised page teaches the general model, and the same through the HTTP API."""

import time

import numpy as np
import pytest
from scipy import stats

from reranker.core.plugins import get_plugin_manager, learner_class
from reranker.features.clicks import lifts_from_counts
from reranker.features.clicks.position_bias import PAIR_OFFSET, SWAPPED
from reranker.learners.base import RankResult
from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import pair_swapped_ranking
from reranker.learners.specialization import (
    GATE,
    GATE_DUELS,
    GENERAL,
    JUDGED,
    SPECIALISED,
    WEIGHT,
    WEIGHT_DUELS,
    EvidenceGate,
    QueryEvidence,
    QueryWeight,
    duel_outcomes,
    gate_duels,
    gate_first,
    gate_levels,
    general_features,
    judgment_feedback,
    judgment_p_values,
    minmax,
    settled,
    specialise,
    specialised_scores,
    taught_by,
    weight_duels,
)
from reranker.offline.simulation import LearnerSpec, Settings, simulate, summarize
from tests.support.configs import write_config
from tests.support.servers import LiveServer

THETA = 1.0 / np.log2(np.arange(2, 12))  # examination of positions 1..10 (DCG discounts)


def test_a_judgment_is_the_conditional_test_of_two_poisson_rates():
    # b: 6 clicks in 4 units of exposure, a: 1 in 8; given the 7 clicks, b's share is
    # Binomial(7, 4 / 12) when the rates are equal
    p = judgment_p_values(1, 8.0, 6, 4.0)
    assert p == pytest.approx(stats.binom.sf(5, 7, 4 / 12))
    assert judgment_p_values(6, 4.0, 1, 8.0) == 1.0  # the other way round: nothing
    assert judgment_p_values(0, 3.0, 0, 3.0) == 1.0  # no click: nothing
    assert judgment_p_values(0, 0.0, 5, 3.0) == 1.0  # a never seen: nothing


def test_the_compiled_binomial_tail_is_scipys():
    from reranker.features.kernels import binomial_upper_tail

    rng = np.random.default_rng(2)
    for _ in range(3000):
        n = int(rng.integers(1, 5000))
        k, p = int(rng.integers(1, n + 1)), float(rng.random())
        assert binomial_upper_tail(k, n, p) == pytest.approx(stats.binom.sf(k - 1, n, p),
                                                              rel=1e-9, abs=1e-250)


def evidence_of(pages, n=20):
    """The counts of a query after ``pages`` (lists of (shown candidate indices, clicked
    candidate indices)), exposures weighted by the examination of the positions."""
    clicks, exposure = np.zeros(n), np.zeros(n)
    for shown, clicked in pages:
        exposure[np.asarray(shown)] += THETA[:len(shown)]
        clicks[np.asarray(clicked, dtype=int)] += 1
    return QueryEvidence(clicks, exposure)


def test_pages_without_clicks_and_a_stray_click_judge_nothing():
    top = list(range(10))
    assert evidence_of([(top, [])] * 4).strongest() is None  # four pages are not evidence
    assert evidence_of([(top, [])] * 4 + [(top, [5])]).strongest() is None  # one click
    # three clicks on the sixth result, none on the nine others seen as often: judged
    judged = evidence_of([(top, [])] * 2 + [(top, [5])] * 3).strongest()
    assert judged is not None and judged.doc == 5 and judged.above and judged.p_value <= 0.05
    assert judged.rest_clicks == 0 and judged.exposure == pytest.approx(5 * THETA[5])
    # a stricter confidence wants more
    assert evidence_of([(top, [])] * 2 + [(top, [5])] * 3).strongest(0.9999) is None


def page_for(general_scores, evidence, rng_seed=0, gate=0):
    """The page of a query whose general model scores ``general_scores`` (candidate 0 is the
    engine's first), and the judgment that specialised it (None: the model's own page), at
    the evidence gate's level ``gate``."""
    n = len(general_scores)
    counts = np.column_stack([evidence.clicks, evidence.exposure, evidence.clicks,
                              evidence.exposure])
    lift = lifts_from_counts(counts, evidence.clicks.sum() * 20, evidence.exposure.sum() * 20,
                             5.0)[:, 0]
    own = RankResult(ranking=np.argsort(-general_scores, kind="stable"),
                     scores=general_scores, context={"own": True})
    page, judgment = specialise(own, lift, evidence, 10, np.random.default_rng(rng_seed),
                                gate=gate)
    # the page's order before its randomised pairs: by the scores it was drawn from
    return np.argsort(-page.scores, kind="stable")[:n].tolist(), page, judgment


# The general model has learned (on other queries) to put candidate 3 first; the engine puts
# candidate 0 first. Decisions for one query, from its own clicks alone.
GENERAL_SCORES = np.array([0.6, 0.5, 0.4, 0.9, 0.3, 0.2, 0.1, 0.05, 0.02, 0.01, 0.0, 0.0])
MODEL_TOP = [3, 0, 1, 2]


def test_a_query_without_evidence_gets_the_general_models_own_page():
    order, page, judgment = page_for(GENERAL_SCORES, evidence_of([(MODEL_TOP, [])] * 6, 12))
    assert judgment is None and page.context == {"own": True} and order[:4] == MODEL_TOP


def test_a_query_whose_clicks_contradict_the_general_model_keeps_the_engines_order():
    # its users click the engine's first result (shown second by the model), never the
    # model's first: the query's page puts the engine's first back on top
    pages = [(MODEL_TOP + list(range(4, 10)), [0])] * 6
    order, page, judgment = page_for(GENERAL_SCORES, evidence_of(pages, 12))
    assert judgment is not None and judgment.doc in (0, 3)
    assert order[0] == 0 and SPECIALISED in page.context


def test_a_query_whose_clicks_agree_with_the_general_model_moves_from_the_engines_order():
    pages = [(MODEL_TOP + list(range(4, 10)), [3])] * 6
    order, _, judgment = page_for(GENERAL_SCORES, evidence_of(pages, 12))
    assert judgment is not None and order[0] == 3  # not the engine's 0


def check_taught(taught, upper):
    """``taught`` is the feedback of a randomised pair at ``upper`` (in its pairing) shown
    with candidate 5, the better one, below and clicked: swapped when 5 is the upper."""
    assert taught.context[PAIR_OFFSET] == upper % 2
    ranking = taught.ranking.tolist()
    (clicked,) = [ranking.index(i) for i in taught.clicked]
    assert taught.clicked.tolist() == [5] and clicked == upper + 1
    improved = pair_swapped_ranking(taught, upper % 2)
    assert improved is not None and improved.tolist().index(5) == upper
    assert taught.context[SWAPPED] == ([] if upper == 4 else [5])


def test_a_specialised_page_teaches_its_judgments_at_the_general_models_own_ranking():
    # candidate 5, the model's sixth, is clicked on every page; the others seen never are
    pages = [(list(range(10)), [5])] * 8
    scores = -np.arange(12, dtype=float)  # the model's own order: 0, 1, 2, ...
    pairings = set()
    for seed in range(6):
        _, page, judgment = page_for(scores, evidence_of(pages, 12), seed)
        assert judgment is not None
        general, judged = page.context[GENERAL], page.context[JUDGED]
        assert general == list(range(11))  # its own top, not the page's
        # a fair coin's pairing of the model's ranking holds (4, 5) or (5, 6): either way
        # candidate 5 is judged better than its neighbour there, and nothing else is
        assert judged in ([[4, 1]], [[5, 0]])
        pairings.add(judged[0][0] % 2)
        taught = taught_by(page.context, 12, 10)
        assert taught.then is None  # one feedback
        check_taught(taught, judged[0][0])
    assert pairings == {0, 1}
    # where the gate has loosened, both pairings: one feedback each, the second chained
    _, page, judgment = page_for(scores, evidence_of(pages, 12), 0, gate=1)
    assert page.context[JUDGED] == [[4, 1], [5, 0]]
    first = taught_by(page.context, 12, 10)
    assert first.then is not None and first.then.then is None
    check_taught(first, 4)
    check_taught(first.then, 5)
    # a page logged when pages also named their pairing (`judged_offset`) teaches it alike
    old = {GENERAL: list(range(11)), JUDGED: [[5, 0]], "judged_offset": 1}
    taught = taught_by(old, 12, 10)
    assert taught.then is None and taught.context[PAIR_OFFSET] == 1
    assert taught.context[SWAPPED] == [5]
    assert taught_by({GENERAL: list(range(11)), JUDGED: []}, 12, 10) is None


def test_a_model_learns_both_pairings_of_a_specialised_page_in_turn():
    """A page's judgments of both pairings reach the learner as two feedbacks, one after the
    other, each with the page's query: as if they were two pages."""
    from tests.support.models import factory

    X = np.array([[1.0, 0.0, 0.2], [0.0, 1.0, 0.1], [0.5, 0.5, 0.9]])
    # candidate 1 judged better than 0 (pairing (1, 2)), 2 better than 1 (pairing (2, 3))
    context = {GENERAL: [0, 1, 2], JUDGED: [[0, 1], [1, 1]]}
    taught = taught_by(context, 3, 3)
    taught.query = "tea"
    assert [part.query for part in taught.chain()] == ["tea", "tea"]
    parts = taught_by(context, 3, 3).chain()
    for part in parts:
        part.then = None  # each a feedback of its own
    both, apart, first_only = factory().new(), factory().new(), factory().new()
    assert both.learn(X, taught)
    for part in parts:
        apart.learn(X, part)
    first_only.learn(X, parts[0])
    np.testing.assert_allclose(both.learner.w_, apart.learner.w_)
    assert not np.allclose(both.learner.w_, first_only.learner.w_)


@pytest.mark.parametrize("name", ["preference_perceptron", "pdgd", "online_ranknet"])
def test_judgments_move_the_general_model(name):
    learner = learner_class(get_plugin_manager(), name)(feature_map=FeatureMap(10))
    learner.initialize(3)
    X = np.array([[1.0, 0.0, 0.2], [0.0, 1.0, 0.1], [0.5, 0.5, 0.0]])
    for _ in range(30):  # candidate 1 judged better than candidate 0, above it
        learner.update(X, judgment_feedback([0, 1, 2], 3, 3, 0, [(0, True)]))
    scores = learner.rank(X, 3, np.random.default_rng(0)).scores
    assert scores[1] > scores[0]


def test_the_general_model_leaves_the_query_lift_out():
    assert general_features(("backend_score", "click_lift:query_doc", "click_lift:doc")) == \
        ("backend_score", "click_lift:doc")


# -- the query weight ----------------------------------------------------------------------


def test_a_specialised_page_logs_the_pairs_a_doubled_or_halved_weight_orders_otherwise():
    general = np.array([1.0, 0.8, 0.5, 0.45, 0.0, 0.0])
    lift = np.array([1.0, 1.3, 1.0, 0.8, 1.0, 1.0])
    # at weight 1: 1.0, 1.1, 0.5, 0.25, 0, 0 -> candidates 1, 0, 2, 3, ...
    ranking = np.array([1, 0, 2, 3, 4, 5])
    pairs_only = {"pair_offset": 0, "swapped": [], "swap_probability": 0.5}
    pairs = weight_duels(specialised_scores(general, lift), lift, ranking, 6, pairs_only, 1.0)
    # (1, 0): halved, 0.8 + 0.15 < 1.0, puts candidate 0 (shown below) first; (2, 3): no
    # weight between 1/2 and 2 orders 0.5 and 0.45 - 0.2 w otherwise; (4, 5): a tie
    assert pairs == [[0, 1, 0]]
    # at 0.4 candidate 0 leads (1.0 > 0.92); the doubled weight puts candidate 1 first
    assert weight_duels(specialised_scores(general, lift, 0.4), lift, np.arange(6), 6,
                        pairs_only, 0.4) == [[0, 1, 1]]
    # a page asked for more results than there are candidates: its pairs end with them
    assert weight_duels(specialised_scores(general, lift), lift, ranking, 30, pairs_only,
                        1.0) == pairs
    # a click on one of the pair's two results settles its duel; on both or neither, not
    context = {WEIGHT_DUELS: [[0, 1, 0], [2, 0, 1]]}
    assert duel_outcomes(context, [1]) == [(False, True)]
    assert duel_outcomes(context, [0, 2]) == [(False, False), (True, True)]
    assert duel_outcomes(context, [0, 1, 4]) == []
    assert duel_outcomes({}, [0]) == []


def test_a_specialised_page_is_ranked_and_logged_with_the_arms_query_weight():
    pages = [(list(range(10)), [5])] * 8
    scores = -np.arange(12, dtype=float) / 11
    evidence = evidence_of(pages, 12)
    # (lifts that do not follow the general scores, so that other weights reorder pairs)
    lift = 1.0 + 0.2 * np.random.default_rng(5).standard_normal(12)
    own = RankResult(ranking=np.arange(12), scores=scores, context={})
    for weight in (0.5, 4.0):
        page, judgment = specialise(own, lift, evidence, 10, np.random.default_rng(1),
                                    weight=weight)
        assert judgment is not None and page.context[WEIGHT] == weight
        assert np.allclose(page.scores, specialised_scores(scores, lift, weight))
        # the logged duels are the shown pairs that the doubled or halved weight orders the
        # other way round, and the result it puts first is the one named
        shown = page.ranking.tolist()
        duelled = set()
        for upper in range(page.context["pair_offset"], 9, 2):
            a, b = shown[upper], shown[upper + 1]
            for factor, doubled in ((2.0, 1), (0.5, 0)):
                other = specialised_scores(scores, lift, weight * factor)
                if np.sign(other[a] - other[b]) not in (0, np.sign(page.scores[a] -
                                                                   page.scores[b])):
                    duelled.add((upper, 0 if other[a] > other[b] else 1, doubled))
        assert {tuple(d) for d in page.context[WEIGHT_DUELS]} == duelled
        assert duelled  # (this page has some)


def duels(level, n: int, chance: float, up: bool, seed: int = 0):
    """``level`` (a :class:`QueryWeight` or :class:`EvidenceGate`) after ``n`` duels for the
    level above it (``up``) or below, each won with ``chance`` (the gate's: pages of queries
    first specialised by the next looser level, or by its own)."""
    rng = np.random.default_rng(seed)
    gate = isinstance(level, EvidenceGate)
    for _ in range(n):
        tag = (level.level + int(up)) if gate else up
        level.observe([(tag, bool(rng.random() < chance))])
    return level


def test_the_duels_test_is_the_likelihood_ratio_of_a_win_rate_above_one_half():
    from scipy import integrate

    def ratio(won, lost):  # 2 * integral over (1/2, 1) of (2q)**won (2 (1 - q))**lost dq
        value, _ = integrate.quad(lambda q: (2 * q) ** won * (2 * (1 - q)) ** lost, 0.5, 1.0,
                                  epsabs=0, epsrel=1e-10)
        return 2 * value

    for won, lost in [(7, 0), (6, 0), (30, 12), (60, 40), (243, 172), (205, 166), (10, 10)]:
        for confidence in (0.9, 0.95, 0.99):
            assert settled([won, lost], confidence) == (ratio(won, lost) >= 1 / (1 - confidence))
    assert not settled([3, 5]) and not settled([0, 0])


def test_the_query_weight_moves_only_where_the_duels_show_users_prefer_it():
    # duels the doubled weight wins three times in four: it doubles, and again
    assert duels(QueryWeight(), 400, 0.75, up=True).level >= 2
    assert duels(QueryWeight(), 400, 0.75, up=False).level <= -2  # halved alike
    # the doubled weight losing moves nothing (only its own wins can move it up)
    assert duels(QueryWeight(), 400, 0.25, up=True).level == 0
    # a fair coin: the test is asked after every duel, and moves with at most 1 - confidence
    stayed = sum(duels(QueryWeight(), 2000, 0.5, up=bool(seed % 2), seed=seed).level == 0
                 for seed in range(40))
    assert stayed >= 36
    # the likelihood ratio of n straight wins is 2 * 2**n / (n + 1) * (1 - 2**-(n + 1)):
    # 18.3 after six, short of 1 / 0.05; 31.8 after seven
    weight = QueryWeight()
    assert not weight.observe([(True, True)] * 6) and weight.level == 0
    assert weight.observe([(True, True)]) and weight.weight == 2.0
    assert weight.doubled == [0, 0] and weight.halved == [0, 0]  # both tests start again
    top = QueryWeight(10)
    assert not top.observe([(True, True)] * 64) and top.weight == 1024.0  # bounded
    assert top.doubled == [0, 0] and top.to_dict()["doubled"] == [0, 0]  # (no level above)


def test_the_query_weight_is_saved_and_a_corrupt_one_is_named():
    weight = duels(QueryWeight(), 40, 0.9, up=True)
    weight.observe([(False, True)] * 3)
    again = QueryWeight.from_dict(weight.to_dict())
    assert again.to_dict() == weight.to_dict() and again.level == weight.level >= 1
    assert again.halved[0] == 3
    for bad, field in [({"level": 11, "doubled": [0, 0], "halved": [0, 0]}, "level"),
                       ({"level": True, "doubled": [0, 0], "halved": [0, 0]}, "level"),
                       ({"level": 0, "doubled": [1], "halved": [0, 0]}, "doubled"),
                       ({"level": 0, "doubled": [0, 0], "halved": [0, -1]}, "halved")]:
        with pytest.raises(ValueError, match=f"query_weight.{field}"):
            QueryWeight.from_dict(bad)
    with pytest.raises(ValueError, match="query_weight must be a mapping"):
        QueryWeight.from_dict([0])


# -- the evidence gate ---------------------------------------------------------------------

PAIRS = {"pair_offset": 0, "swapped": [], "swap_probability": 0.5}


def reordered(scores, other, ranking, upper_positions, clicks):
    """``(upper, 0 or 1, ...)`` of the shown pairs with a clicked result that ``other``
    orders otherwise than ``scores``: 0 when it puts the result shown above first."""
    out = set()
    for upper in upper_positions:
        a, b = ranking[upper], ranking[upper + 1]
        if clicks[a] == 0 and clicks[b] == 0:
            continue
        if np.sign(other[a] - other[b]) not in (0, np.sign(scores[a] - scores[b])):
            out.add((upper, 0 if other[a] > other[b] else 1))
    return out


def test_a_page_other_levels_of_the_gate_would_rank_otherwise_logs_the_pairs_testing_them():
    top = list(range(10))
    one_click = evidence_of([(top, [])] * 3 + [(top, [5])], 12)  # p 0.078: judged at 0.90
    two_clicks = evidence_of([(top, [])] * 3 + [(top, [5])] * 2, 12)  # p 0.006: at 0.95
    assert 0.05 < one_click.strongest(0.5).p_value <= 0.10
    scores = -np.arange(12, dtype=float) / 11
    lift = lifts_from_counts(np.column_stack([one_click.clicks, one_click.exposure] * 2),
                             20.0, 200.0, 5.0)[:, 0]
    # at level 0 (0.95) the page is the general model's own; the pairs the looser levels'
    # specialised order puts the other way round are logged, that order favoured
    own = RankResult(ranking=np.arange(12), scores=scores, context=dict(PAIRS))
    page, judgment = specialise(own, lift, one_click, 10, np.random.default_rng(0), gate=0)
    assert judgment is None and page is own and page.context[GATE] == 0
    expected = reordered(scores, specialised_scores(scores, lift), np.arange(12),
                         range(0, 9, 2), one_click.clicks)
    assert expected and {(u, f) for u, f, first in page.context[GATE_DUELS]} == expected
    # tagged with the strictest level that specialises the query: level 1 and looser
    assert all(first == 1 for _, _, first in page.context[GATE_DUELS])
    # a page whose pairs were not swapped with probability 1/2 gives no unbiased vote, and a
    # query no looser level would specialise either tests nothing
    for context, evidence in (({**PAIRS, "swap_probability": 0.2}, one_click), ({}, one_click),
                              (dict(PAIRS), evidence_of([(top, [])] * 4, 12))):
        own = RankResult(ranking=np.arange(12), scores=scores, context=context)
        page, judgment = specialise(own, lift, evidence, 10, np.random.default_rng(0))
        assert judgment is None and GATE_DUELS not in page.context
    # at level 1 (0.90) the same clicks specialise the page; its pairs that the stricter
    # level's order (the general model's) puts the other way round are logged
    own = RankResult(ranking=np.arange(12), scores=scores, context=dict(PAIRS))
    page, judgment = specialise(own, lift, one_click, 10, np.random.default_rng(0), gate=1)
    assert judgment is not None and page.context[GATE] == 1
    shown = page.ranking
    expected = reordered(page.scores, minmax(scores), shown,
                         range(page.context["pair_offset"], 9, 2), one_click.clicks)
    assert expected
    assert {(u, f) for u, f, first in page.context[GATE_DUELS]} == expected
    assert all(first == 1 for _, _, first in page.context[GATE_DUELS])  # (level 0 would not)
    # a pair another level reorders only because two results without a click were seen
    # unequally often is no duel: it says nothing of the query's clicks
    flipped = np.array([1.0, 2.0, 3.0, 4.0])
    assert gate_duels(-flipped, flipped, np.arange(4), 4, dict(PAIRS), np.zeros(4),
                      first=1) == []
    assert gate_duels(-flipped, flipped, np.arange(4), 4, dict(PAIRS),
                      np.array([0.0, 0.0, 0.0, 1.0]), first=2) == [[2, 1, 2]]
    # clicks that would specialise the page at 0.95 too test no stricter level
    page, judgment = specialise(own, lift, two_clicks, 10, np.random.default_rng(0), gate=1)
    assert judgment is not None and page.context[GATE] == 1 and GATE_DUELS not in page.context
    # a click on the second result of one page (p 0.14): first specialised at level 2 (0.80)
    weak = evidence_of([(top, [1])], 12)
    assert 0.10 < weak.strongest(0.5).p_value <= 0.20
    weak_lift = lifts_from_counts(np.column_stack([weak.clicks, weak.exposure] * 2),
                                  20.0, 200.0, 5.0)[:, 0]
    for gate, specialised in ((0, False), (1, False), (2, True), (3, True)):
        own = RankResult(ranking=np.arange(12), scores=scores, context=dict(PAIRS))
        page, judgment = specialise(own, weak_lift, weak, 10, np.random.default_rng(0),
                                    gate=gate)
        assert (judgment is not None) == specialised and page.context[GATE] == gate
        other = minmax(scores) if specialised else specialised_scores(scores, weak_lift)
        expected = reordered(page.scores, other, page.ranking,
                             range(page.context["pair_offset"], 9, 2), weak.clicks)
        assert expected, gate
        # looser duels from level 0 or 1, stricter ones from level 2 or 3: all tagged 2
        assert {(u, f) for u, f, _ in page.context[GATE_DUELS]} == expected
        assert {first for _, _, first in page.context[GATE_DUELS]} == {2}


def test_the_evidence_gate_moves_only_where_the_duels_show_users_prefer_it():
    assert gate_levels(0.95) == 3 and gate_levels(0.99) == 5 and gate_levels(0.5) == 0
    gate = duels(EvidenceGate(), 2000, 0.75, up=True)
    assert gate.level == 3 and gate.confidence(0.95) == pytest.approx(0.6)  # bounded at 1/2
    assert duels(EvidenceGate(2), 400, 0.75, up=False).level == 0
    assert duels(EvidenceGate(), 400, 0.75, up=False).level == 0  # no stricter
    assert duels(EvidenceGate(), 400, 0.25, up=True).level == 0
    stayed = sum(duels(EvidenceGate(), 2000, 0.5, up=True, seed=seed).level == 0
                 for seed in range(40))
    assert stayed >= 36
    again = EvidenceGate.from_dict(gate.to_dict())
    assert again.to_dict() == gate.to_dict()
    for bad, field in [({"level": -1, "looser": [0, 0], "stricter": [0, 0]}, "level"),
                       ({"level": 1, "looser": [0, 0]}, "stricter"),
                       ({"level": 1, "duels": [[0, 0]]}, "duels"),
                       ({"level": 1, "duels": {"1": [0, 0]}}, "duels.1"),
                       ({"level": 1, "duels": {"x": [0, 0]}}, "duels.x"),
                       ({"level": 1, "duels": {"-0": [0, 0]}}, "duels.-0"),
                       ({"level": 1, "duels": {"-1": [0, 0]}}, "duels.-1"),
                       ({"level": 0, "duels": {"2": [1]}}, "duels.2")]:
        with pytest.raises(ValueError, match=f"evidence_gate.{field}"):
            EvidenceGate.from_dict(bad)
    # a gate saved with one tally for the next looser and one for the next stricter level
    old = EvidenceGate.from_dict({"level": 1, "looser": [4, 1], "stricter": [0, 2]})
    assert old.level == 1 and old.duels == {2: [4, 1], 0: [0, 2]}


def test_every_other_level_of_the_gate_is_tested_on_the_pages_it_would_rank_otherwise():
    """A page's duels count for each level on the other side of the strictest level that
    specialises its query; each level's test runs at 0.05 / 3 (three other levels), and the
    gate moves to the nearest that settles."""
    assert [gate_first(p) for p in (0.01, 0.05, 0.07, 0.1, 0.2, 0.4, 0.41)] == \
        [0, 0, 1, 1, 2, 3, None]
    gate = EvidenceGate()
    gate.observe([(3, True), (2, False), (1, True)])  # at level 0: looser levels only
    assert gate.duels == {3: [2, 1], 2: [1, 1], 1: [1, 0]}
    gate = EvidenceGate(3)
    gate.observe([(2, True), (3, False), (1, True)])  # at level 3: stricter levels only
    assert gate.duels == {1: [1, 1], 0: [2, 1], 2: [0, 1]}
    assert gate.tallies(0.95) == {"0.95": [2, 1], "0.9": [1, 1], "0.8": [0, 1]}
    assert list(gate.tallies(0.999)) == ["0.999", "0.998", "0.996"]  # (each level its own)
    # pages of queries only the loosest level specialises: eight straight wins are not
    # enough at 0.05 / 3, the ninth moves the gate there in one step
    gate = EvidenceGate()
    assert not gate.observe([(3, True)] * 8) and gate.level == 0
    assert gate.observe([(3, True)]) and gate.level == 3 and gate.duels == {}
    # where the duels of every looser level are the same, the nearest moves; and on the
    # stricter side too
    gate = EvidenceGate()
    assert gate.observe([(1, True)] * 9) and gate.level == 1
    gate = EvidenceGate(3)
    assert not gate.observe([(3, True)] * 8) and gate.level == 3
    assert gate.observe([(3, True)]) and gate.level == 2
    # a page whose query even the loosest level would not specialise logs no duel, nor does
    # one first specialised at level 0 on a page at level 0
    assert not EvidenceGate().observe([(0, True)] * 20)


@pytest.fixture(scope="module")
def engine_is_right(tmp_path_factory):
    """Queries whose relevance is the engine's own score (its order is the best there is)
    and whose other features are noise: a general model users prefer to the engine does
    not exist."""
    from reranker.offline.simulation import prepare

    folder = tmp_path_factory.mktemp("letor")
    rng = np.random.default_rng(3)

    def write(name, queries):
        lines = []
        for q in range(queries):
            engine = rng.random(15)
            labels = np.digitize(engine, [0.6, 0.85])
            for d in range(15):
                features = [engine[d], *rng.random(5)]
                lines.append(f"{labels[d]} qid:{q} " + " ".join(
                    f"{j + 1}:{v:.4f}" for j, v in enumerate(features)) + f" # d{name}{q}-{d}")
        (folder / name).write_text("\n".join(lines) + "\n")
        return str(folder / name)

    return prepare([write("train.txt", 60)], write("test.txt", 30))


def test_a_general_model_that_users_do_not_prefer_does_not_take_over(engine_is_right):
    """The default learner on queries where the engine is right: what it has learned for
    new queries stays at the engine's quality (the clicks give it no reason to leave it),
    and its pages never fall far below the engine's in a window (its randomised pairs cost
    a little where nothing can be better than the engine's order: 0.02 to 0.03)."""
    settings = Settings(impressions=3000, runs=2, click_model="navigational", checkpoints=3,
                        backend_feature="f1")
    specs = [LearnerSpec("preference_perceptron"), LearnerSpec("backend_order",
                                                               {"feature": "f1"})]
    result = simulate(engine_is_right, specs, settings, workers=1)
    summary = summarize(result)
    ours, engine = summary["preference_perceptron"], summary[result.floor]
    assert ours["worst_window_gap"]["mean"] >= -0.035, ours["worst_window_gap"]
    assert ours["offline_ndcg@10"]["mean"] >= engine["offline_ndcg@10"]["mean"] - 0.01
    # the query's clicks gain no weight against a model as good as the engine
    assert all(weight <= 1.0 for weight in ours["query_weight"]["runs"]), ours["query_weight"]
    # nor does weaker evidence of a query's own earn its page
    assert ours["evidence_gate"]["runs"] == [0.95] * 2, ours["evidence_gate"]


def clicks_only_collection(folder, queries):
    """``queries`` training queries (and 5 held out) of 20 results, about 30% of them
    relevant, whose four features (the engine's score among them) are noise: only each
    query's own clicks can rank it."""
    from reranker.offline.simulation import prepare

    rng = np.random.default_rng(4)

    def write(name, count):
        lines = [f"{int(rng.random() < 0.3) * 2} qid:{q} " + " ".join(
            f"{j + 1}:{v:.4f}" for j, v in enumerate(rng.random(4))) + f" # d{q}-{d}"
            for q in range(count) for d in range(20)]
        (folder / name).write_text("\n".join(lines) + "\n")
        return str(folder / name)

    return prepare([write("train.txt", queries)], write("test.txt", 5))


@pytest.mark.parametrize("name", ["preference_perceptron", "pdgd"])
def test_the_query_weight_grows_where_only_the_queries_own_clicks_know(tmp_path, name):
    """Queries whose relevance no feature shows (the engine's score among them): only each
    query's own clicks can rank it, and the duels of its specialised pages double their
    weight."""
    data = clicks_only_collection(tmp_path, 20)
    settings = Settings(impressions=3000, runs=2, click_model="perfect", checkpoints=3,
                        backend_feature="f1")
    weight = summarize(simulate(data, [LearnerSpec(name)], settings, workers=1))[name][
        "query_weight"]
    assert all(w >= 2.0 for w in weight["runs"]), weight


def test_the_evidence_gate_loosens_where_a_querys_first_clicks_already_know(tmp_path):
    """Many queries, each searched a few dozen times, whose relevance only their own clicks
    show: the duels of the default learner's own pages show users prefer the order a looser
    level would give, and its gate loosens. PDGD's own pages have no pairs swapped with
    probability 1/2, so its gate stays at learner.confidence."""
    data = clicks_only_collection(tmp_path, 150)
    settings = Settings(impressions=4000, runs=2, click_model="perfect", checkpoints=3,
                        backend_feature="f1")
    summary = summarize(simulate(data, [LearnerSpec("preference_perceptron"),
                                        LearnerSpec("pdgd")], settings, workers=1))
    loosened = summary["preference_perceptron"]["evidence_gate"]["runs"]
    assert all(confidence < 0.95 for confidence in loosened), loosened
    assert summary["pdgd"]["evidence_gate"]["runs"] == [0.95] * 2


# -- through the HTTP API ------------------------------------------------------------------


def click_until_judged(live, query, rank, searches=30):
    """Search ``query`` and click the result at ``rank`` of the general model's order (by
    score) every time, until the page is specialised; returns the pages and the clicked id."""
    first = live.post("/search", {"query": query, "size": 10}).json()
    target = sorted(first["hits"], key=lambda h: -h["score"])[rank - 1]["id"]
    page, pages = first, []
    for _ in range(searches):
        pages.append(page)
        ids = [hit["id"] for hit in page["hits"]]
        if target in ids:
            live.post("/click", {"impression_id": page["impression_id"], "doc_id": target})
        imp = live.service.events.get_impression(page["impression_id"])
        if SPECIALISED in (imp.context or {}):
            break
        page = live.post("/search", {"query": query, "size": 10}).json()
    return pages, target


def test_four_searches_without_a_click_change_nothing(workdir):
    """Tried as a new user would: four searches without a click, then the fifth. With the
    query's evidence apart, nothing moves; the earlier design (the query's lift in the
    learner's starting ranking, ``learner.specialize: false``) pushed results the engine put
    in its top 10 below its 11th and 12th."""
    tops = {}
    for specialize in (True, False):
        path = write_config(workdir, learner={"specialize": specialize, "seed": 1},
                            store={"path": f"events-{specialize}.sqlite",
                                   "models": f"models-{specialize}"},
                            trainer={"enabled": False})
        live = LiveServer(path)
        try:
            explained = live.post("/explain", {"query": "green tea", "size": 12}).json()
            engine = [hit["id"] for hit in sorted(explained["hits"],
                                                  key=lambda h: h["engine_rank"])]
            for _ in range(4):
                live.post("/search", {"query": "green tea", "size": 10})
            after = live.post("/explain", {"query": "green tea", "size": 10}).json()
            tops[specialize] = ([hit["id"] for hit in after["hits"]], engine)
            if specialize:
                assert after["decided_by"]["by"] == "engine"
                assert "no click" in after["decided_by"]["why"]
        finally:
            live.stop()
    top, engine = tops[True]
    assert top == engine[:10]
    earlier, engine = tops[False]
    assert set(earlier) - set(engine[:10])  # what the user saw with the earlier design


def test_a_query_s_clicks_specialise_its_page_and_teach_the_general_model(workdir):
    path = write_config(workdir, learner={"seed": 3},
                        trainer={"enabled": False, "feedback_window": 3600.0})
    live = LiveServer(path)
    try:
        pages, target = click_until_judged(live, "tea kettle", 6)
        imp = live.service.events.get_impression(pages[-1]["impression_id"])
        judgment = imp.context[SPECIALISED]
        assert judgment["p_value"] <= 0.05 and judgment["others_clicks"] == 0
        # it took more than one click: one is not evidence
        assert sum(target in [h["id"] for h in p["hits"]] for p in pages) >= 2
        page = live.post("/search", {"query": "tea kettle", "size": 10}).json()
        explained = live.post("/explain", {"query": "tea kettle", "size": 10}).json()
        decided = explained["decided_by"]
        assert decided["by"] == "query_clicks" and decided["judgment"]["doc"] == target
        assert explained["hits"][0]["id"] == target  # the page's order puts it first
        top = explained["hits"][0]
        assert top["score"] == pytest.approx(sum(top["page_parts"].values()))
        assert top["page_parts"]["query_clicks"] > 0
        # its general model has not moved (it was not trained): only the query's page did
        assert explained["model_version"] == 0
        assert top["general_parts"]["learned"] == 0.0
        # another query with the same document is not specialised by this query's clicks
        other = live.post("/explain", {"query": "black tea", "size": 10}).json()
        assert other["decided_by"]["by"] != "query_clicks"
        taught = []
        # a pair of the general model's own ranking is judged once the target's neighbour
        # there has been seen often enough without a click (and whether that pair is in a
        # page's pairing is a coin)
        for _ in range(25):
            live.post("/click", {"impression_id": page["impression_id"], "doc_id": target})
            why = live.post("/explain", {"impression_id": page["impression_id"]}).json()
            assert why["decided_by"]["by"] == "query_clicks"
            taught.append(why["training"])
            page = live.post("/search", {"query": "tea kettle", "size": 10}).json()
        learned = [t for t in taught if t["learns"]]
        assert learned, taught
        assert all(t["judgments"] and {j["preferred"] for j in t["judgments"]} == {target}
                   for t in learned)
        assert all("judgments cover none" in t["why"] for t in taught if not t["learns"])
        report = live.service.trainer.run_once(close_all=True)
        assert report.updates > 0 and report.version == 1
        # what one query taught is no evidence for another: its weights count for nothing
        # until other queries agree (docs/algorithms.md, "Evidence across queries")
        deadline = time.monotonic() + 10
        while True:
            other = live.post("/explain", {"query": "black tea", "size": 10}).json()
            if other["model_version"] == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert other["model_version"] == 1
        assert other["queries_learned_from"] == pytest.approx(1, abs=0.1)
        weights = other["weights"]
        assert any(part["learned"] for part in weights.values())
        assert all(part["agreement"] == 0.0 and part["total"] == part["start"]
                   for part in weights.values())
        assert all(hit["general_parts"]["learned"] == 0.0 for hit in other["hits"])
        assert other["decided_by"]["by"] == "engine"
    finally:
        live.stop()


def test_the_trainer_doubles_the_query_weight_that_users_prefer_and_serves_it(workdir):
    """Through the HTTP API: users who, on the randomised pairs of a specialised page that
    the doubled weight orders otherwise, click the result it puts first. The trainer counts
    those duels, doubles the weight, saves it with the model, and the next pages are ranked
    and explained with it; pages ranked with the old weight then count for nothing."""
    from reranker.core.plugins import get_plugin_manager as plugins
    from reranker.models.arms import arms_from_config

    path = write_config(workdir, learner={"seed": 3, "query_balance": False},
                        trainer={"enabled": False, "feedback_window": 3600.0})
    live = LiveServer(path)
    try:
        _, target = click_until_judged(live, "tea kettle", 6)
        settled, old_pages = 0, []
        for _ in range(400):
            page = live.post("/search", {"query": "tea kettle", "size": 10}).json()
            context = live.service.events.get_impression(page["impression_id"]).context
            if SPECIALISED not in context:  # (its clicks judge nothing for now)
                continue
            assert context[WEIGHT] == 1.0
            old_pages.append(page)
            ids = [hit["id"] for hit in page["hits"]]
            clicks = {ids[upper + favoured] for upper, favoured, doubled
                      in context[WEIGHT_DUELS] if doubled}
            # the result the doubled weight puts first wins its pair; the target, outside
            # the pairs that test the weight, is clicked as before
            tested = {ids[upper + i] for upper, _, _ in context[WEIGHT_DUELS] for i in (0, 1)}
            if target in ids and target not in tested:
                clicks.add(target)
            for doc_id in clicks:
                live.post("/click", {"impression_id": page["impression_id"], "doc_id": doc_id})
            settled += sum(doubled for _, _, doubled in context[WEIGHT_DUELS])
            if settled >= 16:
                break
        assert settled >= 16
        live.service.events.flush()
        live.service.trainer.run_once(close_all=True)
        arm = arms_from_config(live.service.config, plugins())[0]
        model, _ = arm.models.load_latest(arm.factory)
        assert model.query_weight.weight == 2.0
        deadline = time.monotonic() + 10
        while True:  # the service reloads the version the trainer saved
            page = live.post("/search", {"query": "tea kettle", "size": 10}).json()
            context = live.service.events.get_impression(page["impression_id"]).context
            if context[WEIGHT] == 2.0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert context[WEIGHT] == 2.0
        explained = live.post("/explain", {"query": "tea kettle", "size": 10}).json()
        for hit in explained["hits"]:
            lift = hit["features"]["click_lift:query_doc"]
            assert hit["page_parts"]["query_clicks"] == pytest.approx(2.0 * (lift - 1.0))
        assert explained["decided_by"]["query_weight"]["weight"] == 2.0
        # a page served before the move is explained with the weight it was ranked with
        before = live.post("/explain", {"impression_id": old_pages[-1]["impression_id"]}).json()
        assert before["decided_by"]["query_weight"] == {
            "weight": 1.0, "arm_weight_now": 2.0,
            "duels_since_last_move": {"doubled": [0, 0], "halved": [0, 0]}}
        for hit in before["hits"]:
            lift = hit["features"]["click_lift:query_doc"]
            assert hit["page_parts"]["query_clicks"] == pytest.approx(lift - 1.0)
        # a click now on a page ranked with weight 1 settles no duel of weight 2
        for old in old_pages[:5]:
            live.post("/click", {"impression_id": old["impression_id"],
                                 "doc_id": old["hits"][0]["id"]})
        live.service.trainer.run_once(close_all=True)
        model, _ = arm.models.load_latest(arm.factory)
        assert model.query_weight.doubled == [0, 0] and model.query_weight.halved == [0, 0]
        assert target in [hit["id"] for hit in page["hits"]]
    finally:
        live.stop()


def test_the_trainer_loosens_the_evidence_gate_users_prefer_and_serves_it(workdir, corpus):
    """Through the HTTP API: queries with one click each, on their seventh result (a p-value
    near 0.07: judged at 0.90, not at the 0.95 the gate starts at), whose next pages are the
    general model's own; users click, in each of their randomised pairs that a looser gate's
    specialised order ranks otherwise, the result that order puts first. The trainer counts
    those duels, loosens the gate, saves it with the model, and a query with one such click
    is then served its specialised page, and explained with the gate."""
    from reranker.core.plugins import get_plugin_manager as plugins
    from reranker.models.arms import arms_from_config

    path = write_config(workdir, learner={"seed": 3, "query_balance": False},
                        trainer={"enabled": False, "feedback_window": 3600.0})
    live = LiveServer(path)

    def search(query):
        page = live.post("/search", {"query": query, "size": 10}).json()
        return page, live.service.events.get_impression(page["impression_id"]).context

    def click(page, doc_id):
        live.post("/click", {"impression_id": page["impression_id"], "doc_id": doc_id})

    try:
        queries = [query for query, _ in corpus.queries]
        settled, used, first_page = 0, 0, None
        for query in queries:
            used += 1
            page, _ = search(query)
            if len(page["hits"]) < 10:
                continue
            click(page, page["hits"][6]["id"])
            page, context = search(query)
            assert SPECIALISED not in context  # (one click: not evidence at 0.95)
            if GATE_DUELS in context:
                first_page = page
            for upper, favoured, first in context.get(GATE_DUELS, []):
                assert first == 1 and context[GATE] == 0  # (level 1, 0.90, would specialise)
                click(page, page["hits"][upper + favoured]["id"])
                settled += 1
            if settled >= 16:
                break
        assert settled >= 16, settled
        live.service.events.flush()
        live.service.trainer.run_once(close_all=True)
        arm = arms_from_config(live.service.config, plugins())[0]
        model, _ = arm.models.load_latest(arm.factory)
        assert model.evidence_gate.level == 1
        assert model.evidence_gate.confidence(0.95) == pytest.approx(0.90)
        deadline = time.monotonic() + 10
        while live.service.arms[0].model.evidence_gate.level != 1 and \
                time.monotonic() < deadline:  # the service reloads the version saved
            search(queries[0])
            time.sleep(0.1)
        assert live.service.arms[0].model.evidence_gate.level == 1
        fresh, page = next((q, page) for q in queries[used:]
                           for page in [search(q)[0]] if len(page["hits"]) >= 10)
        click(page, page["hits"][6]["id"])
        explained = live.post("/explain", {"query": fresh, "size": 10}).json()
        gate = explained["decided_by"]["evidence_gate"]
        assert gate["level"] == 1 and gate["confidence"] == pytest.approx(0.90)
        assert gate["duels_since_last_move"] == {}  # (the move started every test again)
        assert explained["decided_by"]["by"] == "query_clicks"
        page, context = search(fresh)
        assert SPECIALISED in context and context[GATE] == 1
        # the duels of queries now specialised at 0.90 count for the stricter 0.95 (users
        # click the result the general model's order puts below); /explain shows the tally
        # the trainer saved
        lost = 0
        for query in queries[used + 1:]:
            page, _ = search(query)
            if query == fresh or len(page["hits"]) < 10:
                continue
            click(page, page["hits"][6]["id"])
            page, context = search(query)
            assert SPECIALISED in context and context[GATE] == 1
            for upper, favoured, first in context.get(GATE_DUELS, []):
                assert first == 1
                click(page, page["hits"][upper + 1 - favoured]["id"])
                lost += 1
            if lost:
                break
        assert lost, "no specialised page at 0.90 had a duel"
        live.service.events.flush()
        live.service.trainer.run_once(close_all=True)
        model, _ = arm.models.load_latest(arm.factory)
        tallies = model.evidence_gate.tallies(0.95)
        assert model.evidence_gate.level == 1 and tallies == {"0.95": [0, lost]}
        deadline = time.monotonic() + 10
        while live.post("/explain", {"query": fresh, "size": 10}).json()["decided_by"][
                "evidence_gate"]["duels_since_last_move"] != tallies:
            assert time.monotonic() < deadline, "the service did not reload the tallies"
            time.sleep(0.1)
        # a page served at level 0 is explained at the level it was judged at
        old = live.post("/explain", {"impression_id": first_page["impression_id"]}).json()
        assert old["decided_by"]["evidence_gate"]["level"] == 0
        assert old["decided_by"]["evidence_gate"]["arm_level_now"] == 1
        assert old["decided_by"]["confidence"] == pytest.approx(0.95)
    finally:
        live.stop()

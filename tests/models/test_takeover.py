"""The evidence that users prefer the general model to the engine's order: the one-sided
always-valid test, the duels a page's clicks decide, and the decisions they lead to on
constructed users (docs/algorithms.md, "Taking over from the engine, tried")."""

import math

import numpy as np
import pytest

from reranker.experiments.probation import probation_page
from reranker.features.clicks.position_bias import PAIR_OFFSET, SWAP_PROBABILITY_KEY, SWAPPED
from reranker.learners.base import RankResult
from reranker.learners.capabilities import Capabilities
from reranker.models.takeover import (
    PROBATION,
    Takeover,
    duels,
    on_probation,
    one_sided_log_likelihood_ratio,
)


def ever_takes_over(win_rate, sequences, length, seed, confidence=0.95):
    """In how many of ``sequences`` streams of ``length`` duels, each won with
    ``win_rate``, the model takes over."""
    rng = np.random.default_rng(seed)
    taken = 0
    for _ in range(sequences):
        takeover = Takeover()
        outcomes = np.where(rng.random(length) < win_rate, 1, -1)
        for outcome in outcomes.tolist():
            if takeover.observe([outcome], confidence):
                taken += 1
                break
    return taken


def test_a_model_no_better_than_the_engine_rarely_takes_over_however_long_it_is_watched():
    # the always-valid guarantee: P(ever) <= 1 - confidence at a win rate of 1/2, and less
    # below it, although the decision is looked at after every duel
    assert ever_takes_over(0.5, 300, 400, seed=1) <= 0.05 * 300 + 2 * math.sqrt(300 * 0.05)
    assert ever_takes_over(0.45, 300, 400, seed=2) <= 2


def test_a_model_users_prefer_takes_over_and_stays():
    assert ever_takes_over(0.65, 50, 400, seed=3) >= 48
    takeover = Takeover()
    took = [takeover.observe([1], 0.95) for _ in range(60)]
    assert takeover.trusted and took.count(True) == 1  # once, and it is kept
    takeover.observe([-1] * 20, 0.95)
    assert takeover.trusted and takeover.losses == 20


def test_the_one_sided_ratio_favours_wins_only():
    assert one_sided_log_likelihood_ratio(0, 0) == pytest.approx(0.0)
    assert one_sided_log_likelihood_ratio(60, 40) > 0 > one_sided_log_likelihood_ratio(40, 60)
    # the ratio of many losses gives the model no credit, whatever the mixture
    assert one_sided_log_likelihood_ratio(5, 300, mixture=1.0) < 0
    with pytest.raises(ValueError, match="mixture"):
        one_sided_log_likelihood_ratio(1, 1, mixture=0)


def page(ranking, offset, swapped, p=0.5):
    return np.asarray(ranking), {PAIR_OFFSET: offset, SWAPPED: swapped, SWAP_PROBABILITY_KEY: p}


def test_a_duel_is_a_randomised_pair_the_two_orders_rank_the_other_way_round():
    # candidates 0..3 in the engine's order; the model puts 1 above 0 and agrees on 2, 3
    model = np.array([0.5, 0.9, 0.2, 0.1])
    ranking, context = page([1, 0, 2, 3], offset=0, swapped=[])
    assert duels(context, 4, ranking, [0], model) == [1]  # users side with the model
    assert duels(context, 4, ranking, [1], model) == [-1]  # with the engine
    assert duels(context, 4, ranking, [0, 1], model) == []  # both clicked: undecided
    assert duels(context, 4, ranking, [2], model) == []  # a pair the two agree on
    # the engine's order given as ranks (the simulator's candidates come shuffled)
    assert duels(context, 4, ranking, [0], model, engine_rank=np.array([1, 0, 2, 3])) == []
    # pairs swapped with another probability than 1/2 would need weights: none counted
    ranking, context = page([1, 0, 2, 3], offset=0, swapped=[], p=0.3)
    assert duels(context, 4, ranking, [0], model) == []
    assert duels(None, 4, ranking, [0], model) == []


def users_take_over(better_is_model, pages=3000, seed=0):
    """Probation pages for queries of 20 candidates whose engine's order is right on one half
    of its adjacent pairs and the model's on the other; users click what is relevant, more
    often higher up. Returns the evidence."""
    rng = np.random.default_rng(seed)
    takeover = Takeover()
    for _ in range(pages):
        n = 20
        relevance = rng.random(n)
        truth = np.argsort(-relevance)
        noisy = truth.copy()
        for u in range(0, n - 1, 2):  # one order swaps every other true pair
            noisy[[u, u + 1]] = noisy[[u + 1, u]]
        model_order, engine = (truth, noisy) if better_is_model else (noisy, truth)
        # the candidates in the engine's order, as the service gets them
        where = np.empty(n, dtype=np.intp)
        where[engine] = np.arange(n)
        scores = np.empty(n)
        scores[where[model_order]] = -np.arange(n, dtype=np.float64)
        shown = probation_page(RankResult(np.arange(n), scores), np.arange(n), 10, rng)
        docs = engine[shown.ranking[:10]]
        clicked = [p for p in range(10) if rng.random() < relevance[docs[p]] ** 2 / (1 + p / 3)]
        takeover.observe(duels(shown.context, 10, shown.ranking, clicked, scores), 0.95)
        if takeover.trusted:
            break
    return takeover


def test_constructed_users_make_a_better_model_take_over_and_keep_a_worse_one_out():
    better = users_take_over(True)
    assert better.trusted and better.wins > better.losses
    worse = users_take_over(False)
    assert not worse.trusted and worse.losses > worse.wins


def test_a_probation_page_mixes_both_orders_and_randomises_its_pairs():
    rng = np.random.default_rng(4)
    n = 12
    engine = np.arange(n)
    model_scores = np.arange(n, dtype=np.float64)  # the reverse of the engine's order
    result = probation_page(RankResult(np.arange(n), model_scores), engine, 10, rng)
    assert sorted(result.ranking.tolist()) == list(range(n))
    top = set(result.ranking[:10].tolist())
    assert {0, 1, 2, 3} <= top and {11, 10, 9, 8} <= top  # the tops of both orders
    assert result.context[PROBATION] is True
    assert result.context[SWAP_PROBABILITY_KEY] == 0.5


def test_the_record_round_trips_and_a_bad_one_names_its_field():
    takeover = Takeover()
    takeover.observe([1, 1, -1], 0.95)
    assert Takeover.from_dict(takeover.to_dict()) == takeover
    with pytest.raises(ValueError, match="takeover.wins"):
        Takeover.from_dict({"wins": -1})
    with pytest.raises(ValueError, match="takeover.peak"):
        Takeover.from_dict({"peak": float("nan")})
    with pytest.raises(ValueError, match="takeover.trusted"):
        Takeover.from_dict({"trusted": "yes"})
    with pytest.raises(TypeError, match="takeover"):
        Takeover.from_dict([1])


def test_floors_and_learners_of_their_own_pages_only_are_never_on_probation():
    assert on_probation(Capabilities(), True)
    assert not on_probation(Capabilities(), False)
    assert not on_probation(Capabilities(floor=True), True)
    assert not on_probation(Capabilities(learns_from_mixed_lists=False), True)

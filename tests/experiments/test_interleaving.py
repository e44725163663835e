"""Team-draft interleaving and multileaving (docs/algorithms.md, "Comparing learners";
Radlinski, Kurup & Joachims, CIKM 2008; Schuth et al., CIKM 2014)."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from reranker.experiments.interleaving import (
    credit,
    list_log_probability,
    pair_outcome,
    team_draft,
)


def _rankings(n: int, m: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.permutation(n) for _ in range(m)]


def _all_lists_probability(rankings: list[np.ndarray], n: int, k: int) -> dict[tuple, float]:
    """exp(list_log_probability) of every ordered k-subset of the candidates."""
    return {shown: math.exp(list_log_probability(rankings, np.array(shown, dtype=np.intp)))
            for shown in itertools.permutations(range(n), k)}


@pytest.mark.parametrize("n", [0, 1, 2, 5, 100])
@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("length", [None, 0, 1, 3, 11, 1000])
def test_ranking_is_a_permutation_with_an_undrafted_tail(n, m, length):
    rankings = _rankings(n, m, seed=n * 10 + m)
    rng = np.random.default_rng(0)
    ranking, teams = team_draft(rankings, rng, length)
    k = n if length is None else min(length, n)
    assert ranking.dtype == np.intp and teams.dtype == np.intp
    assert ranking.shape == teams.shape == (n,)
    assert np.array_equal(np.sort(ranking), np.arange(n))
    assert set(teams[:k].tolist()) <= set(range(m))
    assert (teams[k:] == -1).all()
    # The tail follows the first ranking's order.
    first = rankings[0].tolist()
    tail_ranks = [first.index(c) for c in ranking[k:].tolist()]
    assert tail_ranks == sorted(tail_ranks)


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_each_pick_is_the_arms_highest_ranked_free_candidate(m):
    n = 30
    rng = np.random.default_rng(1)
    for trial in range(50):
        rankings = _rankings(n, m, seed=trial)
        ranking, teams = team_draft(rankings, rng, length=12)
        for position in range(12):
            arm = int(teams[position])
            shown_before = set(ranking[:position].tolist())
            best_free = next(c for c in rankings[arm].tolist() if c not in shown_before)
            assert ranking[position] == best_free
        for arm in range(m):
            # Consequence: an arm's contributions appear in the order of its own ranking.
            own = rankings[arm].tolist()
            ranks = [own.index(c) for c in ranking[:12][teams[:12] == arm].tolist()]
            assert ranks == sorted(ranks)


def test_two_team_sizes_never_differ_by_more_than_one():
    rng = np.random.default_rng(2)
    for trial in range(200):
        ranking, teams = team_draft(_rankings(20, 2, seed=trial), rng, length=15)
        difference = np.cumsum(np.where(teams[:15] == 0, 1, -1))
        assert set(difference.tolist()) <= {-1, 0, 1}
        assert set(difference[1::2].tolist()) == {0}  # equal after every full round


@pytest.mark.parametrize("m", [3, 4])
def test_every_round_is_an_order_of_distinct_arms(m):
    rng = np.random.default_rng(3)
    first_pickers = Counter()
    for trial in range(400):
        _, teams = team_draft(_rankings(20, m, seed=trial), rng, length=10)
        for start in range(0, 10, m):
            round_teams = teams[start:min(start + m, 10)].tolist()
            assert len(set(round_teams)) == len(round_teams)
        first_pickers[int(teams[0])] += 1
    # The first pick of a round is uniform over the arms.
    assert stats.chisquare([first_pickers[a] for a in range(m)]).pvalue > 1e-3


def test_hand_computed_probabilities_two_arms():
    rankings = [np.array([0, 1, 2, 3]), np.array([1, 0, 2, 3])]
    # Round 1: A picks 0 and B picks 1, in either order. Round 2: both prefer 2, so whoever
    # picks first takes 2 and the other takes 3.
    assert list_log_probability(rankings, np.array([0])) == pytest.approx(math.log(0.5))
    assert list_log_probability(rankings, np.array([1, 0])) == pytest.approx(math.log(0.5))
    assert list_log_probability(rankings, np.array([0, 1, 2, 3])) == pytest.approx(math.log(0.5))
    assert list_log_probability(rankings, np.array([0, 1, 3, 2])) == -math.inf
    assert list_log_probability(rankings, np.array([0, 2])) == -math.inf  # B would pick 1
    assert list_log_probability(rankings, np.array([2])) == -math.inf
    assert list_log_probability(rankings, np.array([0, 0])) == -math.inf
    assert list_log_probability(rankings, np.array([7])) == -math.inf
    assert list_log_probability(rankings, np.array([0, 1, 2, 3, 0])) == -math.inf


def test_hand_computed_probabilities_three_arms():
    rankings = [np.array([0, 1, 2]), np.array([0, 1, 2]), np.array([1, 0, 2])]
    # 0 comes first unless arm 2 picks first (1 of the 3 first pickers); then 1 follows.
    assert list_log_probability(rankings, np.array([0])) == pytest.approx(math.log(2 / 3))
    assert list_log_probability(rankings, np.array([0, 1])) == pytest.approx(math.log(2 / 3))
    assert list_log_probability(rankings, np.array([1, 0, 2])) == pytest.approx(math.log(1 / 3))
    assert list_log_probability(rankings, np.array([0, 2])) == -math.inf


@pytest.mark.parametrize("n", [4, 5])
@pytest.mark.parametrize("m", [2, 3])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_probabilities_of_all_shown_lists_sum_to_one(n, m, k):
    for seed in range(3):
        rankings = _rankings(n, m, seed=seed)
        if seed == 2:
            rankings[1] = rankings[0].copy()  # partly identical arms
        probabilities = _all_lists_probability(rankings, n, k)
        assert sum(probabilities.values()) == pytest.approx(1.0, abs=1e-12)
        possible = sum(p > 0 for p in probabilities.values())
        assert possible == 1 if (seed == 2 and m == 2) else possible > 1


@pytest.mark.parametrize(("n", "m", "k"), [(6, 2, 5), (6, 3, 5), (6, 4, 6), (5, 3, 3)])
def test_shown_lists_follow_list_log_probability(n, m, k):
    rankings = _rankings(n, m, seed=11)
    probabilities = {shown: p for shown, p in _all_lists_probability(rankings, n, k).items()
                     if p > 0}
    rng = np.random.default_rng(12)
    samples = 6000
    observed = Counter(tuple(team_draft(rankings, rng, k)[0][:k].tolist())
                       for _ in range(samples))
    assert set(observed) <= set(probabilities)  # never a list of probability 0
    lists = sorted(probabilities)
    expected = np.array([probabilities[s] for s in lists]) * samples
    counts = np.array([observed[s] for s in lists])
    assert stats.chisquare(counts, expected).pvalue > 1e-3


def test_one_arm_shows_its_ranking():
    ranking = np.array([3, 0, 2, 1])
    shown, teams = team_draft([ranking], np.random.default_rng(0), length=3)
    assert shown.tolist() == [3, 0, 2, 1]
    assert teams.tolist() == [0, 0, 0, -1]
    assert list_log_probability([ranking], ranking) == 0.0
    assert list_log_probability([ranking], np.array([3, 2])) == -math.inf


def test_empty_and_single_candidate():
    rng = np.random.default_rng(0)
    shown, teams = team_draft([np.arange(0), np.arange(0)], rng)
    assert shown.size == teams.size == 0
    shown, teams = team_draft([np.arange(1), np.arange(1)], rng)
    assert shown.tolist() == [0] and teams.tolist() in ([0], [1])
    assert list_log_probability([np.arange(0)] * 2, np.array([], dtype=np.intp)) == 0.0
    assert list_log_probability([np.arange(1)] * 3, np.array([0])) == 0.0


def test_identical_rankings_share_clicks_at_the_top_evenly():
    common = np.random.default_rng(5).permutation(10)
    rankings = [common, common.copy()]
    for k in range(11):
        assert list_log_probability(rankings, common[:k]) == pytest.approx(0.0, abs=1e-12)
    rng = np.random.default_rng(6)
    first_team_credited = 0
    samples = 2000
    for _ in range(samples):
        shown, teams = team_draft(rankings, rng, length=5)
        assert np.array_equal(shown, common)
        credits = credit(teams, [0], n_arms=2)
        assert credits.sum() == 1
        first_team_credited += int(credits[0])
    assert stats.binomtest(first_team_credited, samples, 0.5).pvalue > 1e-3


def test_credit_hand_computed():
    teams = np.array([1, 0, -1, 0, 2, -1])
    assert credit(teams, [0, 1, 2, 3], n_arms=3).tolist() == [2, 1, 0]
    assert credit(teams, [4, 5], n_arms=3).tolist() == [0, 0, 1]
    assert credit(teams, [], n_arms=3).tolist() == [0, 0, 0]
    assert credit(teams, [3, 3, 1], n_arms=4).tolist() == [2, 0, 0, 0]  # a result counts once
    assert credit(teams, iter([2]), n_arms=2).tolist() == [0, 0]
    assert credit(teams, np.array([0]), n_arms=2).dtype.kind == "i"
    with pytest.raises(ValueError):
        credit(teams, [6], n_arms=3)
    with pytest.raises(ValueError):
        credit(teams, [-1], n_arms=3)
    with pytest.raises(ValueError):
        credit(teams, [4], n_arms=2)  # team 2 of only two arms


def test_pair_outcome_hand_computed():
    credits = np.array([2, 1, 0, 2])
    assert pair_outcome(credits, 0, 1) == 1
    assert pair_outcome(credits, 1, 0) == -1
    assert pair_outcome(credits, 2, 1) == -1
    assert pair_outcome(credits, 0, 3) == 0
    assert isinstance(pair_outcome(credits, 0, 1), int)


def test_random_clicks_favour_nobody():
    rng = np.random.default_rng(7)
    outcomes = Counter()
    samples = 4000
    for trial in range(samples):
        rankings = _rankings(10, 2, seed=trial % 50)
        _, teams = team_draft(rankings, rng, length=6)
        clicked = [int(rng.integers(6))]
        outcomes[pair_outcome(credit(teams, clicked, 2), 0, 1)] += 1
    assert outcomes[0] == 0  # every shown position belongs to a team
    assert stats.binomtest(outcomes[1], samples, 0.5).pvalue > 1e-3


def test_random_clicks_favour_nobody_among_three():
    rng = np.random.default_rng(8)
    totals = np.zeros(3, dtype=np.int64)
    for trial in range(3000):
        _, teams = team_draft(_rankings(10, 3, seed=trial % 50), rng, length=7)
        totals += credit(teams, [int(rng.integers(7))], 3)
    assert stats.chisquare(totals).pvalue > 1e-3


def test_clicks_on_a_rankers_top_result_credit_that_ranker():
    rng = np.random.default_rng(9)
    for trial in range(200):
        rankings = _rankings(10, 2, seed=trial)
        if rankings[0][0] == rankings[1][0]:
            continue
        shown, teams = team_draft(rankings, rng, length=4)
        position = int(np.flatnonzero(shown == rankings[0][0])[0])
        assert pair_outcome(credit(teams, [position], 2), 0, 1) == 1


def test_invalid_rankings_are_rejected():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        team_draft([], rng)
    with pytest.raises(ValueError):
        team_draft([np.arange(3), np.arange(4)], rng)
    with pytest.raises(ValueError):
        team_draft([np.array([0, 0, 2])], rng)
    with pytest.raises(ValueError):
        list_log_probability([np.array([1, 2, 3])], np.array([1]))


def test_a_long_mixed_page_pairs_only_its_top_and_its_probability_is_exact_and_cheap():
    """A mixed page of 100 results (the largest size) randomises the pairs of its top
    MIXED_PAIR_DEPTH positions only, so its probability sums 2^5 swap patterns per pairing,
    not 2^50; the logged probability is that of the policy: the empirical frequency of a
    shown top over many draws matches it."""
    from reranker.experiments.interleaving import (
        MIXED_PAIR_DEPTH,
        perturb_pairs,
        perturbed_list_log_probability,
    )

    rng = np.random.default_rng(4)
    rankings = [rng.permutation(120), rng.permutation(120)]
    ranking, teams = team_draft(rankings, rng, length=100)
    perturbed, _, offset, swapped = perturb_pairs(ranking, teams, 100, rng)
    assert all(u + 1 < MIXED_PAIR_DEPTH for u in swapped)
    assert (perturbed[MIXED_PAIR_DEPTH:] == ranking[MIXED_PAIR_DEPTH:]).all()
    log_p = perturbed_list_log_probability(rankings, perturbed[:100])  # returns at once
    assert -math.inf < log_p < 0
    # exact: the frequency of the shown top 6 over many draws, against its probability
    small = [np.array([0, 1, 2, 3, 4, 5, 6, 7]), np.array([1, 0, 3, 2, 5, 4, 7, 6])]
    draws = Counter()
    for _ in range(20000):
        shown, mixed_teams = team_draft(small, rng, length=6)
        shown, _, _, _ = perturb_pairs(shown, mixed_teams, 6, rng, depth=4)
        draws[tuple(shown[:6].tolist())] += 1
    for top, count in draws.most_common(5):
        expected = math.exp(perturbed_list_log_probability(small, np.array(top), depth=4))
        assert count / 20000 == pytest.approx(expected, abs=0.01)

"""Team-draft interleaving and multileaving (docs/algorithms.md, "Comparing learners").

Interleaving compares rankers on live traffic by showing each user ONE list that mixes the
rankers' results and crediting every click to the ranker that contributed the clicked result.
This module implements team-draft interleaving (Radlinski, Kurup & Joachims, "How does
clickthrough data reflect retrieval quality?", CIKM 2008, Algorithm 2) for two rankers and its
generalisation to any number of rankers, team-draft multileaving (Schuth, Sietsma, Whiteson,
Lefortier & de Rijke, "Multileaved comparisons for fast online evaluation", CIKM 2014,
Algorithm 1), as one algorithm:

* the list is built in rounds; in each round the ``m`` arms ("teams") pick in a uniformly random
  order, a fresh random permutation of the arms per round;
* an arm picks its highest-ranked candidate that is not yet in the list, and that position is
  credited to the arm (its team).

For two arms this is the paper's coin flip whenever both teams have the same size: after every
full round the teams have equal size, so team sizes never differ by more than one. Clicks
are credited per arm (:func:`credit`), and a pair of arms is compared by who got more credited
clicks (:func:`pair_outcome`): +1, -1 or a tie, the outcomes that :mod:`reranker.experiments.stats`
tests.

:func:`list_log_probability` gives the probability that the drafting produces a given shown
list, marginalised over the team assignments that produce it. It is exact and cheap because an
arm's pick depends only on the SET of candidates already in the list, and the shown list fixes
that set before every position: the probability is a product over rounds of (number of arm
orders whose picks agree with the next positions of the shown list) / (number of orders).

Candidates are the integers ``0..n-1`` and every ranking is a full permutation of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["credit", "list_log_probability", "pair_outcome", "perturb_pairs",
           "perturbed_list_log_probability", "team_draft"]


def _as_rankings(rankings: Sequence[np.ndarray]) -> tuple[list[list[int]], int]:
    """The rankings as Python lists (fast scalar indexing) and their common length ``n``;
    raises ValueError unless they are permutations of the same candidates ``0..n-1``."""
    if len(rankings) == 0:
        raise ValueError("team draft needs at least one ranking")
    try:
        stacked = np.asarray(rankings, dtype=np.intp)
    except ValueError:
        stacked = None
    if stacked is None or stacked.ndim != 2:
        raise ValueError("the rankings must be 1-d arrays of the same length")
    n = stacked.shape[1]
    if not np.array_equal(np.sort(stacked, axis=1), np.broadcast_to(np.arange(n), stacked.shape)):
        raise ValueError(f"every ranking must be a permutation of the candidates 0..{n - 1}")
    return stacked.tolist(), n


def team_draft(rankings: Sequence[np.ndarray], rng: np.random.Generator,
               length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Returns (ranking, teams). ranking: a permutation of all n candidates (np.intp). The first
    `length` positions (default n; clipped to n) are drafted; the rest follow in the order of
    rankings[0], teams -1. teams[i] = index of the arm that contributed ranking[i] (np.intp)."""
    lists, n = _as_rankings(rankings)
    m = len(lists)
    k = n if length is None else max(0, min(int(length), n))
    ranking = np.empty(n, dtype=np.intp)
    teams = np.full(n, -1, dtype=np.intp)
    if k > 0:
        # One random order of the arms per round (docs/algorithms.md, "Comparing learners";
        # Schuth et al. 2014, Algorithm 1): argsort of iid uniforms is a uniform permutation,
        # and drawing all rounds at once is much cheaper than one rng call per round.
        rounds = -(-k // m)
        orders = np.argsort(rng.random((rounds, m)), axis=1).ravel().tolist()
        taken = [False] * n
        pointers = [0] * m  # per arm: no candidate above this rank is still free
        picked: list[int] = []
        picked_by: list[int] = []
        for arm in orders[:k]:
            ranks, p = lists[arm], pointers[arm]
            while taken[ranks[p]]:
                p += 1
            pointers[arm] = p + 1
            candidate = ranks[p]
            taken[candidate] = True
            picked.append(candidate)
            picked_by.append(arm)
        ranking[:k] = picked
        teams[:k] = picked_by
        if k < n:
            # The undrafted tail, in the order of the first ranking, credited to nobody.
            first = np.asarray(lists[0], dtype=np.intp)
            ranking[k:] = first[~np.asarray(taken)[first]]
    elif n:
        ranking[:] = lists[0]
    return ranking, teams


def list_log_probability(rankings: Sequence[np.ndarray], shown: np.ndarray) -> float:
    """log P(team_draft's first len(shown) results equal `shown` | rankings), marginalised over
    the team assignments that produce that list; -inf when impossible."""
    lists, n = _as_rankings(rankings)
    return _list_log_probability(lists, n, np.asarray(shown, dtype=np.intp).ravel().tolist())


def _list_log_probability(lists: list[list[int]], n: int, shown_list: list[int]) -> float:
    m = len(lists)
    k = len(shown_list)
    if k > n:
        return -math.inf
    taken = [False] * n
    pointers = [0] * m
    log_p = 0.0
    for start in range(0, k, m):
        r = min(m, k - start)
        # agrees[i] = bitmask of the arms whose pick at position start + i is shown[start + i].
        # An arm's pick depends only on the set already shown, which `shown` fixes (docs/
        # algorithms.md, "Comparing learners"; Radlinski et al. 2008, Algorithm 2).
        agrees = []
        for candidate in shown_list[start:start + r]:
            mask = 0
            for arm in range(m):
                ranks, p = lists[arm], pointers[arm]
                while taken[ranks[p]]:
                    p += 1
                pointers[arm] = p
                if ranks[p] == candidate:
                    mask |= 1 << arm
            if mask == 0:
                return -math.inf  # no arm would pick it (also: repeated or unknown candidates)
            taken[candidate] = True
            agrees.append(mask)
        orders = _count_orders(agrees, m)
        if orders == 0:
            return -math.inf
        # A round's order is a uniform permutation of the m arms; its first r arms form each of
        # the m!/(m-r)! ordered r-tuples of distinct arms with equal probability.
        log_p += math.log(orders) - math.log(math.perm(m, r))
    return log_p


def _count_orders(agrees: list[int], m: int) -> int:
    """Number of ordered tuples of distinct arms (a_0, .., a_{r-1}) with arm a_i in agrees[i]
    (a permanent, counted by dynamic programming over the subsets of arms already used)."""
    if m == 1:
        return 1 if agrees[0] & 1 else 0
    counts = {0: 1}
    for mask in agrees:
        following: dict[int, int] = {}
        for used, count in counts.items():
            free = mask & ~used
            while free:
                bit = free & -free
                free ^= bit
                following[used | bit] = following.get(used | bit, 0) + count
        counts = following
        if not counts:
            return 0
    return sum(counts.values())


def pair_uppers(offset: int, n_shown: int) -> range:
    """The upper positions (0-based) of the pairs of pairing ``offset`` inside a page of
    ``n_shown``: (1, 2), (3, 4), ... for 0 and (2, 3), (4, 5), ... for 1."""
    return range(offset, n_shown - 1, 2)


#: The positions a mixed page's randomised pairs stay within: the page's probability sums
#: over every set of swapped pairs (2 to the number of pairs), so a page of 100 results
#: paired throughout would take 2^50 terms; within the top 10, 32 at most, where nearly all
#: clicks are.
MIXED_PAIR_DEPTH = 10


def perturb_pairs(ranking: np.ndarray, teams: np.ndarray, n_shown: int,
                  rng: np.random.Generator, swap_probability: float = 0.5,
                  depth: int = MIXED_PAIR_DEPTH
                  ) -> tuple[np.ndarray, np.ndarray, int, list[int]]:
    """Randomised adjacent pairs on a mixed list (FairPairs, Radlinski & Joachims, AAAI
    2006): a fair coin picks the pairing, then each of its pairs inside the page is swapped
    with ``swap_probability``, the results keeping their teams (the pairs within the first
    ``depth`` positions). The clicks on a swapped or
    kept pair then compare its two results without position bias, whichever arm contributed
    them, so every arm can learn from every mixed list (docs/algorithms.md, "Comparing
    learners"). Returns the new ranking and teams, the pairing and the swapped uppers."""
    ranking, teams = ranking.copy(), teams.copy()
    offset = int(rng.random() < 0.5)
    uppers = pair_uppers(offset, min(n_shown, depth))
    coins = rng.random(len(uppers))
    swapped = [u for u, coin in zip(uppers, coins.tolist(), strict=True)
               if coin < swap_probability]
    for u in swapped:
        ranking[[u, u + 1]] = ranking[[u + 1, u]]
        teams[[u, u + 1]] = teams[[u + 1, u]]
    return ranking, teams, offset, swapped


def perturbed_list_log_probability(rankings: Sequence[np.ndarray], shown: np.ndarray,
                                   swap_probability: float = 0.5,
                                   depth: int = MIXED_PAIR_DEPTH) -> float:
    """log P(the shown top equals ``shown``) when a team draft is followed by
    :func:`perturb_pairs`: summed over both pairings and every set of swapped pairs, of the
    team draft's probability of the list before the swaps."""
    lists, n = _as_rankings(rankings)
    top = np.asarray(shown, dtype=np.intp).ravel().tolist()
    k = len(top)
    p = float(swap_probability)
    total = 0.0
    for offset in (0, 1):
        uppers = list(pair_uppers(offset, min(k, depth)))
        for pattern in range(1 << len(uppers)):
            swaps = [u for i, u in enumerate(uppers) if pattern >> i & 1]
            chance = 0.5 * p ** len(swaps) * (1.0 - p) ** (len(uppers) - len(swaps))
            if chance == 0.0:
                continue
            before = list(top)
            for u in swaps:
                before[u], before[u + 1] = before[u + 1], before[u]
            log_p = _list_log_probability(lists, n, before)
            if log_p > -math.inf:
                total += chance * math.exp(log_p)
    return math.log(total) if total > 0 else -math.inf


def credit(teams: np.ndarray, click_positions: Iterable[int], n_arms: int) -> np.ndarray:
    """Clicks credited per arm (int array length n_arms): a click at 0-based position p counts
    for teams[p]; positions whose team is -1 count for nobody.

    A position listed more than once counts once: the papers count clicked results.
    """
    teams = np.asarray(teams, dtype=np.intp)
    positions = np.unique(np.fromiter(click_positions, dtype=np.intp))
    if positions.size and (positions[0] < 0 or positions[-1] >= teams.size):
        raise ValueError(f"click positions must be in 0..{teams.size - 1}, got "
                         f"{positions[0]}..{positions[-1]}")
    clicked_teams = teams[positions]
    clicked_teams = clicked_teams[clicked_teams >= 0]
    if clicked_teams.size and clicked_teams.max() >= n_arms:
        raise ValueError(f"team {clicked_teams.max()} is not one of the {n_arms} arms")
    return np.bincount(clicked_teams, minlength=n_arms).astype(np.int64)


def pair_outcome(credits: np.ndarray, a: int, b: int) -> int:
    """+1 if arm a got more credited clicks than b, -1 if fewer, 0 if equal (a tie)."""
    difference = int(credits[a]) - int(credits[b])
    return (difference > 0) - (difference < 0)

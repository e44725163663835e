"""The page of a search while an arm's general model is on probation (docs/algorithms.md,
"Taking over from the engine"; :mod:`reranker.models.takeover` keeps the evidence and the
decision): the engine's order and the model's own interleaved by team draft, with randomised
adjacent pairs."""

from __future__ import annotations

import numpy as np

from reranker.experiments.interleaving import MIXED_PAIR_DEPTH, perturb_pairs, team_draft
from reranker.features.clicks.position_bias import (
    PAIR_DEPTH,
    PAIR_OFFSET,
    SWAP_PROBABILITY_KEY,
    SWAPPED,
)
from reranker.learners.base import RankResult
from reranker.learners.specialization import general_ranking
from reranker.models.takeover import PROBATION

#: Chance that each randomised pair of a probation page is swapped: 1/2, for which the
#: clicks on a pair compare its two results without position bias whoever contributed them.
PROBATION_SWAP = 0.5


def probation_page(own: RankResult, engine: np.ndarray, n_shown: int,
                   rng: np.random.Generator) -> RankResult:
    """The page of a search while the model is on probation: the engine's order
    (``engine``, a ranking of the candidates) and the model's own order (by ``own.scores``,
    ties in the engine's) interleaved by team draft, then randomised adjacent pairs at 1/2,
    which the context records: the learner learns from the page as from a mixed list, and
    the pairs the two orders rank the other way round are duels
    (:func:`reranker.models.takeover.duels`)."""
    ranking, teams = team_draft([np.asarray(engine, dtype=np.intp), general_ranking(own.scores)],
                                rng, length=n_shown)
    ranking, _, offset, swapped = perturb_pairs(ranking, teams, n_shown, rng, PROBATION_SWAP)
    return RankResult(ranking=ranking, scores=-np.argsort(ranking).astype(np.float64),
                      context={PROBATION: True, PAIR_OFFSET: offset, SWAPPED: swapped,
                               SWAP_PROBABILITY_KEY: PROBATION_SWAP,
                               PAIR_DEPTH: MIXED_PAIR_DEPTH})

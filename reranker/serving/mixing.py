"""Mixing the arms of an experiment on one page: every arm ranks with its own policy,
team-draft interleaving (two arms) or multileaving (more) mixes their rankings, and randomised
pairs on the mixed page let every arm learn from it (docs/algorithms.md, "Interleaving";
:func:`reranker.experiments.interleaving.perturb_pairs`). Each arm's own ranking and
probability are logged with the impression."""

from __future__ import annotations

import numpy as np

from reranker.experiments.interleaving import (
    MIXED_PAIR_DEPTH,
    perturb_pairs,
    perturbed_list_log_probability,
    team_draft,
)
from reranker.features.clicks.position_bias import (
    PAIR_DEPTH,
    PAIR_OFFSET,
    SWAP_PROBABILITY_KEY,
    SWAPPED,
)
from reranker.learners.specialization import QueryEvidence, specialised_ranking
from reranker.serving.page import RankedPage
from reranker.serving.ranking import BACKEND_ORDER, Ranker

#: Chance that each randomised pair of a mixed (interleaved) page is swapped: the papers'
#: 0.5, for which the clicks on the pair's two results compare them without position bias.
MIXED_SWAP_PROBABILITY = 0.5


def mixed_page(ranker: Ranker, mode: str, X: np.ndarray, n_shown: int,
               labels: tuple[str, ...], evidence: QueryEvidence | None = None) -> RankedPage:
    """The mixed page of the arms ``labels`` (the experiment's ``mode`` names it) over the
    candidates ``X``, of which ``n_shown`` are shown; an arm whose learner fails contributes
    the engine's order in its place."""
    rankings, logged = [], {}
    for label in labels:
        arm = ranker.by_label[label]
        model = arm.model
        result = ranker.arm_ranking(arm, model, X, n_shown)
        if result is None:  # the engine's order takes its place on the page
            rankings.append(np.arange(X.shape[0], dtype=np.intp))
            logged[label] = {"id": BACKEND_ORDER, "model_version": -1,
                             "ranking": rankings[-1][: max(n_shown, arm.spec.depth)].tolist(),
                             "log_prob": 0.0, "fallback": "learner"}
            continue
        if ranker.specialises(arm, evidence) \
                and evidence.strongest(model.evidence_gate.confidence(arm.spec.confidence)) \
                is not None:
            # the arm's ranking as its own specialised page would order it
            result.ranking = specialised_ranking(result.scores, X[:, ranker.query_lift],
                                                 model.query_weight.weight)
        rankings.append(result.ranking)
        logged[label] = {"id": arm.id, "model_version": model.version,
                         "ranking": result.ranking[: max(n_shown, arm.spec.depth)].tolist(),
                         "log_prob": result.log_prob}
    rng = ranker.rng
    ranking, teams = team_draft(rankings, rng, length=n_shown)
    ranking, teams, offset, swapped = perturb_pairs(ranking, teams, n_shown, rng,
                                                    MIXED_SWAP_PROBABILITY)
    return RankedPage(
        mode, -1, None, None, ranking,
        scores=-np.argsort(ranking).astype(np.float64),
        teams=[labels[t] for t in teams[:n_shown].tolist()],
        log_prob=perturbed_list_log_probability(rankings, ranking[:n_shown],
                                                MIXED_SWAP_PROBABILITY),
        context={"arms": logged, "interleaving": "team_draft", PAIR_OFFSET: offset,
                 SWAPPED: swapped, SWAP_PROBABILITY_KEY: MIXED_SWAP_PROBABILITY,
                 PAIR_DEPTH: MIXED_PAIR_DEPTH})

"""Dueling Bandit Gradient Descent (Yue & Joachims, ICML 2009, Algorithm 2), with team-draft
interleaving as the comparison (Hofmann et al. 2011's TD-DBGD)."""

from __future__ import annotations

import numpy as np

from reranker import hookimpl
from reranker.experiments.interleaving import team_draft
from reranker.feedback import Feedback
from reranker.learner import (
    GradientStepLearner,
    Param,
    RankResult,
    argmax_ranking,
    learning_rate_params,
    prior_steps_param,
)

#: The context key of the exploration direction and the teams of the shown list.
CONTEXT_KEY = "dbgd"


class DBGD(GradientStepLearner):
    """Each impression draws a unit direction ``u`` and shows the team-draft interleaving of
    the rankings of ``w`` and ``w + delta u``; when the results of ``w + delta u`` win more
    clicks, ``w`` takes a step ``eta u`` toward it."""

    name = "dbgd"
    description = ("Dueling Bandit Gradient Descent (Yue & Joachims 2009): team-draft "
                   "interleaves w and w + delta u, steps toward u when it wins.")
    params = (
        Param("delta", float, 1.0, "length of the exploration step: the candidate is w + "
              "delta u for a random unit vector u", minimum=0.0, exclusive_minimum=True),
        *learning_rate_params(0.01, 0.9999977),  # the reference experiments' settings
        prior_steps_param(0.0),  # the paper starts from w = 0
    )
    stochastic = True
    policy = "interleaved"
    #: Its shown list is random through the continuous direction u as well as the team-draft
    #: coins: no finite sum gives the probability of a list, so it logs none.
    exact_probabilities = False
    # It learns from which of its two rankings won the clicks: only on its own lists.
    learns_from_mixed_lists = False

    def _rank(self, X: np.ndarray, n_shown: int,
              rng: np.random.Generator | None) -> RankResult:
        weights = self.weights()
        scores = X @ weights
        u = rng.normal(size=len(weights))
        u /= np.linalg.norm(u) or 1.0
        current = argmax_ranking(scores)
        candidate = argmax_ranking(X @ (weights + self.delta * u))
        ranking, teams = team_draft([current, candidate], rng, n_shown)
        # Results both rankings put in the same place at the top credit neither
        # (they cannot tell the two apart).
        same = np.flatnonzero(current[:n_shown] != candidate[:n_shown])
        prefix = int(same[0]) if len(same) else n_shown
        teams[:prefix] = -1
        return RankResult(ranking=ranking, scores=scores,
                          context={CONTEXT_KEY: {"u": u.tolist(),
                                                 "teams": teams[:n_shown].tolist()}})

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        logged = (feedback.context or {}).get(CONTEXT_KEY)
        if not logged or not len(feedback.clicked):
            return False
        teams = np.asarray(logged["teams"], dtype=np.intp)
        where = np.empty(len(feedback.ranking), dtype=np.intp)
        where[feedback.ranking] = np.arange(len(feedback.ranking))
        positions = where[np.asarray(feedback.clicked, dtype=np.intp)]
        credited = teams[positions[positions < len(teams)]]
        if np.sum(credited == 1) <= np.sum(credited == 0):
            return False  # the current ranking won or tied: it stays
        u = np.asarray(logged["u"], dtype=np.float64)
        if u.shape != self.w_.shape:  # logged before the features grew
            u = np.concatenate([u, np.zeros(len(self.w_) - len(u))])[: len(self.w_)]
        # Yue & Joachims, Algorithm 2: w_{t+1} = w_t + eta u_t when w_t + delta u_t wins
        self._step(u)
        return True


@hookimpl
def reranker_register_learners():
    return [DBGD]

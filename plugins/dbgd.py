"""Dueling Bandit Gradient Descent (Yue & Joachims, ICML 2009, Algorithm 2), with team-draft
interleaving as the comparison (Hofmann et al. 2011's TD-DBGD); on a list another policy
drew, the duel is judged on the list's randomised pairs (docs/algorithms.md, "DBGD")."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np

from reranker import hookimpl
from reranker.experiments.interleaving import team_draft
from reranker.features.clicks.position_bias import PAIR_OFFSET, one_click_pairs
from reranker.learners import (
    GradientStepLearner,
    Param,
    RankResult,
    argmax_ranking,
    learning_rate_params,
    prior_steps_param,
)
from reranker.learners.feedback import Feedback, click_positions

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
    # Its shown list is random through the continuous direction u as well as the team-draft
    # coins: no finite sum gives the probability of a list, so it logs none. On its own lists
    # it learns from which of its two rankings won the clicks; on a list another policy drew,
    # from a duel judged on the list's randomised pairs (_pair_duel).
    capabilities = replace(GradientStepLearner.capabilities, stochastic=True,
                           policy="interleaved", exact_probabilities=False,
                           learns_from_mixed_lists=True)

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
        if not logged and PAIR_OFFSET in (feedback.context or {}):
            return self._pair_duel(X, feedback)
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

    def _pair_duel(self, X: np.ndarray, feedback: Feedback) -> bool:
        """DBGD's duel on a list another policy drew with randomised adjacent pairs (an
        experiment's mixed list, a specialised page's judgments; docs/algorithms.md,
        "DBGD"). Each randomised pair with exactly one click is a preference of the clicked
        result over the other, weighted by the inverse of the chance of the order shown
        (``1 - p`` kept, ``p`` swapped, ``p`` the logged swap probability), which cancels
        position bias in expectation. The candidate ``w + delta u`` (``u`` drawn from the
        page itself, so that training is reproducible) wins when the preferences it orders
        right outweigh those ``w`` orders right; then, as in Algorithm 2, ``w += eta u``."""
        clicked = click_positions(feedback).tolist()
        ranking = feedback.ranking
        preferences, p = one_click_pairs(feedback.context, feedback.n_shown, ranking, clicked)
        if not preferences:
            return False
        better = [k for k, _, _ in preferences]
        worse = [m for _, m, _ in preferences]
        weights = [1.0 / (p if swapped else 1.0 - p) for _, _, swapped in preferences]
        seed = hashlib.blake2b(np.ascontiguousarray(X).tobytes()
                               + np.asarray(ranking, dtype=np.int64).tobytes()
                               + repr(sorted(clicked)).encode(), digest_size=8).digest()
        u = np.random.default_rng(int.from_bytes(seed, "big")).normal(size=X.shape[1])
        u /= np.linalg.norm(u) or 1.0
        weights = np.asarray(weights)
        differences = X[better] - X[worse]
        weights_ = self.weights()
        current = weights @ (differences @ weights_ > 0)
        candidate = weights @ (differences @ (weights_ + self.delta * u) > 0)
        if candidate <= current:
            return False  # the current model ordered as many right: it stays
        self._step(u)
        return True


@hookimpl
def reranker_register_learners():
    return [DBGD]

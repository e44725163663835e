"""Greedy KLRank (Delage, section 5.1): GPER on the KL cost, argmax presentation."""

from __future__ import annotations

import numpy as np

from reranker import hookimpl
from reranker.learners.gper import ARGMAX_PARAMS, GPERLearner, kl_cost_gradient


class GreedyKLRank(GPERLearner):
    """The same GPER updates as NoRegret KLRank, but presents the items sorted by
    ``theta . x`` instead of a sample."""

    name = "greedy_klrank"
    description = ("Greedy KLRank (Delage 2009): GPER on the KL cost like NoRegret KLRank, but "
                   "presents the argmax ranking; supports new features.")
    params = ARGMAX_PARAMS

    def _gradient(self, X, chosen) -> np.ndarray:
        # Delage, section 5.1: loss = -Phi(I_t) theta + log sum_I exp(Phi(I) theta)
        return kl_cost_gradient(X, self.scores(X), chosen)


@hookimpl
def reranker_register_learners():
    return [GreedyKLRank]

"""LinUCB for semibandits (the baseline of Krishnamurthy, Agarwal & Dudik, NIPS 2016,
section 5; Li et al. 2010's LinUCB with one regression over all shown items)."""

from __future__ import annotations

import numpy as np

from reranker import hookimpl
from reranker.learners import Capabilities, Learner, Param, RankResult, argmax_ranking
from reranker.learners.feedback import Feedback, item_feedback


class LinUCB(Learner):
    """Ranks by the upper confidence bound ``theta . x + alpha sqrt(x^T Sigma^-1 x)`` of a
    ridge regression of every shown item's click on its features (``Sigma = lambda I + sum
    x x^T``, ``theta = Sigma^-1 sum x y``), refreshed every ``refresh`` rounds."""

    name = "linucb"
    description = ("LinUCB for semibandits: ranks by theta . x + alpha sqrt(x' Sigma^-1 x) of "
                   "a ridge regression on per-item clicks, refreshed every N rounds.")
    capabilities = Capabilities(per_item_feedback=True)
    params = (
        Param("alpha", float, 1.0, "width of the confidence bonus", minimum=0.0),
        Param("ridge", float, 1.0, "lambda of Sigma = lambda I + sum x x^T", minimum=0.0,
              exclusive_minimum=True),
        Param("refresh", int, 100, "rounds between refreshes of theta and Sigma^-1 (the "
              "paper's 100)", minimum=1),
    )

    def _initialize(self, n_features: int) -> None:
        self.Sigma_ = self.ridge * np.eye(n_features)
        self.b_ = np.zeros(n_features)
        self.Sigma_inv_ = np.eye(n_features) / self.ridge  # as of the last refresh
        self.theta_ = np.zeros(n_features)
        self.rounds_ = 0

    def _rank(self, X: np.ndarray, n_shown: int,
              rng: np.random.Generator | None) -> RankResult:
        bonus = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", X, self.Sigma_inv_, X), 0.0))
        scores = X @ self.theta_ + self.alpha * bonus
        return RankResult(ranking=argmax_ranking(scores), scores=scores)

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        k = min(feedback.n_shown, len(feedback.ranking))
        if k == 0:
            return False
        shown, clicked = item_feedback(feedback, k)  # clicks, or graded values
        Xs = X[shown]
        self.Sigma_ = self.Sigma_ + Xs.T @ Xs
        self.b_ = self.b_ + clicked @ Xs
        self.rounds_ += 1
        if self.rounds_ % self.refresh == 0:
            self.Sigma_inv_ = np.linalg.inv(self.Sigma_)
            self.theta_ = self.Sigma_inv_ @ self.b_
        return True


@hookimpl
def reranker_register_learners():
    return [LinUCB]

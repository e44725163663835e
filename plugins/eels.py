"""EELS: Explore then exploit for semibandits with unknown position weights (Krishnamurthy,
Agarwal & Dudik, *Contextual Semibandits via Supervised Learning Oracles*, NIPS 2016,
Algorithm 2)."""

from __future__ import annotations

import math

import numpy as np

from reranker import hookimpl
from reranker.learners import Capabilities, Learner, Param, RankResult, argmax_ranking
from reranker.learners.feedback import Feedback, item_feedback
from reranker.learners.policies import uniform_log_prob


class EELS(Learner):
    """Shows uniformly random lists until it has explored ``min_rounds`` pages with a reward
    and the per-position feedback vectors span every position well (the smallest eigenvalue
    of ``sum y y^T`` reaches ``min_eigenvalue``); then estimates the position weights ``w``
    by least squares of the pages' rewards on their feedback vectors, fits the regression
    oracle once on the importance-weighted exploration data, and shows its list for good:
    the results ranked by the oracle, placed on the positions in the order of ``w``.

    The reward of a page is the application's (``POST /reward``: a purchase, a satisfaction
    signal); the feedback vector ``y`` holds the clicks at each of the first ``positions``
    positions. Pages without a reward teach it nothing."""

    name = "eels"
    description = ("EELS (Krishnamurthy et al. 2016): uniform exploration, position weights "
                   "from the pages' rewards (POST /reward), then the oracle's list for good.")
    # It learns from the rewards of its own uniformly random pages only (importance weights
    # of its own exploration): not from a list another policy drew, nor from judgments.
    capabilities = Capabilities(stochastic=True, policy="explore_then_exploit",
                                per_item_feedback=True, learns_from_mixed_lists=False)
    params = (
        Param("positions", int, 10, "length of the per-position feedback vector (the page)",
              minimum=1),
        Param("min_rounds", int, 500, "pages with a reward to explore at least", minimum=1),
        Param("min_eigenvalue", float, 10.0, "smallest eigenvalue of sum y y^T over the "
              "explored pages before the position weights are estimated", minimum=0.0),
        Param("ridge", float, 1.0, "lambda of the ridge regression oracle", minimum=0.0,
              exclusive_minimum=True),
    )

    def current_capabilities(self) -> Capabilities:
        """Once it exploits, it presents the oracle's list for good."""
        capabilities = super().current_capabilities()
        return capabilities.with_(stochastic=False) if getattr(self, "exploiting_", 0) \
            else capabilities

    def _initialize(self, n_features: int) -> None:
        L = self.positions
        self.YY_ = np.zeros((L, L))  # sum over the explored pages of y y^T
        self.Yr_ = np.zeros(L)  # and of r y
        self.A_ = self.ridge * np.eye(n_features)  # the oracle's weighted statistics
        self.b_ = np.zeros(n_features)
        self.theta_ = np.zeros(n_features)
        self.w_hat_ = np.zeros(L)  # the estimated position weights
        self.rounds_ = 0
        self.exploiting_ = 0

    # -- presenting ---------------------------------------------------------------------------

    def _exploit_list(self, X: np.ndarray, n_shown: int) -> np.ndarray:
        """The oracle's best results placed on the positions by decreasing weight."""
        best = argmax_ranking(X @ self.theta_)
        k = min(n_shown, len(best), self.positions)
        order = np.argsort(-self.w_hat_[:k], kind="stable")  # positions, best weight first
        ranking = best.copy()
        ranking[order] = best[:k]
        return ranking

    def _rank(self, X: np.ndarray, n_shown: int,
              rng: np.random.Generator | None) -> RankResult:
        scores = X @ self.theta_
        if self.exploiting_:
            return RankResult(ranking=self._exploit_list(X, n_shown), scores=scores)
        return RankResult(ranking=rng.permutation(X.shape[0]), scores=scores,
                          log_prob=uniform_log_prob(X.shape[0], n_shown))

    def log_probability(self, X: np.ndarray, top: np.ndarray) -> float:
        if self.exploiting_:
            return super().log_probability(X, top)
        return uniform_log_prob(self.check_features(X).shape[0], len(top))

    def _first_log_probabilities(self, X: np.ndarray) -> np.ndarray:
        if self.exploiting_:
            return super()._first_log_probabilities(X)
        return np.full(X.shape[0], -math.log(X.shape[0]) if X.shape[0] else 0.0)

    def marginals(self, X: np.ndarray, n_shown: int) -> np.ndarray | None:
        if self.exploiting_:
            return super().marginals(X, n_shown)
        n = self.check_features(X).shape[0]
        return np.full(n, min(n_shown, n) / n) if n else np.empty(0)

    def position_marginals(self, X: np.ndarray, n_shown: int) -> np.ndarray | None:
        if self.exploiting_:
            X = self.check_features(X)
            k = min(int(n_shown), X.shape[0])
            out = np.zeros((X.shape[0], k))
            out[self._exploit_list(X, k)[:k], np.arange(k)] = 1.0
            return out
        n = self.check_features(X).shape[0]
        return np.full((n, min(n_shown, n)), 1.0 / n) if n else np.empty((0, 0))

    # -- learning -----------------------------------------------------------------------------

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        k = min(feedback.n_shown, len(feedback.ranking), self.positions)
        if self.exploiting_ or k == 0 or feedback.reward is None:
            return False
        n = X.shape[0]
        shown, clicked = item_feedback(feedback, k)  # clicks, or graded values
        y = np.zeros(self.positions)
        y[:k] = clicked
        # Algorithm 2: the pages' rewards against their per-position feedback
        self.YY_ = self.YY_ + np.outer(y, y)
        self.Yr_ = self.Yr_ + float(feedback.reward) * y
        # the oracle's data: each result shown in the first k positions, its click weighted
        # by 1 / q(a) = n / k, the inverse of a uniformly random list's chance to put it there
        weight = n / k
        Xs = X[shown]
        self.A_ = self.A_ + weight * Xs.T @ Xs
        self.b_ = self.b_ + weight * clicked @ Xs
        self.rounds_ += 1
        if self.rounds_ >= self.min_rounds and \
                float(np.linalg.eigvalsh(self.YY_)[0]) >= self.min_eigenvalue:
            self.w_hat_ = np.linalg.lstsq(self.YY_, self.Yr_, rcond=None)[0]
            self.theta_ = np.linalg.solve(self.A_, self.b_)
            self.exploiting_ = 1
        return True


@hookimpl
def reranker_register_learners():
    return [EELS]

"""Greedy Projection with Exponential Restart (Delage, section 4; docs/algorithms.md,
"Plackett-Luce learners").

Online projected gradient descent in cycles ``m = 1, 2, ...`` of length ``2^(m-1)``. In cycle
``m`` the feasible set is the ball of radius ``r_m = a * (2^(m-1))^(1/4)``, its diameter
``D_m = 2 r_m``; with ``F_m`` the largest feature norm seen so far the step is
``alpha_m = D_m / (2 sqrt(2) F_m)``, and the ``k``-th round of a cycle does
``theta <- Proj_{r_m}(theta - alpha_m / sqrt(k) * grad)``. Features that appear later extend
``theta`` with zeros: the growing balls are what keep the regret guarantee as the library
grows. A round is an impression with at least one click.
"""

from __future__ import annotations

import math

import numpy as np

from .feedback import Feedback
from .learner import LinearLearner, Param, prior_steps_param


class GPERLearner(LinearLearner):
    """Base of the KLRank family: parameters ``theta_`` trained with GPER on a loss of the
    clicked items; subclasses give the loss gradient (and may sample instead of presenting
    the argmax)."""

    supports_growth = True
    params = (
        # The paper's a = 10 is for one-hot item features of norm 1. With dense features
        # min-max normalised per query (norms up to about sqrt(m)), a = 1 keeps scores on a
        # comparable scale; it was chosen on MQ2008's validation fold (S4), where it gave a
        # lower KL cost and a higher offline NDCG than 10 for all three learners.
        Param("a", float, 1.0, "radius scale of the feasible balls, r_m = a * (2^(m-1))^(1/4) "
              "(10 in the paper, for features of norm 1)", minimum=0.0, exclusive_minimum=True),
        Param("clicks", str, "all", "several clicks: 'all' (each clicked item an observation "
              "weighted 1 / #clicks) or 'last' (the last click only)", choices=("all", "last")),
        # GPER keeps theta inside a ball of radius a (2^(m-1))^(1/4): a starting ranking
        # worth many average steps would outweigh anything the ball lets it learn (on
        # MQ2008, 300 steps cost the KLRank learners 0.05-0.12 offline NDCG@10), so they
        # start from theta = 0 as in the paper, which in the service ranks in the backend's
        # order until the first update.
        prior_steps_param(0.0),
    )

    def _initialize(self, n_features: int) -> None:
        self.theta_ = np.zeros(n_features)
        self.cycle_ = 1  # m
        self.round_ = 0  # k, rounds done in the current cycle
        self.max_norm_ = 0.0  # F_m

    def _grow(self, n_features: int) -> None:
        self.theta_ = np.concatenate([self.theta_, np.zeros(n_features - len(self.theta_))])

    def learned_weights(self) -> np.ndarray:
        return self.theta_

    def scores(self, X: np.ndarray) -> np.ndarray:
        """``theta . x`` plus the starting ranking: the loss is that of the scores the
        learner ranks with, its gradient taken in ``theta``."""
        return X @ self.weights()

    def radius(self) -> float:
        return self.a * (2.0 ** (self.cycle_ - 1)) ** 0.25

    def _chosen(self, feedback: Feedback) -> np.ndarray:
        clicked = feedback.clicked
        return clicked[-1:] if self.clicks == "last" else clicked

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        chosen = self._chosen(feedback)
        if len(chosen) == 0 or X.shape[0] < 2:
            return False
        norm = float(np.sqrt((X * X).sum(axis=1)).max())
        max_norm = max(self.max_norm_, norm)
        if max_norm == 0.0:
            return False
        if self.round_ >= 2 ** (self.cycle_ - 1):  # exponential restart: the next cycle
            self.cycle_ += 1
            self.round_ = 0
        self.round_ += 1
        self.max_norm_ = max_norm
        radius = self.radius()
        step = (2.0 * radius) / (2.0 * math.sqrt(2.0) * max_norm) / math.sqrt(self.round_)
        theta = self.theta_ - step * self._gradient(X, chosen)
        length = float(np.linalg.norm(theta))
        self.theta_ = theta if length <= radius else theta * (radius / length)
        return True

    def _gradient(self, X: np.ndarray, chosen: np.ndarray) -> np.ndarray:
        """Gradient of the loss at ``theta_`` for the clicked items ``chosen`` (each weighted
        ``1 / len(chosen)``), shape ``(m,)``."""
        raise NotImplementedError


def kl_cost_gradient(X: np.ndarray, scores: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """Delage's KL cost ``-s_I + logsumexp_i(s_i)`` averaged over the chosen items ``I``:
    gradient ``-(mean x_I - E_softmax[x])``."""
    p = np.exp(scores - scores.max())
    p /= p.sum()
    return p @ X - X[chosen].mean(axis=0)

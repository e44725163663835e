"""Convex Preference Perceptron (Coactive Learning, Algorithm 5)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from reranker import hookimpl
from reranker.learners import Param
from reranker.learners.coactive import CoactiveLearner
from reranker.learners.feedback import Feedback


class ConvexPreferencePerceptron(CoactiveLearner):
    """Perceptron steps with rate ``1 / sqrt(t)``, projected onto the ball of radius ``B``."""

    name = "convex_preference_perceptron"
    description = ("Convex Preference Perceptron (Coactive Learning, Alg. 5): step 1/sqrt(t), "
                   "projection onto the ball of radius B.")
    params = CoactiveLearner.params + (
        Param("B", float, 10.0, "radius of the feasible ball", minimum=0.0,
              exclusive_minimum=True),)

    capabilities = replace(CoactiveLearner.capabilities, supports_growth=True)

    def _initialize(self, n_features: int) -> None:
        self.w_ = np.zeros(n_features)  # Algorithm 5: w_1 = 0
        self.t_ = 0

    def _grow(self, n_features: int) -> None:
        # a zero weight keeps ||w|| and every ranking as they were
        self.w_ = np.concatenate([self.w_, np.zeros(n_features - len(self.w_))])

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        delta = self.direction(X, feedback)
        if delta is None:
            return False
        # t counts the feedbacks that carry information: a round without any leaves the
        # model exactly as it was (the paper counts every round; with simulated coactive
        # users the two agree, since every round before the optimum is informative).
        self.t_ += 1
        # Algorithm 5: wbar = w_t + eta_t (phi(ybar) - phi(y)), eta_t = 1/sqrt(t);
        # w_{t+1} = argmin_{||u|| <= B} ||u - wbar|| = wbar * min(1, B / ||wbar||).
        wbar = self.w_ + delta / math.sqrt(self.t_)
        length = float(np.linalg.norm(wbar))
        self.w_ = wbar if length <= self.B else wbar * (self.B / length)
        return True


@hookimpl
def reranker_register_learners():
    return [ConvexPreferencePerceptron]

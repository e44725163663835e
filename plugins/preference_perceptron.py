"""Preference Perceptron (Shivaswamy & Joachims, Coactive Learning, Algorithm 1)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from reranker import hookimpl
from reranker.learners.coactive import CoactiveLearner
from reranker.learners.feedback import Feedback


class PreferencePerceptron(CoactiveLearner):
    """Presents ``argmax_y w . phi(q, y)`` (its shown pairs perturbed unless
    ``swap_probability`` is 0) and moves ``w`` toward the improved ranking."""

    name = "preference_perceptron"
    description = ("Preference Perceptron (Coactive Learning, Alg. 1): the argmax ranking with "
                   "shown pairs perturbed (Raman et al. 2013), w += phi(ybar) - phi(y) on every "
                   "informative feedback.")

    capabilities = replace(CoactiveLearner.capabilities, supports_growth=True)

    def _initialize(self, n_features: int) -> None:
        # Coactive Learning, Algorithm 1: w_1 = 0 (the starting ranking is kept apart, see
        # LinearLearner).
        self.w_ = np.zeros(n_features)
        self.n_updates_ = 0

    def _grow(self, n_features: int) -> None:
        # A new feature starts without influence: a zero weight changes no ranking.
        self.w_ = np.concatenate([self.w_, np.zeros(n_features - len(self.w_))])

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        delta = self.direction(X, feedback)
        if delta is None:
            return False
        # Coactive Learning, Algorithm 1: w_{t+1} = w_t + phi(x_t, ybar_t) - phi(x_t, y_t).
        self.w_ += delta
        self.n_updates_ += 1
        return True


@hookimpl
def reranker_register_learners():
    return [PreferencePerceptron]

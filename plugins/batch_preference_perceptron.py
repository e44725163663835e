"""Batch Preference Perceptron (Shivaswamy & Joachims, Coactive Learning, Algorithm 2)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from reranker import hookimpl
from reranker.learners import Param
from reranker.learners.coactive import CoactiveLearner
from reranker.learners.feedback import Feedback


class BatchPreferencePerceptron(CoactiveLearner):
    """Presents with the last applied ``w``; accumulates ``phi(ybar) - phi(y)`` and applies the
    sum every ``batch_size`` informative feedbacks (mini-batch updates, for systems that
    cannot update after every impression)."""

    name = "batch_preference_perceptron"
    description = ("Batch Preference Perceptron (Coactive Learning, Alg. 2): accumulates the "
                   "perceptron steps and applies them every batch_size feedbacks.")
    params = CoactiveLearner.params + (
        Param("batch_size", int, 10, "informative feedbacks per applied update", minimum=1),)

    capabilities = replace(CoactiveLearner.capabilities, supports_growth=True)

    def _initialize(self, n_features: int) -> None:
        self.w_ = np.zeros(n_features)  # Algorithm 2: w_1 = 0
        self.pending_ = np.zeros(n_features)  # sum of D since the last applied update
        self.pending_count_ = 0

    def _grow(self, n_features: int) -> None:
        extra = np.zeros(n_features - len(self.w_))  # new features start without influence
        self.w_ = np.concatenate([self.w_, extra])
        self.pending_ = np.concatenate([self.pending_, extra])

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        delta = self.direction(X, feedback)
        if delta is None:
            return False
        # A batch holds batch_size feedbacks that carry information: a round without any
        # leaves the model exactly as it was (the paper counts every round; with
        # simulated coactive users the two agree).
        self.pending_ += delta
        self.pending_count_ += 1
        if self.pending_count_ == self.batch_size:
            # Algorithm 2: w_{l+1} = w_l + sum over the batch of phi(ybar_j) - phi(y_j)
            self.w_ = self.w_ + self.pending_
            self.pending_ = np.zeros_like(self.pending_)
            self.pending_count_ = 0
        return True


@hookimpl
def reranker_register_learners():
    return [BatchPreferencePerceptron]

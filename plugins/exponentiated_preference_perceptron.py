"""Exponentiated Preference Perceptron (Coactive Learning, Algorithm 4)."""

from __future__ import annotations

import math

import numpy as np

from reranker import hookimpl
from reranker.learners.coactive import CoactiveLearner
from reranker.learners.feedback import Feedback


class ExponentiatedPreferencePerceptron(CoactiveLearner):
    """Multiplicative updates on the doubled feature map ``[phi; -phi]`` so that the weights
    stay positive and sum to one; ranks by ``(w+ - w-) . x``."""

    name = "exponentiated_preference_perceptron"
    description = ("Exponentiated Preference Perceptron (Coactive Learning, Alg. 4): "
                   "multiplicative updates on [phi; -phi], learning rate 1/(2 S sqrt(t)).")

    def _initialize(self, n_features: int) -> None:
        # Coactive Learning, Algorithm 4 (docs/algorithms.md): we_1 = 1/(2m) on all 2m
        # coordinates of the doubled map. Kept as logarithms: multiplicative updates would
        # underflow tiny weights to zero.
        self.log_we_ = np.full(2 * n_features, -np.log(2 * n_features)) if n_features \
            else np.zeros(0)
        self.t_ = 0  # informative feedbacks so far
        self.S_ = 0.0  # running maximum of ||phi||_inf

    def learned_weights(self) -> np.ndarray:
        """``w+ - w-``: the weights on the original feature map."""
        we = np.exp(self.log_we_)
        m = len(we) // 2
        return we[:m] - we[m:]

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        improved = self.improved(feedback)
        if improved is None:
            return False
        fmap = self.feature_map
        better, worse = fmap.phi(X, improved), fmap.phi(X, feedback.ranking)
        self.S_ = max(self.S_, float(np.abs(better).max()), float(np.abs(worse).max()))
        if self.S_ == 0.0:
            return False
        # t counts the feedbacks that carry information: a round without any leaves the
        # model exactly as it was (the paper counts every round; with simulated coactive
        # users the two agree, since every round before the optimum is informative).
        self.t_ += 1
        delta = self.direction(X, feedback, improved)  # better - worse, pairs weighted
        doubled = np.concatenate([delta, -delta])  # De = phie(ybar) - phie(y)
        # Algorithm 4 with an anytime rate (docs/algorithms.md): eta_t = 1 / (2 S sqrt(t));
        # we_{t+1,i} = we_{t,i} exp(eta_t De_i) / Z_t, in logs: log Z_t = logsumexp.
        eta = 1.0 / (2.0 * self.S_ * math.sqrt(self.t_))
        log_w = self.log_we_ + eta * doubled
        top = log_w.max()
        self.log_we_ = log_w - (top + math.log(float(np.exp(log_w - top).sum())))
        return True


@hookimpl
def reranker_register_learners():
    return [ExponentiatedPreferencePerceptron]

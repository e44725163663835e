"""Second-order Preference Perceptron (Coactive Learning, Algorithm 6)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from reranker import hookimpl
from reranker.learners import Param
from reranker.learners.coactive import CoactiveLearner
from reranker.learners.feedback import Feedback


def project_in_metric(A: np.ndarray, wbar: np.ndarray, radius: float) -> np.ndarray:
    """``argmin_{||u|| <= B} (wbar - u)^T A (wbar - u)`` for a positive definite ``A``.

    Inside the ball the answer is ``wbar``. Otherwise it is ``u(mu) = (A + mu I)^-1 A wbar``
    with ``mu > 0`` such that ``||u(mu)|| = B``: with ``A = Q diag(lam) Q^T`` and
    ``c = Q^T wbar``, ``||u(mu)||^2 = sum (lam_i c_i / (lam_i + mu))^2`` falls monotonically
    in ``mu``, so a bracketing bisection finds it."""
    if np.linalg.norm(wbar) <= radius:
        return wbar
    lam, Q = np.linalg.eigh(A)
    lam = np.maximum(lam, 0.0)
    c = Q.T @ wbar

    def norm(mu: float) -> float:
        return float(np.linalg.norm(lam * c / (lam + mu)))

    lo, hi = 0.0, max(float(lam.max()), 1e-12)
    while norm(hi) > radius:
        hi *= 2.0
    for _ in range(200):  # bisection to machine precision
        mid = 0.5 * (lo + hi)
        if norm(mid) > radius:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    return Q @ (lam * c / (lam + hi))


class SecondOrderPreferencePerceptron(CoactiveLearner):
    """Newton-style steps ``A_t^-1 D_t`` with ``A_t = eps I + gamma sum D D^T`` (kept inverted
    by Sherman-Morrison rank-one updates), projected onto the ball of radius ``B`` in the
    metric of ``A_t``."""

    name = "second_order_preference_perceptron"
    description = ("Second-order Preference Perceptron (Coactive Learning, Alg. 6): steps "
                   "A^-1 D with Sherman-Morrison updates, A-norm projection onto radius B.")
    params = CoactiveLearner.params + (
        Param("gamma", float, 1.0, "gamma = lambda / G, weight of each D D^T in A", minimum=0.0,
              exclusive_minimum=True),
        Param("epsilon", float, 1.0, "A_0 = epsilon I", minimum=0.0, exclusive_minimum=True),
        Param("B", float, 10.0, "radius of the feasible ball", minimum=0.0,
              exclusive_minimum=True),
    )

    capabilities = replace(CoactiveLearner.capabilities, supports_growth=True)

    def _initialize(self, n_features: int) -> None:
        self.w_ = np.zeros(n_features)  # Algorithm 6: w_1 = 0
        self.A_ = self.epsilon * np.eye(n_features)  # A_0 = eps I
        self.A_inv_ = np.eye(n_features) / self.epsilon

    def _grow(self, n_features: int) -> None:
        # New features: zero weight, and A_0 = epsilon I on their block (as if they had been
        # there from the start with no feedback touching them).
        old = len(self.w_)
        extra = n_features - old
        self.w_ = np.concatenate([self.w_, np.zeros(extra)])
        A = self.epsilon * np.eye(n_features)
        A[:old, :old] = self.A_
        A_inv = np.eye(n_features) / self.epsilon
        A_inv[:old, :old] = self.A_inv_
        self.A_, self.A_inv_ = A, A_inv

    def carry_over(self, old, source) -> None:
        super().carry_over(old, source)
        # A dropped feature's rows leave A's inverse: the kept block of A^-1 is not the
        # inverse of the kept block of A, so invert again.
        self.A_inv_ = np.linalg.inv(self.A_)

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        delta = self.direction(X, feedback)
        if delta is None:
            return False
        g = self.gamma
        # Algorithm 6: A_t = A_{t-1} + gamma D D^T; Sherman-Morrison for the inverse:
        # (A + g D D^T)^-1 = A^-1 - g (A^-1 D)(A^-1 D)^T / (1 + g D^T A^-1 D)
        v = self.A_inv_ @ delta
        self.A_inv_ = self.A_inv_ - np.outer(v, v) * (g / (1.0 + g * float(delta @ v)))
        self.A_ = self.A_ + g * np.outer(delta, delta)
        wbar = self.w_ + self.A_inv_ @ delta  # wbar = w_t + A_t^-1 D_t
        self.w_ = project_in_metric(self.A_, wbar, self.B)
        return True


@hookimpl
def reranker_register_learners():
    return [SecondOrderPreferencePerceptron]

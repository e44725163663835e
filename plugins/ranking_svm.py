"""Ranking SVM, retrained on the coactive preference pairs (the baseline of Shivaswamy &
Joachims, Coactive Learning, section 6)."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from typing import Any

import numpy as np

from reranker import hookimpl
from reranker.learners import Param
from reranker.learners.coactive import CoactiveLearner
from reranker.learners.feedback import Feedback

#: The regularisation constants cross-validation chooses from.
C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)
#: Below this many pairs, C is fixed at 100 (too few for five folds to say anything).
FEW_PAIRS = 50


def fit_pairwise_svm(pairs: np.ndarray, C: float) -> np.ndarray:
    """``w`` minimising ``|w|^2 / 2 + C sum_i max(0, 1 - w . d_i)`` over preference vectors
    ``d_i`` (a linear SVM on ``d_i`` labelled +1 and ``-d_i`` labelled -1, no intercept:
    the problem is symmetric)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    samples = np.vstack([pairs, -pairs])
    labels = np.concatenate([np.ones(len(pairs)), -np.ones(len(pairs))])
    svm = LinearSVC(C=C, loss="hinge", fit_intercept=False, dual=True, max_iter=5000,
                    random_state=0)
    with warnings.catch_warnings():  # a capped iteration count is an approximate optimum
        warnings.simplefilter("ignore", ConvergenceWarning)
        svm.fit(samples, labels)
    return svm.coef_.ravel().copy()


def cross_validated_c(pairs: np.ndarray, folds: int = 5) -> float:
    """The C of :data:`C_GRID` whose SVM orders the most held-out pairs right over
    ``folds``-fold cross-validation (the smallest on a tie)."""
    order = np.random.default_rng(0).permutation(len(pairs))
    parts = np.array_split(order, folds)
    best, best_c = -1.0, C_GRID[0]
    for C in C_GRID:
        right = 0
        for k in range(folds):
            held = parts[k]
            kept = np.concatenate([parts[j] for j in range(folds) if j != k])
            w = fit_pairwise_svm(pairs[kept], C)
            right += int(np.sum(pairs[held] @ w > 0))
        if right > best:
            best, best_c = right, C
    return best_c


class RankingSVM(CoactiveLearner):
    """Presents the argmax of ``w . x`` (with the perceptrons' perturbed pairs), collects
    each feedback's preference ``phi(ybar) - phi(y)``, and refits ``w`` as a Ranking SVM on
    all of them whenever their number has grown by ``refit_growth``, with ``C`` chosen by
    five-fold cross-validation (fixed at 100 below 50 pairs)."""

    name = "ranking_svm"
    description = ("Ranking SVM retrained on the coactive preferences phi(ybar) - phi(y) "
                   "(Coactive Learning's baseline): refit on 10% more pairs, C by 5-fold CV.")
    #: Refits its weights on every pair it holds: no query's share of them to keep.
    sums_updates = False
    params = CoactiveLearner.params + (
        Param("refit_growth", float, 0.1, "refit when the pairs have grown by this share "
              "since the last fit", minimum=0.0, exclusive_minimum=True),
        Param("max_pairs", int, 20000, "pairs kept (the newest); they are saved with the "
              "model", minimum=FEW_PAIRS),
    )
    capabilities = replace(CoactiveLearner.capabilities, supports_growth=True)

    def _initialize(self, n_features: int) -> None:
        self.w_ = np.zeros(n_features)
        self.pairs_ = np.zeros((0, n_features))
        self.fitted_pairs_ = 0  # pairs at the last fit
        self.C_ = 100.0

    def _grow(self, n_features: int) -> None:
        extra = n_features - len(self.w_)
        self.w_ = np.concatenate([self.w_, np.zeros(extra)])
        self.pairs_ = np.hstack([self.pairs_, np.zeros((len(self.pairs_), extra))])

    def carry_over(self, old: RankingSVM, source) -> None:
        pairs = old.get_state()["pairs_"]
        super().carry_over(old, source)
        source = np.asarray(source, dtype=np.intp)
        kept = source >= 0
        mapped = np.zeros((len(pairs), self.n_features_in_))
        mapped[:, kept] = pairs[:, source[kept]]
        self.pairs_, self._stored = mapped, len(mapped)
        self.fitted_pairs_ = min(self.fitted_pairs_, len(mapped))

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        state["pairs_"] = state["pairs_"][: self._count()].copy()
        return state

    def set_state(self, state) -> None:
        state = dict(state)
        pairs = np.asarray(state.pop("pairs_", np.zeros((0, 0))), dtype=np.float64)
        n = int(state.get("n_features_in_", 0))
        super().set_state({**state, "pairs_": np.zeros((0, n))})
        if pairs.size == 0:
            pairs = np.zeros((0, n))
        if pairs.ndim != 2 or pairs.shape[1] != n or not np.all(np.isfinite(pairs)):
            raise ValueError(f"state 'pairs_' of learner {self.name!r} must be finite rows of "
                             f"{n} features, got shape {pairs.shape}")
        self.pairs_ = pairs
        self._stored = len(pairs)

    def _count(self) -> int:
        return getattr(self, "_stored", len(self.pairs_))

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        delta = self.direction(X, feedback)
        if delta is None:
            return False
        count = self._count()
        if count == len(self.pairs_):  # room for more, doubling (amortised appends)
            grown = np.zeros((max(16, 2 * count), self.pairs_.shape[1]))
            grown[:count] = self.pairs_[:count]
            self.pairs_ = grown
        self.pairs_[count] = delta
        count += 1
        if count > self.max_pairs:  # forget the oldest
            self.pairs_ = self.pairs_[count - self.max_pairs: count].copy()
            count = self.max_pairs
            self.fitted_pairs_ = min(self.fitted_pairs_, count)
        self._stored = count
        if count >= max(1, math.ceil(self.fitted_pairs_ * (1.0 + self.refit_growth))):
            pairs = self.pairs_[:count]
            self.C_ = 100.0 if count < FEW_PAIRS else cross_validated_c(pairs)
            self.w_ = fit_pairwise_svm(pairs, self.C_)
            self.fitted_pairs_ = count
        return True


@hookimpl
def reranker_register_learners():
    return [RankingSVM]

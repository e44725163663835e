"""Random ranking: the floor every learner must beat."""

from __future__ import annotations

import numpy as np

from reranker import hookimpl
from reranker.feedback import Feedback
from reranker.learner import Learner, RankResult


class RandomRanking(Learner):
    """A uniformly random permutation of the candidates on every request; learns nothing."""

    name = "random"
    description = "Random ranking (a floor): a uniformly random permutation, never learns."
    stochastic = True

    def _initialize(self, n_features: int) -> None:
        pass

    def _rank(self, X: np.ndarray, n_shown: int, rng: np.random.Generator) -> RankResult:
        n = X.shape[0]
        keys = rng.random(n)
        ranking = np.argsort(keys)
        # Every ordered top-k of a uniform permutation has probability (n - k)! / n!.
        log_prob = -float(np.sum(np.log(np.arange(n - n_shown + 1, n + 1)))) if n else 0.0
        return RankResult(ranking=ranking, scores=-keys, log_prob=log_prob,
                          propensities=np.full(n, n_shown / n) if n else np.empty(0))

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        return False


@hookimpl
def reranker_register_learners():
    return [RandomRanking]

"""Random ranking: the floor every learner must beat."""

from __future__ import annotations

import numpy as np

from reranker import hookimpl
from reranker.learners import Capabilities, Learner, RankResult
from reranker.learners.feedback import Feedback
from reranker.learners.policies import uniform_log_prob


class RandomRanking(Learner):
    """A uniformly random permutation of the candidates on every request; learns nothing."""

    name = "random"
    description = "Random ranking (a floor): a uniformly random permutation, never learns."
    capabilities = Capabilities(stochastic=True, policy="uniform", floor=True)

    def _initialize(self, n_features: int) -> None:
        pass

    def _rank(self, X: np.ndarray, n_shown: int, rng: np.random.Generator) -> RankResult:
        n = X.shape[0]
        keys = rng.random(n)
        ranking = keys.argsort()
        # Every ordered top-k of a uniform permutation has probability (n - k)! / n!.
        return RankResult(ranking=ranking, scores=-keys, log_prob=uniform_log_prob(n, n_shown),
                          propensities=np.full(n, n_shown / n) if n else np.empty(0))

    def log_probability(self, X: np.ndarray, top: np.ndarray) -> float:
        return uniform_log_prob(X.shape[0], len(top))

    def _first_log_probabilities(self, X: np.ndarray) -> np.ndarray:
        return np.full(X.shape[0], -np.log(X.shape[0]) if X.shape[0] else 0.0)

    def marginals(self, X: np.ndarray, n_shown: int) -> np.ndarray:
        n = self.check_features(X).shape[0]
        return np.full(n, min(n_shown, n) / n) if n else np.empty(0)

    def position_marginals(self, X: np.ndarray, n_shown: int) -> np.ndarray:
        n = self.check_features(X).shape[0]
        return np.full((n, min(n_shown, n)), 1.0 / n) if n else np.empty((0, 0))

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        return False


@hookimpl
def reranker_register_learners():
    return [RandomRanking]

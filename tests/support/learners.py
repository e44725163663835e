"""Learners written for the tests: a correct one, which the conformance tests break in one way
each, and a Plackett-Luce sampler that does not say each candidate's chance of being shown."""

import numpy as np

from reranker.learners.base import Learner, RankResult, argmax_ranking
from reranker.learners.capabilities import Capabilities
from reranker.learners.policies import (
    gumbel_top_k,
    plackett_luce_log_prob,
    plackett_luce_prefix_log_prob,
)


class Good(Learner):
    name = "good"
    description = "a correct learner"

    def _initialize(self, n):
        self.w_ = np.zeros(n)

    def _rank(self, X, n_shown, rng):
        s = X @ self.w_
        return RankResult(ranking=argmax_ranking(s), scores=s)

    def _update(self, X, fb):
        if not fb.informative:
            return False
        self.w_ = self.w_ + self.feature_map.phi_difference(X, fb.improved, fb.ranking)
        return True


class NoMarginals(Good):
    """A Plackett-Luce sampler that does not say each candidate's chance of being shown."""

    name = "no_marginals"
    capabilities = Capabilities(stochastic=True)

    def _rank(self, X, n_shown, rng):
        s = X @ self.w_
        ranking = gumbel_top_k(s, rng)
        return RankResult(ranking=ranking, scores=s,
                          log_prob=plackett_luce_log_prob(s, ranking, n_shown))

    def log_probability(self, X, top):
        return plackett_luce_prefix_log_prob(X @ self.w_, top)

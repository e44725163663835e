"""NoRegret KLRank (Delage, section 4): Plackett-Luce rankings, GPER on the KL cost."""

from __future__ import annotations

import numpy as np

from reranker import hookimpl
from reranker.gper import GPERLearner, kl_cost_gradient
from reranker.learner import RankResult
from reranker.policies import (
    gumbel_top_k,
    log_softmax,
    plackett_luce_log_prob,
    plackett_luce_prefix_log_prob,
)


class NoRegretKLRank(GPERLearner):
    """Presents a Plackett-Luce sample with scores ``theta . x`` (Gumbel-top-k) and logs its
    probability; learns ``theta`` with GPER on the KL cost of the clicked items."""

    name = "noregret_klrank"
    description = ("NoRegret KLRank (Delage 2009): samples Plackett-Luce rankings and logs their "
                   "probability; GPER on the KL cost, growing balls; supports new features.")
    stochastic = True
    policy = "plackett_luce"

    def _rank(self, X, n_shown, rng) -> RankResult:
        scores = self.scores(X)
        ranking = gumbel_top_k(scores, rng)
        return RankResult(ranking=ranking, scores=scores,
                          log_prob=plackett_luce_log_prob(scores, ranking, n_shown))

    def _gradient(self, X, chosen) -> np.ndarray:
        # Delage, KL cost: cost(theta) = -s_I + logsumexp_i(s_i)
        return kl_cost_gradient(X, self.scores(X), chosen)

    def log_probability(self, X, top) -> float:
        return plackett_luce_prefix_log_prob(self.scores(self.check_features(X)), top)

    def _first_log_probabilities(self, X) -> np.ndarray:
        return log_softmax(self.scores(X))


@hookimpl
def reranker_register_learners():
    return [NoRegretKLRank]

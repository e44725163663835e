"""NoRegret KLRank (Delage, section 4): Plackett-Luce rankings, GPER on the KL cost."""

from __future__ import annotations

import numpy as np

from reranker import hookimpl
from reranker.learners import RankResult
from reranker.learners.gper import GPERLearner, kl_cost_gradient
from reranker.learners.policies import PlackettLucePolicy


class NoRegretKLRank(PlackettLucePolicy, GPERLearner):
    """Presents a Plackett-Luce sample with scores ``theta . x`` (Gumbel-top-k) and logs its
    probability; learns ``theta`` with GPER on the KL cost of the clicked items."""

    name = "noregret_klrank"
    description = ("NoRegret KLRank (Delage 2009): samples Plackett-Luce rankings and logs their "
                   "probability; GPER on the KL cost, growing balls; supports new features.")

    def policy_scores(self, X) -> np.ndarray:
        return self.scores(X)

    def _rank(self, X, n_shown, rng) -> RankResult:
        return self._present(self.scores(X), n_shown, rng)

    def _gradient(self, X, chosen) -> np.ndarray:
        # Delage, KL cost: cost(theta) = -s_I + logsumexp_i(s_i)
        return kl_cost_gradient(X, self.scores(X), chosen)


@hookimpl
def reranker_register_learners():
    return [NoRegretKLRank]

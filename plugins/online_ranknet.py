"""Online RankNet (Delage, section 5.1): a pairwise logistic loss, GPER, argmax."""

from __future__ import annotations

import numpy as np

from reranker import hookimpl
from reranker.learners.gper import ARGMAX_PARAMS, GPERLearner


class OnlineRankNet(GPERLearner):
    """The clicked item is preferred to every other result the user saw (``choice_set``
    ``shown``; every other candidate with ``all``, as in the paper); RankNet's logistic loss
    on those pairs, normalised by their number, trained with GPER; presents the argmax."""

    name = "online_ranknet"
    description = ("Online RankNet (Delage 2009): pairwise logistic loss of the clicked item "
                   "against each other result shown, GPER updates, argmax; supports new features.")
    params = ARGMAX_PARAMS

    def _gradient(self, X, chosen) -> np.ndarray:
        # Delage, section 5.1: loss = 1/(n-1) sum_{I != I_t} [-s_It + log(exp(s_It) + exp(s_I))]
        # d/dtheta = -1/(n-1) sum_I sigmoid(s_I - s_It) (x_It - x_I), averaged over clicks.
        scores = self.scores(X)
        n = X.shape[0]
        grad = np.zeros(X.shape[1])
        for item in chosen:
            # sigmoid(s_I - s_It), as 0.5 (1 + tanh(z / 2)): no overflow for large scores
            weights = 0.5 * (1.0 + np.tanh(0.5 * (scores - scores[item])))
            weights[item] = 0.0
            grad -= (weights.sum() * X[item] - weights @ X) / (n - 1)
        return grad / len(chosen)


@hookimpl
def reranker_register_learners():
    return [OnlineRankNet]

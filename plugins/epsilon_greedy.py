"""epsilon-Greedy over ranked lists with a regression oracle (Krishnamurthy, Agarwal & Dudik,
*Contextual Semibandits via Supervised Learning Oracles*, NIPS 2016, the baseline of section
5)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from reranker import hookimpl
from reranker.learners import Capabilities, Param, RankResult, argmax_ranking
from reranker.learners.feedback import Feedback
from reranker.learners.oracles import OracleLearner, oracle_params
from reranker.learners.policies import uniform_log_prob


class EpsilonGreedy(OracleLearner):
    """With probability ``epsilon`` shows a uniformly random list, else the list of the
    regression oracle's leader: items ranked by ``f(x)``, ``f`` a regression of each shown
    item's feedback on its features, weighted by the inverse of its chance of being shown (an
    unbiased estimate of every item's reward), refitted at doubling epochs
    (:class:`reranker.learners.oracles.OracleLearner`)."""

    name = "epsilon_greedy"
    description = ("epsilon-Greedy (Krishnamurthy et al. 2016): a uniformly random list with "
                   "probability epsilon, else the oracle's; importance-weighted refits.")
    params = (
        Param("epsilon", float, 0.1, "chance of a uniformly random list", minimum=0.0,
              maximum=1.0),
        *oracle_params(),
    )
    capabilities = replace(OracleLearner.capabilities, stochastic=True, policy="epsilon_greedy")

    def current_capabilities(self) -> Capabilities:
        """Without exploration (``epsilon`` 0) it presents the oracle's list."""
        capabilities = super().current_capabilities()
        return capabilities if self.epsilon > 0 else capabilities.with_(stochastic=False)

    def _greedy(self, X: np.ndarray) -> np.ndarray:
        return argmax_ranking(self._leader_scores(X))

    def _rank(self, X: np.ndarray, n_shown: int,
              rng: np.random.Generator | None) -> RankResult:
        scores = self._leader_scores(X)
        greedy = argmax_ranking(scores)
        explore = self.epsilon > 0 and rng.random() < self.epsilon
        ranking = rng.permutation(X.shape[0]) if explore else greedy
        chance = self._marginals(greedy, X.shape[0], n_shown)
        log_prob = self._list_log_prob(greedy, ranking[:n_shown], X.shape[0]) \
            if self.epsilon > 0 else None
        # (each candidate's chance of being shown, logged with the impression, is the
        # weight of its feedback)
        return RankResult(ranking=ranking, scores=scores, log_prob=log_prob,
                          propensities=chance)

    def _marginals(self, greedy: np.ndarray, n: int, k: int) -> np.ndarray:
        k = min(k, n)
        out = np.full(n, self.epsilon * k / n if n else 0.0)
        out[greedy[:k]] += 1.0 - self.epsilon
        return out

    def _list_log_prob(self, greedy: np.ndarray, top: np.ndarray, n: int) -> float:
        p = self.epsilon * math.exp(uniform_log_prob(n, len(top)))
        if np.array_equal(top, greedy[: len(top)]):
            p += 1.0 - self.epsilon
        return math.log(p) if p > 0 else -math.inf

    def log_probability(self, X: np.ndarray, top: np.ndarray) -> float:
        X = self.check_features(X)
        return self._list_log_prob(self._greedy(X), np.asarray(top, dtype=np.intp),
                                   X.shape[0])

    def _first_log_probabilities(self, X: np.ndarray) -> np.ndarray:
        n = X.shape[0]
        out = np.full(n, self.epsilon / n if n else 0.0)
        if n:
            out[self._greedy(X)[0]] += 1.0 - self.epsilon
        with np.errstate(divide="ignore"):
            return np.log(out)

    def marginals(self, X: np.ndarray, n_shown: int) -> np.ndarray:
        X = self.check_features(X)
        return self._marginals(self._greedy(X), X.shape[0], n_shown)

    def position_marginals(self, X: np.ndarray, n_shown: int) -> np.ndarray:
        X = self.check_features(X)
        n = X.shape[0]
        k = min(int(n_shown), n)
        out = np.full((n, k), self.epsilon / n if n else 0.0)
        out[self._greedy(X)[:k], np.arange(k)] += 1.0 - self.epsilon
        return out

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        k = min(feedback.n_shown, len(feedback.ranking))
        if k == 0:
            return False
        self._learn_page(X, feedback, k)
        if self._epoch_due():  # an epoch's end: refit the oracle
            self._fit_leader()
        return True


@hookimpl
def reranker_register_learners():
    return [EpsilonGreedy]

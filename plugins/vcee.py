"""VCEE: Variance-Constrained Explore-Exploit for semibandits with known position weights
(Krishnamurthy, Agarwal & Dudik, *Contextual Semibandits via Supervised Learning Oracles*,
NIPS 2016, Algorithm 1 and its optimisation problem OP; docs/algorithms.md, "VCEE")."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from reranker import hookimpl
from reranker.learners import Param, RankResult, argmax_ranking
from reranker.learners.feedback import Feedback
from reranker.learners.oracles import (
    POSITION_WEIGHTS,
    OracleLearner,
    oracle_params,
    page_lists,
    position_weights,
    smoothing,
)
from reranker.learners.policies import uniform_log_prob

#: Algorithm 1's psi, which the paper's experiments set to 1 (appendix C.1)
PSI = 1.0
#: the most policies Q keeps across epochs (each costs one scoring of the candidates)
MAX_POLICIES = 32


class VCEE(OracleLearner):
    """Shows, with probability ``mu_t``, a uniformly random list; otherwise the list of a
    policy drawn from a sparse distribution ``Q`` over the oracle's policies, whose missing
    mass goes to the leader (the empirically best policy). At doubling epochs the leader is
    refitted and ``Q`` re-solved by coordinate descent (the "Taming the Monster" scheme of
    Agarwal et al. 2014 with the semibandit constraints): low empirical regret, and for every
    policy an estimated variance of its reward bounded by how good it looks, so that every
    policy that may be the best keeps being explored, and clearly bad ones stop.

    The feedback of each shown result (its click, or its graded value) and the page's known
    position weights (``position_weights``) define the reward of a page,
    ``sum_l w_l y(a_l)``, over its first ``positions`` results."""

    name = "vcee"
    description = ("VCEE (Krishnamurthy et al. 2016): a distribution over the oracle's "
                   "policies with variance constraints, smoothed by mu_t; known weights.")
    capabilities = replace(
        OracleLearner.capabilities, stochastic=True, policy="vcee",
        variable_length_state=OracleLearner.capabilities.variable_length_state + (
            "policies_", "policy_sizes_", "policy_weights_"))
    keeps_pages = True
    params = (
        Param("smoothing", float, 1.0, "c of the smoothing mu_t = c / sqrt(K t): the chance "
              "of a uniformly random list, K candidates, t pages learned from", minimum=0.0),
        Param("positions", int, 10, "length of the page whose reward counts (L)", minimum=1),
        Param("position_weights", str, "dcg", "the known weights w of the positions: dcg "
              "(1 / log2(1 + position)) or uniform (the sum of the shown results' feedback)",
              choices=POSITION_WEIGHTS),
        Param("iterations", int, 20, "most coordinate-descent steps per solve of OP",
              minimum=1),
        *oracle_params(),
    )

    def _initialize(self, n_features: int) -> None:
        super()._initialize(n_features)
        # Q: the policies (flat arrays, one after another) and their weights
        self.policies_ = np.zeros(0)
        self.policy_sizes_ = np.zeros(0, dtype=np.int64)
        self.policy_weights_ = np.zeros(0)

    # -- the distribution over lists ----------------------------------------------------------

    def _mixture(self) -> tuple[list[np.ndarray], np.ndarray]:
        """The policies with their chances: ``Q`` and the leader with the mass ``Q`` lacks."""
        cached = getattr(self, "_mixed", None)
        if cached is not None and cached[0] is self.policies_ and cached[1] is self.theta_ \
                and cached[2] is self.policy_weights_:
            return cached[3]
        cuts = np.cumsum(self.policy_sizes_)[:-1]
        policies = np.split(self.policies_, cuts) if len(self.policy_sizes_) else []
        weights = np.append(self.policy_weights_, max(0.0, 1.0 - self.policy_weights_.sum()))
        mixture = [*policies, self.theta_], weights
        self._mixed = (self.policies_, self.theta_, self.policy_weights_, mixture)
        return mixture

    def _policy_scores(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every policy with a chance: its scores of the candidates (a column each) and its
        chance."""
        policies, weights = self._mixture()
        keep = np.flatnonzero(weights > 0)
        if self.oracle == "linear":  # every policy scored in one product
            scores = X @ np.stack([policies[i] for i in keep], axis=1)
        else:
            oracle = self._oracle()
            scores = np.stack([oracle.scores(policies[i], X) for i in keep], axis=1)
        return scores, weights[keep]

    def _lists(self, X: np.ndarray, k: int,
               scored: tuple[np.ndarray, np.ndarray] | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Each policy's top ``k`` (rows) and its chance."""
        scores, weights = scored if scored is not None else self._policy_scores(X)
        # argmax_ranking of every column: best first, ties in the backend's order
        tops = (-scores).argsort(axis=0, kind="stable")[:k].T
        return np.ascontiguousarray(tops), weights

    def _mu(self, n: int) -> float:
        return smoothing(self.smoothing, n, self.rounds_)

    def _position_chances(self, X: np.ndarray, k: int,
                          lists: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        n = X.shape[0]
        mu = self._mu(n)
        tops, weights = lists if lists is not None else self._lists(X, k)
        at = np.full((n, k), mu / n)  # Eq. (3): mu_t of a uniformly random list
        for top, weight in zip(tops, weights, strict=True):
            at[top, np.arange(k)] += (1.0 - mu) * weight
        return at

    def _rank(self, X: np.ndarray, n_shown: int,
              rng: np.random.Generator | None) -> RankResult:
        n = X.shape[0]
        k = min(n_shown, n)
        scored = self._policy_scores(X)
        if rng.random() < self._mu(n):
            ranking = rng.permutation(n)
        else:  # a policy drawn by its chance; its list from the very scores the chances use
            scores, weights = scored
            pick = rng.choice(len(weights), p=weights / weights.sum())
            ranking = argmax_ranking(scores[:, pick])
        lists = self._lists(X, k, scored)
        at = self._position_chances(X, k, lists)
        leader_kept = self._mixture()[1][-1] > 0  # then the leader is the last column
        return RankResult(ranking=ranking,
                          scores=scored[0][:, -1] if leader_kept else self._leader_scores(X),
                          log_prob=self._list_log_prob(X, ranking[:k], lists),
                          propensities=np.clip(at.sum(axis=1), 0.0, 1.0),
                          shown_propensities=at[ranking[:k], np.arange(k)])

    def _list_log_prob(self, X: np.ndarray, top: np.ndarray,
                       lists: tuple[np.ndarray, np.ndarray] | None = None) -> float:
        n, k = X.shape[0], len(top)
        mu = self._mu(n)
        tops, weights = lists if lists is not None else self._lists(X, k)
        p = mu * math.exp(uniform_log_prob(n, k))
        p += (1.0 - mu) * float(weights[(tops == top).all(axis=1)].sum())
        return math.log(p) if p > 0 else -math.inf

    def log_probability(self, X: np.ndarray, top: np.ndarray) -> float:
        X = self.check_features(X)
        return self._list_log_prob(X, np.asarray(top, dtype=np.intp))

    def _first_log_probabilities(self, X: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log(self._position_chances(X, 1)[:, 0]) if X.shape[0] else np.empty(0)

    def marginals(self, X: np.ndarray, n_shown: int) -> np.ndarray:
        X = self.check_features(X)
        return np.clip(self._position_chances(X, min(n_shown, X.shape[0])).sum(axis=1),
                       0.0, 1.0)

    def position_marginals(self, X: np.ndarray, n_shown: int) -> np.ndarray:
        X = self.check_features(X)
        return self._position_chances(X, min(int(n_shown), X.shape[0]))

    # -- learning -----------------------------------------------------------------------------

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        k = min(feedback.n_shown, len(feedback.ranking), self.positions)
        if k == 0:
            return False
        self._learn_page(X, feedback, k)
        if self._epoch_due():  # Algorithm 1: refit and re-solve OP at the epoch's end
            self._fit_leader()
            self._solve()
        return True

    def _estimated_reward(self, policy: np.ndarray) -> float:
        """The policy's reward per page, estimated from the kept pages."""
        X, y, q, sizes = self._kept_pages()
        if len(sizes) == 0:
            return 0.0
        position = page_lists(self._oracle().scores(policy, X), sizes, self.positions)
        return float(_page_rewards(position, _estimates(y, q), position_weights(
            self.position_weights, self.positions), sizes).mean())

    def _solve(self) -> None:
        """Find ``Q`` satisfying OP by coordinate descent (appendix E), warm-started from the
        last epoch's ``Q``; rewards, regrets and variances are averages over the kept pages."""
        X, y, q, sizes = self._kept_pages()
        if len(sizes) == 0:
            return
        oracle = self._oracle()
        L = self.positions
        w = position_weights(self.position_weights, L)
        y_hat = _estimates(y, q)
        n_pages = len(sizes)
        K = float(sizes.mean())
        mu = self._mu(K)
        per_row = np.repeat(np.minimum(L, sizes) / sizes, sizes)  # uniform lists' L/K
        scale = K / (PSI * mu * L)  # the regret's weight in both constraints
        C = 2.0 * K  # 2L / p_min, p_min = L / K when every list is valid

        def placed(policy: np.ndarray) -> np.ndarray:
            return page_lists(oracle.scores(policy, X), sizes, L)

        def per_page(position: np.ndarray) -> np.ndarray:  # a policy's estimated rewards
            return _page_rewards(position, y_hat, w, sizes)

        def reward(position: np.ndarray) -> float:
            return float(per_page(position).mean())

        def beats(position: np.ndarray, leader_position: np.ndarray) -> bool:
            # The paper's fix for an imperfect oracle (appendix C.1) lets a policy that looks
            # better than the leader lead. Of many policies, the one whose estimate came out
            # highest is likely lucky (importance weights make the estimates noisy), so here
            # it must be better by two standard errors of the paired difference over the pages.
            gap = per_page(position) - per_page(leader_position)
            spread = gap.std(ddof=1) / math.sqrt(n_pages) if n_pages > 1 else math.inf
            return float(gap.mean()) > 2.0 * spread

        policies, _ = self._mixture()
        Q = [(p, placed(p), float(c))
             for p, c in zip(policies[:-1], self.policy_weights_, strict=True)]
        leader, leader_at = self.theta_, placed(self.theta_)
        for p, at, _ in Q:  # a policy of the last epoch that is now clearly better leads
            if beats(at, leader_at):
                leader, leader_at = p, at
        best = reward(leader_at)
        for _ in range(self.iterations):
            changed = False
            # Eq. (4): low empirical regret, else shrink Q
            total = sum(c * (C + scale * max(0.0, best - reward(at))) for _, at, c in Q)
            if total > C:
                Q = [(p, at, c * C / total) for p, at, c in Q]
                changed = True
            # Eq. (5): every policy's variance (over the smoothed marginals q_mu) bounded
            q_mu = np.zeros(len(y))
            for _, at, c in Q:
                q_mu[at >= 0] += c
            q_mu = (1.0 - mu) * q_mu + mu * per_row
            # one oracle call finds the policy that violates it most (appendix C: targets
            # 1 / q_mu + scale * y_hat over every candidate, weight 1)
            candidate = oracle.fit(X, 1.0 / q_mu + scale * y_hat, np.ones(len(y)))
            at = placed(candidate)
            if beats(at, leader_at):  # the oracle found a better policy: it leads
                leader, leader_at, best = candidate, at, reward(at)
            gain = reward(at)
            on = at >= 0
            variance = float((1.0 / q_mu[on]).sum()) / n_pages
            excess = variance - (C + scale * max(0.0, best - gain))
            if excess > 0:
                second = float((1.0 / q_mu[on] ** 2).sum()) / n_pages
                Q.append((candidate, at, (variance + excess) / (2.0 * (1.0 - mu) * second)))
                changed = True
            if not changed:
                break
        # the policies that carry weight, the heaviest first, at most MAX_POLICIES of them
        # (dropping mass only leaves more to the leader; Q may hold the leader too)
        Q = sorted([(p, at, c) for p, at, c in Q if c > 1e-9],
                   key=lambda entry: -entry[2])[:MAX_POLICIES]
        mass = sum(c for _, _, c in Q)
        if mass > 1.0:  # the leader's share cannot go below zero
            Q = [(p, at, c / mass) for p, at, c in Q]
        self.theta_ = leader
        self.policies_ = np.concatenate([p for p, _, _ in Q]) if Q else np.zeros(0)
        self.policy_sizes_ = np.array([len(p) for p, _, _ in Q], dtype=np.int64)
        self.policy_weights_ = np.array([c for _, _, c in Q], dtype=np.float64)


def _estimates(y: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``yhat(a) = y(a) 1[a shown] / q(a)``, unbiased for every candidate's feedback."""
    shown = q > 0
    return np.where(shown, y / np.where(shown, q, 1.0), 0.0)


def _page_rewards(position: np.ndarray, y_hat: np.ndarray, w: np.ndarray,
                  sizes: np.ndarray) -> np.ndarray:
    """A policy's estimated reward on each page, ``sum_l w_l yhat(a_l)``, from each
    candidate's position on its page's list (-1: not on it); pages are runs of ``sizes``."""
    on = position >= 0
    page = np.repeat(np.arange(len(sizes)), sizes)
    return np.bincount(page[on], weights=w[position[on]] * y_hat[on], minlength=len(sizes))


@hookimpl
def reranker_register_learners():
    return [VCEE]

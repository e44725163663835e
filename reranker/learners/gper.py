"""Greedy Projection with Exponential Restart (Delage, section 4; docs/algorithms.md,
"Plackett-Luce learners").

Online projected gradient descent in cycles ``m = 1, 2, ...`` of length ``2^(m-1)``. In cycle
``m`` the feasible set is the ball of radius ``r_m = a * (2^(m-1))^(1/4)``, its diameter
``D_m = 2 r_m``; with ``F_m`` the largest feature norm seen so far the step is
``alpha_m = D_m / (2 sqrt(2) F_m)``, and the ``k``-th round of a cycle does
``theta <- Proj_{r_m}(theta - alpha_m / sqrt(k) * grad)``. Features that appear later extend
``theta`` with zeros: the growing balls are what keep the regret guarantee as the library
grows. A round is an impression with at least one click.

The learners that present the argmax (Greedy KLRank, Online RankNet) compare a clicked item
with the results the user saw, not with every candidate, and start from the engine's order
(docs/algorithms.md, "Plackett-Luce learners"): otherwise one click could turn them onto a
ranking that their own pages and clicks confirm for good.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from reranker.learners.base import LinearLearner, Param, prior_steps_param
from reranker.learners.feedback import Feedback, click_positions


class GPERLearner(LinearLearner):
    """Base of the KLRank family: parameters ``theta_`` trained with GPER on a loss of the
    clicked items; subclasses give the loss gradient (and may sample instead of presenting
    the argmax)."""

    capabilities = replace(LinearLearner.capabilities, supports_growth=True)
    #: The items a clicked item is compared with (the loss's normaliser): ``"all"``, every
    #: candidate (Delage's user, who finds the item wherever it is ranked), or ``"shown"``,
    #: the results the user saw (:meth:`_choice`). A parameter of the argmax learners.
    choice_set: str = "all"
    params = (
        # The paper's a = 10 is for one-hot item features of norm 1. With dense features
        # min-max normalised per query (norms up to about sqrt(m)), a = 1 keeps scores on a
        # comparable scale; it was chosen on MQ2008's validation fold (S4), where it gave a
        # lower KL cost and a higher offline NDCG than 10 for all three learners.
        Param("a", float, 1.0, "radius scale of the feasible balls, r_m = a * (2^(m-1))^(1/4) "
              "(10 in the paper, for features of norm 1)", minimum=0.0, exclusive_minimum=True),
        Param("clicks", str, "all", "several clicks: 'all' (each clicked item an observation "
              "weighted 1 / #clicks) or 'last' (the last click only)", choices=("all", "last")),
        # GPER keeps theta inside a ball of radius a (2^(m-1))^(1/4): a starting ranking
        # worth many average steps would outweigh anything the ball lets it learn (on
        # MQ2008, 300 steps cost the KLRank learners 0.05-0.12 offline NDCG@10), so NoRegret
        # KLRank, which explores by sampling, starts from theta = 0 as in the paper; the
        # argmax learners take a small one (ARGMAX_PARAMS).
        prior_steps_param(0.0),
    )

    def _initialize(self, n_features: int) -> None:
        self.theta_ = np.zeros(n_features)
        self.cycle_ = 1  # m
        self.round_ = 0  # k, rounds done in the current cycle
        self.max_norm_ = 0.0  # F_m

    def _grow(self, n_features: int) -> None:
        self.theta_ = np.concatenate([self.theta_, np.zeros(n_features - len(self.theta_))])

    def learned_weights(self) -> np.ndarray:
        return self.theta_

    def scores(self, X: np.ndarray) -> np.ndarray:
        """``theta . x`` plus the starting ranking: the loss is that of the scores the
        learner ranks with, its gradient taken in ``theta``."""
        return X @ self.weights()

    def radius(self) -> float:
        return self.a * (2.0 ** (self.cycle_ - 1)) ** 0.25

    def _chosen(self, feedback: Feedback) -> np.ndarray:
        clicked = feedback.clicked
        return clicked[-1:] if self.clicks == "last" else clicked

    def _choice(self, X: np.ndarray, feedback: Feedback) -> tuple[np.ndarray, np.ndarray]:
        """The features of the items the clicked ones were chosen from, and the rows of the
        chosen items in them. ``choice_set`` ``"all"``: every candidate. ``"shown"``: the
        results the user saw, in the order shown (so a clicked item's row is its position):
        the page, or down to the lowest click when one is below it."""
        chosen = self._chosen(feedback)
        if self.choice_set == "all" or len(chosen) == 0:
            return X, chosen
        positions = click_positions(feedback)
        if self.clicks == "last":
            positions = positions[-1:]
        seen = max(int(feedback.n_shown), int(positions[-1]) + 1)
        return X[feedback.ranking[:seen]], positions

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        X, chosen = self._choice(X, feedback)
        if len(chosen) == 0 or X.shape[0] < 2:
            return False
        norm = float(np.sqrt((X * X).sum(axis=1)).max())
        max_norm = max(self.max_norm_, norm)
        if max_norm == 0.0:
            return False
        if self.round_ >= 2 ** (self.cycle_ - 1):  # exponential restart: the next cycle
            self.cycle_ += 1
            self.round_ = 0
        self.round_ += 1
        self.max_norm_ = max_norm
        radius = self.radius()
        step = (2.0 * radius) / (2.0 * math.sqrt(2.0) * max_norm) / math.sqrt(self.round_)
        theta = self.theta_ - step * self._gradient(X, chosen)
        length = float(np.linalg.norm(theta))
        self.theta_ = theta if length <= radius else theta * (radius / length)
        return True

    def _gradient(self, X: np.ndarray, chosen: np.ndarray) -> np.ndarray:
        """Gradient of the loss at ``theta_`` for the clicked items ``chosen`` (each weighted
        ``1 / len(chosen)``), shape ``(m,)``."""
        raise NotImplementedError


def kl_cost_gradient(X: np.ndarray, scores: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """Delage's KL cost ``-s_I + logsumexp_i(s_i)`` averaged over the chosen items ``I``:
    gradient ``-(mean x_I - E_softmax[x])``."""
    p = np.exp(scores - scores.max())
    p /= p.sum()
    return p @ X - X[chosen].mean(axis=0)


#: The parameters of the GPER learners that present the argmax (Greedy KLRank, Online
#: RankNet): those of :class:`GPERLearner` with ``choice_set`` and a starting ranking.
#:
#: A loss over every candidate suits Delage's user, who finds the item wherever it is
#: ranked. A user of a page of ``k`` results chooses among those: measured against every
#: candidate, a click credits the page as a whole (``x_clicked - E_softmax[x]`` holds the
#: page's difference from the rest), which pushes the weights toward whatever the argmax
#: showed, whether it was clicked for being relevant or not. On OHSUMED, where about 12% of
#: a query's candidates match none of its terms (all features 0 after min-max), one click
#: on a below-average document turned every weight negative, the argmax then showed only
#: non-matching documents, and each click on them (``x = 0``) pushed every weight further
#: down: offline NDCG@10 0.06 for good, below random. Compared with the page, a click says
#: which shown result was preferred to the others shown (for the logit model behind the KL
#: cost, the choice among any subset is the softmax over that subset, so the same ``theta``
#: fits), and a page of identical documents teaches nothing. The argmax does not explore,
#: so it must not start from a random ranking either: they keep the engine's order as a
#: starting ranking worth 30 average steps (chosen on MQ2008's validation fold, S4).
ARGMAX_PARAMS = (
    *(p for p in GPERLearner.params if p.name != "prior_steps"),
    Param("choice_set", str, "shown", "the items a clicked item is compared with: 'shown' "
          "(the results the user saw: the page, or down to a click below it) or 'all' "
          "(every candidate, Delage's user who finds the item wherever it is ranked)",
          choices=("shown", "all")),
    prior_steps_param(30.0),
)

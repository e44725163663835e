"""Letting the general model take over from the engine's order only once users are shown,
with high confidence, to prefer it: a takeover gate that ``reranker simulate --takeover``
tries and the service does not use (docs/algorithms.md, "Taking over from the engine,
tried", which gives the measurements and why).

Until the model has taken over, a query that its own clicks do not judge
(:mod:`reranker.learners.specialization`) gets a *probation page*: the team-draft
interleaving of the engine's order and the general model's own order, with randomised
adjacent pairs (:func:`reranker.experiments.probation.probation_page`), from which the learner
learns as from an experiment's mixed list. A randomised pair that the two orders rank the
other way round is a duel, which a click on exactly one of its two results decides
(:func:`duels`); the simulator counts the duels of queries without clicks of their own. A
one-sided always-valid test of "the model wins more duels than it loses" (:class:`Takeover`:
the mixture sequential probability ratio test of :mod:`reranker.experiments.stats`, its
mixture restricted to win rates above 1/2, :func:`one_sided_log_likelihood_ratio`) decides:
once its p-value reaches ``1 - confidence``, the model's own pages serve every query. The
test stays valid while the model changes between duels, and however often it is looked at.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import special

from reranker.features.clicks.position_bias import one_click_pairs

#: The context key that marks a probation page.
PROBATION = "probation"
#: h of the Beta(h, h) mixture over the win rate, as the experiments' test uses it
#: (:data:`reranker.experiments.stats.DEFAULT_MIXTURE`: tuned to win rates of 0.4..0.6).
MIXTURE = 10.0


def one_sided_log_likelihood_ratio(wins: int, losses: int, mixture: float = MIXTURE) -> float:
    """log Lambda after ``wins`` and ``losses`` for the one-sided alternative "the model
    wins more often than it loses": the ``Beta(h, h)`` mixture of
    :mod:`reranker.experiments.stats` restricted to win rates above 1/2 (twice its density
    there), so ``Lambda = 2 B(w + h, l + h) (1 - I_{1/2}(w + h, l + h)) / B(h, h) / 0.5 **
    (w + l)``, ``I`` the regularised incomplete beta function. Each component of the mixture
    is a martingale under a win rate of 1/2 and a supermartingale under any lower one, so the
    running maximum gives an always-valid p-value of the composite null "the model wins at
    most half of the decided comparisons", even when the rate changes from one comparison to
    the next (docs/algorithms.md, "Taking over from the engine, tried")."""
    if not mixture > 0:
        raise ValueError(f"the mixture parameter h must be positive, got {mixture}")
    a, b = wins + mixture, losses + mixture
    tail = float(special.betainc(b, a, 0.5))  # 1 - I_{1/2}(a, b), the mass above 1/2
    if tail <= 0.0:
        return -math.inf
    return (float(special.betaln(a, b)) - float(special.betaln(mixture, mixture))
            + math.log(2.0 * tail) + (wins + losses) * math.log(2.0))


@dataclass
class Takeover:
    """The evidence that users prefer the general model to the engine's order: the
    duels it won and lost, the peak of the test's log likelihood ratio, and
    whether it has taken over."""

    wins: int = 0
    losses: int = 0
    #: The running maximum of log Lambda (the always-valid p-value is ``exp(-peak)``).
    peak: float = 0.0
    trusted: bool = False

    @property
    def p_value(self) -> float:
        """The always-valid p-value of "users prefer the model no more than the engine"."""
        return min(1.0, math.exp(-self.peak))

    def observe(self, outcomes: Iterable[int], confidence: float,
                mixture: float = MIXTURE) -> bool:
        """Count the duels of one page (+1 the model won, -1 the engine, :func:`duels`),
        one after the other; True when they made the model
        take over (at ``confidence``)."""
        took_over = False
        for outcome in outcomes:
            if outcome > 0:
                self.wins += 1
            elif outcome < 0:
                self.losses += 1
            else:
                continue
            self.peak = max(self.peak, one_sided_log_likelihood_ratio(
                self.wins, self.losses, mixture))
            if not self.trusted and self.p_value <= 1.0 - confidence:
                self.trusted = took_over = True
        return took_over

    def to_dict(self) -> dict:
        return {"wins": self.wins, "losses": self.losses, "peak": self.peak,
                "trusted": self.trusted}

    @classmethod
    def from_dict(cls, data: dict) -> Takeover:
        """From :meth:`to_dict`'s record; ``ValueError`` or ``TypeError`` names a bad
        entry."""
        if not isinstance(data, dict):
            raise TypeError(f"section 'takeover' must be an object, got {data!r}")
        counts = {}
        for key in ("wins", "losses"):
            value = data.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"takeover.{key} must be a whole number of at least 0, "
                                 f"got {value!r}")
            counts[key] = value
        peak = data.get("peak", 0.0)
        if isinstance(peak, bool) or not isinstance(peak, (int, float)) \
                or not math.isfinite(peak) or peak < 0:
            raise ValueError(f"takeover.peak must be a finite number of at least 0, got "
                             f"{peak!r}")
        trusted = data.get("trusted", False)
        if not isinstance(trusted, bool):
            raise ValueError(f"takeover.trusted must be true or false, got {trusted!r}")
        return cls(**counts, peak=float(peak), trusted=trusted)


def duels(context: dict | None, n_shown: int, ranking: np.ndarray, clicked_positions,
          model_scores: np.ndarray, engine_rank: np.ndarray | None = None) -> list[int]:
    """The duels a page's clicks decide between the general model (``model_scores``, its
    scores of the candidates when the page was shown) and the engine's order (the
    candidates' order, or ``engine_rank``, each candidate's place in it): +1 for each the
    model won, -1 for each the engine won.

    A duel is a randomised pair of the page, shown in either order with probability 1/2,
    that the two orders rank the other way round, and in which exactly one result was
    clicked. Under the position-based model the chance that only the better one is clicked
    exceeds the chance that only the other is by ``(e_u + e_{u+1}) (r_a - r_b) / 2``,
    whichever order it was shown in, so the clicks compare the two orders where they differ
    without position bias (FairPairs, Radlinski & Joachims 2006). Every page with such pairs
    gives duels, whoever ordered it: the model's own, a specialised one, a probation page."""
    pairs, p = one_click_pairs(context, n_shown, ranking, clicked_positions)
    if p != 0.5 or not pairs:  # (another swap probability would need weights)
        return []
    scores = np.asarray(model_scores, dtype=np.float64)
    out = []
    for clicked, other, _ in pairs:
        engine_prefers = clicked < other if engine_rank is None \
            else engine_rank[clicked] < engine_rank[other]
        # the model's order: by score, ties in the engine's order
        model_prefers = scores[clicked] > scores[other] or (
            scores[clicked] == scores[other] and engine_prefers)
        if model_prefers != engine_prefers:
            out.append(1 if model_prefers else -1)
    return out


def on_probation(capabilities, takeover_setting: bool) -> bool:
    """Whether a learner that declares ``capabilities`` waits for evidence before its pages
    serve alone (``takeover_setting``, the simulator's ``--takeover``): never a floor (it is
    the reference), nor a learner that learns only from the pages it drew itself
    (``learns_from_mixed_lists`` false), which probation pages would starve."""
    return bool(takeover_setting) and not capabilities.floor \
        and capabilities.learns_from_mixed_lists

"""What a search's ranking step decides, before the page is cut, logged and answered: one
typed object, built where a ranking is made (one arm's, a mix of arms', the engine's order when
a learner fails, a later page continuing a first) and read where the impression is logged."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reranker.features.clicks.position_bias import randomized_pairs


@dataclass
class RankedPage:
    """The ranking of every candidate of a search, and who made it."""

    #: The learner's name, the experiment's mode for a mixed page, or the engine's order.
    learner: str
    #: The model version that ranked (-1 for a mix or the engine's order).
    model_version: int
    #: The arm's id (logged), None for a mixed page.
    arm: str | None
    #: The arm's label as the configuration names it, None for a mixed page.
    label: str | None
    #: Candidate indices, best first.
    ranking: np.ndarray = field(default_factory=lambda: np.empty(0, np.intp))
    #: Per candidate, the score the answer shows (higher first).
    scores: np.ndarray = field(default_factory=lambda: np.empty(0))
    #: Per shown position, the label of the arm that contributed the result (None: not
    #: counted in an experiment).
    teams: list[str] | None = None
    #: Log-probability of the shown list under the policy that drew it (None: not known).
    log_prob: float | None = None
    #: Per candidate, the probability of its being shown, when the learner gives it.
    propensities: np.ndarray | None = None
    #: What the learner or the mix logged with the page (pairs it randomised, each arm's
    #: ranking, a fallback's reason).
    context: dict[str, Any] | None = None

    def swapped_positions(self, n_shown: int) -> set[int]:
        """The 0-based positions among the first ``n_shown`` whose two results the page's
        randomised pairs swapped: where the order shown is not that of ``scores``."""
        # (one more: a perturbed page's last pair may reach one below the page)
        pairs, _ = randomized_pairs(self.context, n_shown + 1)
        return {p for upper, swapped in pairs if swapped for p in (upper, upper + 1)
                if p < n_shown}

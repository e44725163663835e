"""From clicks to feedback (ALGORITHMS.md section 1).

Live traffic and the offline simulator both turn what a user did into a :class:`Feedback`
through the functions here, so every learner is trained by the same code either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def improved_ranking(ranking: np.ndarray, clicked: np.ndarray) -> np.ndarray:
    """The coactive improved ranking ``ybar``.

    Coactive Learning, section 3.2: "prepend to the ranking all results that the user
    clicked" -- the clicked candidates in the order they were shown, then the rest of
    ``ranking`` in its original order. ``ranking`` and ``clicked`` hold candidate indices.
    """
    ranking = np.asarray(ranking, dtype=np.intp)
    if len(clicked) == 0:
        return ranking.copy()
    is_clicked = np.zeros(ranking.max() + 1 if len(ranking) else 0, dtype=bool)
    is_clicked[np.asarray(clicked, dtype=np.intp)] = True
    mask = is_clicked[ranking]
    return np.concatenate([ranking[mask], ranking[~mask]])


@dataclass(frozen=True, eq=False)
class Feedback:
    """What one impression taught us.

    ``ranking`` is the presented ranking ``y`` (candidate indices, best first, all
    candidates); the user saw its first ``n_shown``. ``clicked`` holds the clicked candidate
    indices in the order they were shown. ``improved`` is the coactive ``ybar``: built from
    the clicks for live traffic, or given directly by a simulated alpha-informative user.
    ``log_prob`` and ``propensities`` are what a stochastic policy logged when it ranked.
    """

    ranking: np.ndarray
    n_shown: int
    clicked: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.intp))
    improved: np.ndarray | None = None
    log_prob: float | None = None
    propensities: np.ndarray | None = None

    def __post_init__(self) -> None:
        ranking = np.asarray(self.ranking, dtype=np.intp)
        clicked = np.asarray(self.clicked, dtype=np.intp)
        object.__setattr__(self, "ranking", ranking)
        object.__setattr__(self, "clicked", clicked)
        if self.improved is None:
            object.__setattr__(self, "improved", improved_ranking(ranking, clicked))
        else:
            object.__setattr__(self, "improved", np.asarray(self.improved, dtype=np.intp))

    @property
    def informative(self) -> bool:
        """False when ``ybar == y``: no click, or only the top results clicked."""
        return not np.array_equal(self.improved, self.ranking)


def feedback_from_clicks(ranking: np.ndarray, n_shown: int, clicked: np.ndarray, *,
                         log_prob: float | None = None,
                         propensities: np.ndarray | None = None) -> Feedback:
    """Feedback of an impression from its clicked candidate indices (any order, no repeats)."""
    ranking = np.asarray(ranking, dtype=np.intp)
    clicked = np.asarray(clicked, dtype=np.intp)
    if len(clicked):
        position = np.empty(len(ranking), dtype=np.intp)
        position[ranking] = np.arange(len(ranking))
        clicked = clicked[np.argsort(position[clicked], kind="stable")]
    return Feedback(ranking=ranking, n_shown=int(n_shown), clicked=clicked,
                    log_prob=log_prob, propensities=propensities)


def skip_above_pairs(feedback: Feedback) -> list[tuple[int, int]]:
    """Pairwise preferences (skip-above): each clicked candidate is preferred to every
    unclicked one shown above it. Returns ``(preferred, other)`` candidate-index pairs."""
    clicked = set(feedback.clicked.tolist())
    pairs = []
    for pos, item in enumerate(feedback.ranking[: feedback.n_shown].tolist()):
        if item in clicked:
            pairs.extend((item, other) for other in feedback.ranking[:pos].tolist()
                         if other not in clicked)
    return pairs

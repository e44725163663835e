"""Simulated users: click models over graded relevance labels (docs/algorithms.md,
"Simulated users").

Used by the demo and the offline simulator; the clicks they produce go through the same
clicks-to-feedback code as live traffic (:mod:`reranker.learners.feedback`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Cascade click models of the online learning-to-rank literature (Hofmann et al. 2011, used by
# PDGD): P(click | grade) and P(stop after a click | grade), for binary (0-1, as on the LETOR
# 3.0 web collections), 3-grade and 5-grade labels.
CASCADE_PRESETS: dict[tuple[str, int], tuple[tuple[float, ...], tuple[float, ...]]] = {
    ("perfect", 2): ((0.0, 1.0), (0.0, 0.0)),
    ("navigational", 2): ((0.05, 0.95), (0.2, 0.9)),
    ("informational", 2): ((0.4, 0.9), (0.1, 0.5)),
    ("perfect", 3): ((0.0, 0.5, 1.0), (0.0, 0.0, 0.0)),
    ("navigational", 3): ((0.05, 0.5, 0.95), (0.2, 0.5, 0.9)),
    ("informational", 3): ((0.4, 0.7, 0.9), (0.1, 0.3, 0.5)),
    ("perfect", 5): ((0.0, 0.2, 0.4, 0.8, 1.0), (0.0, 0.0, 0.0, 0.0, 0.0)),
    ("navigational", 5): ((0.05, 0.3, 0.5, 0.7, 0.95), (0.2, 0.3, 0.5, 0.7, 0.9)),
    ("informational", 5): ((0.4, 0.6, 0.7, 0.8, 0.9), (0.1, 0.2, 0.3, 0.4, 0.5)),
}


@dataclass(frozen=True)
class CascadeClickModel:
    """Scan the list top-down; click with ``P(click | label)``; then stop with
    ``P(stop | label)``.

    ``stop_every_position=False`` is the papers' wording (the stop coin is drawn only after
    a click). ``True`` is the reference implementation behind the published PDGD/DBGD
    numbers: the stop coin is drawn at every examined position, clicked or not, and the
    clicks up to and including the first stop are kept.
    """

    name: str
    click_probs: tuple[float, ...]
    stop_probs: tuple[float, ...]
    stop_every_position: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "_click", np.asarray(self.click_probs))
        object.__setattr__(self, "_stop", np.asarray(self.stop_probs))

    def clicks(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Clicked mask for a shown list with graded ``labels`` (top first)."""
        labels = np.asarray(labels, dtype=np.intp)
        if labels.size and (labels.min() < 0 or labels.max() >= len(self.click_probs)):
            raise ValueError(f"click model {self.name!r} handles labels 0.."
                             f"{len(self.click_probs) - 1}, got {labels.min()}..{labels.max()}")
        uniforms = rng.random((2, labels.size))
        return self.clicks_from_uniforms(labels, uniforms[0], uniforms[1])

    def clicks_from_uniforms(self, labels: np.ndarray, u_click: np.ndarray,
                             u_stop: np.ndarray) -> np.ndarray:
        """:meth:`clicks` with the random numbers given (one pair per position), so that a
        simulator can draw them in blocks."""
        clicked = u_click < self._click[labels]
        stops = u_stop < self._stop[labels]
        if not self.stop_every_position:
            stops &= clicked
        first = stops.argmax()
        if stops[first]:
            clicked[first + 1:] = False
        return clicked


def cascade_model(name: str, grades: int, stop_every_position: bool = False) -> CascadeClickModel:
    """One of the preset cascade models: ``perfect``, ``navigational`` or ``informational``
    for binary (0-1), 3-grade (0-2) or 5-grade (0-4) labels."""
    try:
        click, stop = CASCADE_PRESETS[(name, grades)]
    except KeyError:
        names = sorted({n for n, _ in CASCADE_PRESETS})
        raise ValueError(f"unknown cascade click model {name!r} for {grades} grades "
                         f"(known: {', '.join(names)} for 2, 3 or 5 grades)") from None
    return CascadeClickModel(name, click, stop, stop_every_position)


@dataclass(frozen=True)
class PositionBasedClickModel:
    """``P(click at rank i) = (1 / i) ** eta * P(attractive | label)``, independently per
    position."""

    attractiveness: tuple[float, ...]
    eta: float = 1.0
    name: str = "position_based"

    def clicks(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        labels = np.asarray(labels, dtype=np.intp)
        return self.clicks_from_uniforms(labels, rng.random(labels.size), None)

    def clicks_from_uniforms(self, labels: np.ndarray, u_click: np.ndarray,
                             u_stop: np.ndarray | None) -> np.ndarray:
        examine = (1.0 / np.arange(1, labels.size + 1)) ** self.eta
        return u_click < examine * np.asarray(self.attractiveness)[labels]

"""What an experiment is: the ``experiment:`` section of the configuration, checked (its arms
and their shares, the mode, the test's settings, the promotion rule and its guards)."""

from __future__ import annotations

from dataclasses import dataclass

from reranker.core.times import parse_time


@dataclass(frozen=True)
class ExperimentSpec:
    """The ``experiment:`` section, checked."""

    name: str
    mode: str  # interleave | multileave | split
    labels: tuple[str, ...]
    shares: dict[str, float]
    assign_by: tuple[str, ...] = ("user_id", "session_id")
    control: str = ""
    share: float = 1.0
    promote: str = "manual"
    start: float | None = None
    stop: float | None = None
    alpha: float = 0.05
    mixture: float = 10.0
    window: int = 100
    clicks_at: int = 3
    even_start: bool = False
    min_impressions: int = 0
    min_duration: float = 0.0
    guardrails: tuple[tuple[str, float], ...] = ()
    dry_run: bool = False

    @property
    def mixed(self) -> bool:
        """True when the arms' results are mixed in one list (interleave, multileave)."""
        return self.mode != "split"

    @classmethod
    def from_config(cls, config) -> ExperimentSpec | None:
        section = config.experiment
        if section.mode is None:
            return None
        labels = tuple(section.arms)
        shares = {label: float(section.shares.get(label, 1.0)) for label in labels}
        where = f"{config.source}: " if config.source else ""
        return cls(name=section.name, mode=section.mode, labels=labels, shares=shares,
                   assign_by=tuple(section.assign_by), control=section.control or labels[0],
                   share=section.share, promote=section.promote,
                   start=parse_time(section.start, f"{where}experiment.start")
                   if section.start else None,
                   stop=parse_time(section.stop, f"{where}experiment.stop")
                   if section.stop else None,
                   alpha=section.alpha, mixture=section.mixture, window=section.window,
                   clicks_at=section.clicks_at, even_start=section.even_start,
                   min_impressions=section.min_impressions, min_duration=section.min_duration,
                   guardrails=tuple((str(k), float(v)) for k, v in section.guardrails.items()),
                   dry_run=section.dry_run)

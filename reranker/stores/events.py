"""What the event store keeps: impressions (logged pages), clicks and rewards.

An impression records everything needed to learn from it later without asking the backend
again: the candidates, their raw features, the ranking shown, who produced it (learner and
model version) and, for stochastic policies, the logged probabilities.

Lifecycle: an impression is *open* while it accepts clicks. Once its feedback window has
passed it is *closed* and numbered with a strictly increasing ``closed_seq``; clicks on it
are refused from then on. The trainer applies closed impressions in ``closed_seq`` order and
saves the highest number it applied inside the model file, so a restart neither loses nor
repeats an impression.

The stores themselves (the interface every store implements, SQLite and PostgreSQL) live in
:mod:`reranker.stores`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The context key of the probability that each shown result was shown at its position
#: (logged for the stochastic policies that can say it; off-policy evaluation reads it).
SHOWN_PROPENSITIES = "shown_propensities"
#: The context key of a page no learner learns from, and why: sorted by a field, or ordered
#: by a query rule. Neither its order nor its clicks teach a model, nor its clicks and
#: exposures count in the query's click features.
NOT_LEARNED = "not_learned"


@dataclass(eq=False)
class Impression:
    """One logged search result page."""

    id: str
    created: float
    query: str
    #: whom the page was served to: the search's user_id, else ``session:<session_id>``, else
    #: ``address:<keyed hash of the client's address>`` (reranker.serving.trust); None in process
    user_id: str | None
    learner: str
    model_version: int
    doc_ids: list[str]
    feature_names: list[str]
    features: np.ndarray | None  # (n, m) raw; None once retention compacted it
    ranking: np.ndarray  # (n,) candidate indices as presented
    n_shown: int
    log_prob: float | None = None
    propensities: np.ndarray | None = None
    teams: list[str] | None = None  # per shown position, when an experiment mixes learners
    context: dict | None = None  # what the learner logged with it (RankResult.context)
    arm: str | None = None  # id of the arm that showed it alone; None for a mixed list
    experiment: str | None = None  # the experiment it belongs to
    offset: int = 0  # ranks before the shown ones: the user saw ranking[offset:offset + n_shown]
    page_key: str | None = None  # query, filters and user or session (later pages find it)
    closed_seq: int | None = None
    clicked: list[str] | None = None  # doc ids, filled when read for training
    reward: float | None = None  # the application's reward for the page, if it sent one
    #: Read without its candidates and features (no click, no reward: nothing for a learner
    #: that learns only from clicks; ``EventStore.closed_since_lean``)
    bare: bool = False

    @property
    def learned(self) -> bool:
        """Whether a learner may learn from this page (:data:`NOT_LEARNED`)."""
        return not (self.context or {}).get(NOT_LEARNED)

    def shown(self) -> np.ndarray:
        """The shown candidates (indices), in the order shown."""
        return self.ranking[self.offset: self.offset + self.n_shown]

    def shown_ids(self) -> list[str]:
        return [self.doc_ids[i] for i in self.shown()]

    def clicked_positions(self) -> list[int]:
        """The 0-based positions in ``ranking`` of the shown results that were clicked,
        ascending."""
        shown = self.shown_ids()
        return sorted(self.offset + shown.index(doc_id)
                      for doc_id in self.clicked or [] if doc_id in shown)


@dataclass(frozen=True)
class ServedPage:
    """A logged page as search analytics reads it (:meth:`reranker.stores.ImpressionLog.
    pages_since`): what was searched, where the user was, what was clicked and, for a first
    page, how the served ranking ordered the engine's candidates; neither ids nor features,
    so that a window of a million pages is read without them."""

    created: float
    query: str
    arm: str | None  # the arm id that showed it alone; None for a mixed list
    offset: int  # ranks before the shown ones (0: a first page)
    n_shown: int
    clicked: tuple[int, ...]  # the clicked results' ranks in the whole ranking (1-based)
    #: (n,) a first page's candidate indices (the engine's ranks, 0-based) in the order
    #: served; None for a later page, which continues its first page's ranking
    ranking: np.ndarray | None

    @classmethod
    def of(cls, imp: Impression) -> ServedPage:
        """The page of an impression read with its clicks."""
        return cls(imp.created, imp.query, imp.arm, imp.offset, imp.n_shown,
                   tuple(position + 1 for position in imp.clicked_positions()),
                   None if imp.offset else imp.ranking)


@dataclass(frozen=True)
class ClickResult:
    impression_id: str
    doc_id: str
    position: int
    duplicate: bool


@dataclass(frozen=True)
class RewardResult:
    impression_id: str
    value: float
    replaced: float | None  # the value it replaced, if the page had one

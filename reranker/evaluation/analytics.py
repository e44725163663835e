"""Search analytics: what users search, what finds nothing, where they click, and where the
learned ranking departs from the engine's, from the pages the event store logged over a
window of time (``reranker analytics``, ``GET /analytics`` and its dashboard page).

The store streams the window's pages a batch at a time
(:meth:`reranker.stores.ImpressionLog.pages_since`); they are added up here per query, under
its normalised form (:func:`reranker.features.clicks.query_key`, the form its clicks are
counted under: "Tea  Kettle" and "tea kettle" are one query), so memory grows with the
number of distinct queries, never with the number of pages. The normalisation and the
served orders (packed with the candidates) are not SQL a store could aggregate portably.

The figures, per query and over all of them (docs/how-to/search-analytics.md):

* ``searches``: first pages (offset 0), one per search a user made; ``pages``: every page,
  the later pages of a search too;
* ``no_result``: searches whose engine found no candidate;
* ``clicks``: clicks on any of its pages; ``ctr``: the share of the pages that showed a
  result with at least one click; ``no_click``: pages that showed a result and got no
  click; ``mean_click_rank``: the mean rank (1-based, in the whole ranking) of its clicks;
* ``moved``: how far the served ranking moved from the engine's order: over the query's
  first pages, the mean absolute difference between a result's served rank and its
  engine rank, over the served top :data:`MOVED_DEPTH` (0: the engine's order; 1: each of
  the top results one place away from it, on average);
* the click-rank distribution: clicks by the rank they were made at.
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np

from reranker.core.errors import BadRequestError
from reranker.features.clicks import query_key
from reranker.stores.base import ImpressionLog
from reranker.stores.events import ServedPage

if TYPE_CHECKING:
    from reranker.models.arms import Arm

#: Days of pages read when none is asked.
DEFAULT_DAYS = 7.0
#: Queries per list when none is asked.
DEFAULT_TOP = 20
#: Queries per list at most.
MAX_TOP = 1000
#: The longest window, in days (a hundred years: every page a store holds).
MAX_DAYS = 36_500.0
#: The served top whose movement from the engine's order ``moved`` measures.
MOVED_DEPTH = 10
#: The figures of a query, in the order the tables and the CSV give them.
COLUMNS = ("query", "searches", "pages", "clicks", "ctr", "mean_click_rank", "no_result",
           "no_click", "moved")


@functools.lru_cache(maxsize=65536)
def _key(query: str) -> str:
    """The normalised query, remembered: a window repeats its frequent queries."""
    return query_key(query)


def moved_from_engine(ranking: np.ndarray, depth: int = MOVED_DEPTH) -> float | None:
    """How far a served ranking (candidate indices, which are the engine's ranks counted
    from 0, in the order served) moved from the engine's order: the mean of ``|served rank
    - engine rank|`` over its top ``depth``; None without candidates."""
    top = np.asarray(ranking[:depth], dtype=np.int64)
    if not top.size:
        return None
    return float(np.abs(top - np.arange(top.size)).mean())


@dataclass
class QueryFigures:
    """The figures of one query (or, as :attr:`SearchAnalytics.totals`, of all), added up
    page by page."""

    query: str
    searches: int = 0
    pages: int = 0
    no_result: int = 0
    clicks: int = 0
    shown_pages: int = 0  # pages that showed at least one result
    clicked_pages: int = 0
    rank_sum: int = 0
    moved_sum: float = 0.0
    moved_pages: int = 0

    def add(self, page: ServedPage) -> None:
        self.pages += 1
        self.clicks += len(page.clicked)
        self.rank_sum += sum(page.clicked)
        if page.n_shown:
            self.shown_pages += 1
            self.clicked_pages += bool(page.clicked)
        if page.ranking is not None:  # a first page
            self.searches += 1
            moved = moved_from_engine(page.ranking)
            if moved is None:
                self.no_result += 1
            else:
                self.moved_sum += moved
                self.moved_pages += 1

    @property
    def no_click(self) -> int:
        return self.shown_pages - self.clicked_pages

    @property
    def ctr(self) -> float | None:
        return self.clicked_pages / self.shown_pages if self.shown_pages else None

    @property
    def mean_click_rank(self) -> float | None:
        return self.rank_sum / self.clicks if self.clicks else None

    @property
    def moved(self) -> float | None:
        return self.moved_sum / self.moved_pages if self.moved_pages else None

    def to_dict(self) -> dict[str, Any]:
        """The figures of :data:`COLUMNS`, ratios rounded to 4 places."""
        return {name: _rounded(getattr(self, name)) for name in COLUMNS}


def _rounded(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


@dataclass(frozen=True)
class Section:
    """A list of queries the analytics give: the figure it ranks by (highest first, the
    searches breaking ties), and whether a query with none of it is left out."""

    key: str
    title: str
    by: str
    nonzero: bool = True


#: The lists, in the order the tables, the CSV and the dashboard give them.
SECTIONS = (Section("top_queries", "Top queries", "searches", nonzero=False),
            Section("no_result", "Queries without results", "no_result"),
            Section("no_click", "Queries without clicks", "no_click"),
            Section("moved", "Where the learned ranking moved furthest from the engine's",
                    "moved"))


@dataclass
class SearchAnalytics:
    """The figures of a window of pages: per query, over all, and the click-rank
    distribution."""

    since: float
    until: float
    days: float
    arm: str | None = None
    top: int = DEFAULT_TOP
    totals: QueryFigures = field(default_factory=lambda: QueryFigures(""))
    queries: dict[str, QueryFigures] = field(default_factory=dict)
    click_ranks: Counter = field(default_factory=Counter)

    def add(self, page: ServedPage) -> None:
        key = _key(page.query)
        figures = self.queries.get(key)
        if figures is None:
            figures = self.queries[key] = QueryFigures(key)
        figures.add(page)
        self.totals.add(page)
        self.click_ranks.update(page.clicked)

    def ranked(self, section: Section) -> list[QueryFigures]:
        """The queries of a list, its top :attr:`top`."""
        def figure(query: QueryFigures) -> float:
            value = getattr(query, section.by)
            return -math.inf if value is None else value

        chosen = [q for q in self.queries.values() if not section.nonzero or figure(q) > 0]
        chosen.sort(key=lambda q: (-figure(q), -q.searches, q.query))
        return chosen[:self.top]

    def rank_distribution(self) -> list[dict[str, int]]:
        """Clicks by rank, from 1 to the deepest clicked (ranks without clicks as 0)."""
        deepest = max(self.click_ranks, default=0)
        return [{"rank": rank, "clicks": self.click_ranks.get(rank, 0)}
                for rank in range(1, deepest + 1)]

    def to_dict(self) -> dict[str, Any]:
        """What ``GET /analytics`` answers and ``reranker analytics --format json`` prints."""
        totals = self.totals.to_dict()
        totals.pop("query")
        totals["queries"] = len(self.queries)
        return {"since": _iso(self.since), "until": _iso(self.until), "days": self.days,
                "arm": self.arm, "top": self.top, "moved_depth": MOVED_DEPTH,
                "totals": totals,
                **{section.key: [q.to_dict() for q in self.ranked(section)]
                   for section in SECTIONS},
                "click_ranks": self.rank_distribution()}


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, tz=timezone.utc).isoformat(timespec="seconds"
                                                                      ).replace("+00:00", "Z")


def check_window(days: Any, top: Any) -> tuple[float, int]:
    """``days`` and ``top`` as given by a request or a command (None: the defaults), checked:
    a :class:`BadRequestError` naming the one at fault."""
    days = DEFAULT_DAYS if days is None else days
    top = DEFAULT_TOP if top is None else top
    try:
        days = float(days)
    except (TypeError, ValueError):
        days = math.nan
    if not (math.isfinite(days) and 0 < days <= MAX_DAYS):
        raise BadRequestError(f"'days' must be a number of days above 0 and at most "
                              f"{MAX_DAYS:,.0f}, such as 7 or 0.5", field="days")
    try:
        top = int(top)
    except (TypeError, ValueError):
        top = 0
    if not 1 <= top <= MAX_TOP:
        raise BadRequestError(f"'top' must be a whole number from 1 to {MAX_TOP}", field="top")
    return days, top


def arm_names(arms: Sequence[Arm], label: str | None) -> tuple[str, ...] | None:
    """The arm ids (``Impression.arm``) of the arm with ``label`` (an experiment's arm label,
    or the learner's name without an experiment); None without a label. A label that is not
    configured is a :class:`BadRequestError` naming those that are."""
    if label is None:
        return None
    for arm in arms:
        if label in arm.labels:
            return arm.names()
    known = ", ".join(sorted(name for arm in arms for name in arm.labels))
    raise BadRequestError(f"no arm is labelled {label!r}; the configured arms: {known}",
                          field="arm")


def search_analytics(events: ImpressionLog, days: float = DEFAULT_DAYS, *,
                     arms: Iterable[str] | None = None, arm: str | None = None,
                     top: int = DEFAULT_TOP, now: float | None = None) -> SearchAnalytics:
    """The figures of the pages logged in the last ``days`` days (before ``now``); with
    ``arms`` (the ids :func:`arm_names` gives for the label ``arm``), only the pages that
    arm showed alone. Each list keeps its ``top`` queries."""
    until = time.time() if now is None else now
    since = until - days * 86400.0
    out = SearchAnalytics(since, until, days, arm, top)
    for page in events.pages_since(since, None if arms is None else tuple(arms)):
        if page.created <= until:
            out.add(page)
    return out

"""The search backend interface.

A backend retrieves the candidates of a query together with every per-hit feature input in
one call, and loads documents into its index. The embedded backend (:mod:`.embedded`) is the
default; the Elasticsearch adapter implements the same interface.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from reranker.backends.filters import Clause, Facet
    from reranker.backends.options import Highlight, SortKey
    from reranker.core.config import Config


@dataclass(eq=False)
class Candidates:
    """The hits of one search, in the backend's order, as columns.

    ``scores`` is ``(n,)``; ``field_scores`` is ``(n, q)``, one column per query feature
    (``FeatureSpec.query_names``: by default each searched field's score; 0 where it does
    not match); ``numeric`` is ``(n, len(numeric_fields))`` with NaN for missing values.
    ``load_sources(indices)`` returns the stored documents of the given hits, so a backend
    that has to fetch them does so only for the hits that are shown.
    """

    ids: list[str]
    scores: np.ndarray
    field_scores: np.ndarray
    numeric: np.ndarray
    load_sources: Callable[[Sequence[int]], list[dict[str, Any]]]
    total: int | None = None  # how many documents matched, when the backend knows
    #: Per facet field asked for, each value's count over every matching document.
    facets: dict[str, dict[str, int]] = field(default_factory=dict)
    #: The aggregations a search template asks for, as the engine answered them.
    aggregations: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    def plus(self, other: Candidates) -> Candidates:
        """These candidates followed by ``other``'s (documents a query rule pins that the
        search did not retrieve), whose sources ``other`` loads; ``total`` counts those the
        query does not match (score 0; one it matches beyond the window is counted already),
        as Elasticsearch's pinned query does; facets and aggregations stay this search's."""
        if not len(other):
            return self
        n = len(self.ids)
        load, more = self.load_sources, other.load_sources

        def load_sources(indices: Sequence[int]) -> list[dict[str, Any]]:
            mine = [i for i in indices if i < n]
            theirs = [i - n for i in indices if i >= n]
            found = dict(zip(mine, load(mine), strict=True)) if mine else {}
            found.update(zip((i + n for i in theirs), more(theirs), strict=True)
                         if theirs else ())
            return [found[i] for i in indices]

        return dataclasses.replace(
            self, ids=[*self.ids, *other.ids], scores=np.concatenate([self.scores, other.scores]),
            field_scores=np.vstack([self.field_scores, other.field_scores]),
            numeric=np.vstack([self.numeric, other.numeric]), load_sources=load_sources,
            total=None if self.total is None
            else self.total + int((np.asarray(other.scores) <= 0).sum()))

    def without(self, doc_ids: set[str]) -> Candidates:
        """These candidates less ``doc_ids`` (a query rule hides them), in the same order;
        ``total`` less the ones taken out."""
        keep = [i for i, doc_id in enumerate(self.ids) if doc_id not in doc_ids]
        if len(keep) == len(self.ids):
            return self
        rows = np.asarray(keep, dtype=np.intp)
        load = self.load_sources
        return dataclasses.replace(
            self, ids=[self.ids[i] for i in keep], scores=self.scores[rows],
            field_scores=self.field_scores[rows], numeric=self.numeric[rows],
            load_sources=lambda indices: load([keep[i] for i in indices]),
            total=None if self.total is None else max(0, self.total - len(self.ids) + len(keep)))


@dataclass
class IndexReport:
    """What a bulk load did."""

    indexed: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (where, why)
    #: The types a new index gave its filter fields, read from the documents (``keyword``,
    #: ``number``, ``boolean``, ``date``); empty when they were given or kept.
    filter_types: dict[str, str] = field(default_factory=dict)


class Backend(ABC):
    """Base class of search backends; subclasses register with ``reranker_register_backends``."""

    #: Value of ``backend.type`` that selects this backend.
    name: ClassVar[str] = ""

    def __init__(self, config: Config):
        self.config = config

    @abstractmethod
    def open(self) -> None:
        """Start-up checks; raise :class:`reranker.core.errors.BackendError` naming the problem."""

    @abstractmethod
    def search(self, query: str, n: int, filters: tuple[Clause, ...] = (),
               facets: tuple[str | Facet, ...] = ()) -> Candidates:
        """Top ``n`` candidates of ``query`` that pass every filter clause, with their
        feature inputs, and the ``facets`` over all matching documents (:mod:`.filters`):
        a field's name asks for its values' counts (what every backend must answer); a
        :class:`~reranker.backends.filters.Facet` for range counts or stats, which a
        backend that cannot aggregate them refuses with a 400 naming the facet. Raise
        :class:`reranker.core.errors.BackendUnavailableError` when the backend cannot
        answer."""

    def search_sorted(self, query: str, n: int, filters: tuple[Clause, ...],
                      facets: tuple[str | Facet, ...], sort: tuple[SortKey, ...]
                      ) -> Candidates:
        """As :meth:`search`, the top ``n`` by the ``sort`` keys instead of by relevance
        (documents without a value last); the candidates' ``scores`` and field scores are
        still the engine's relevance scores. A backend that cannot sort keeps this default,
        a 400."""
        from reranker.core.errors import BadRequestError

        raise BadRequestError(f"the {self.name!r} backend cannot sort a search by a field",
                              field="sort")

    def fetch(self, query: str, ids: Sequence[str], filters: tuple[Clause, ...] = ()
              ) -> Candidates | None:
        """The documents ``ids`` that pass ``filters``, as candidates with their features for
        ``query`` (0 where it does not match them): a query rule pins them, and the search
        did not retrieve them. None when the backend cannot read documents by id (the
        default): a pin then moves only what the search retrieved."""
        return None

    def highlight(self, query: str, ids: Sequence[str], sources: Sequence[dict[str, Any]],
                  request: Highlight) -> list[dict[str, list[str]]]:
        """Per hit (``ids``, with their stored ``sources``), the highlighted fragments of
        each field of ``request`` where ``query`` matches, HTML-escaped with the matched
        words between the request's tags (:mod:`.options`). A backend that cannot highlight
        keeps this default, a 400."""
        from reranker.core.errors import BadRequestError

        raise BadRequestError(f"the {self.name!r} backend cannot highlight", field="highlight")

    @abstractmethod
    def index_documents(self, documents: Iterable[tuple[str, dict[str, Any]]], *,
                        recreate: bool = False,
                        progress: Callable[[int], None] | None = None) -> IndexReport:
        """Add or replace documents given as ``(where, document)`` pairs, ``where`` naming the
        source line for error reports; call ``progress(k)`` after each ``k`` documents."""

    def takes_as_number(self, field: str, value: Any) -> bool:
        """Whether ``reranker index`` may load ``value`` into the numeric field ``field``
        (``features.numeric_fields``): a JSON number within a float's range, unless the
        engine reads more (Elasticsearch: numbers as text, and dates into a field its
        mapping maps as a date)."""
        from reranker.backends.documents import finite_number

        return finite_number(value)

    def index_exists(self) -> bool | None:
        """Whether the configured index exists already (``reranker index`` then adds to an
        index whose fields earlier runs checked); None when the backend cannot tell."""
        return None

    def health(self) -> dict[str, Any]:
        """A JSON-able description of the backend's state for ``/healthz``."""
        return {"type": self.name}

    def close(self) -> None:  # noqa: B027 -- optional for backends that hold nothing
        """Release resources."""


def numeric_value(value: Any) -> float:
    """A numeric field's value in a hit's document as a float: a JSON number, or a number
    as text (which Elasticsearch indexes as a number, and as which its doc values give
    dates); NaN for anything else (the feature then takes ``features.missing_value``)."""
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return np.nan
        return number if math.isfinite(number) else np.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return np.nan
    try:
        return float(value)
    except OverflowError:
        return np.nan

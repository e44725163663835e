"""The ``none`` backend: the application fetches the candidates itself and hands them to
:meth:`reranker.library.Reranker.rerank`; reranker keeps no index and searches nothing."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from reranker import hookimpl
from reranker.backends import Backend, Candidates, IndexReport, numeric_value
from reranker.backends.documents import field_value
from reranker.core.errors import BackendError, BadRequestError


class ApplicationBackend(Backend):
    """Candidates come from the application (``backend.type: none``)."""

    name = "none"

    def open(self) -> None:
        pass

    def search(self, query: str, n: int, filters=(), facets=()) -> Candidates:
        raise BadRequestError("backend.type is none: the application passes its candidates "
                              "to Reranker.rerank; /search has no engine to ask")

    def index_documents(self, documents: Iterable[tuple[str, dict[str, Any]]], *,
                        recreate: bool = False,
                        progress: Callable[[int], None] | None = None) -> IndexReport:
        raise BackendError("backend.type is none: there is no index to load documents into")

    def health(self) -> dict[str, Any]:
        return {"type": self.name, "status": "ok"}


def candidates_from(items: Any, fields: Sequence[str], numeric_fields: Sequence[str]
                    ) -> Candidates:
    """:class:`Candidates` from the application's list, in its engine's order: each item a
    mapping with ``id`` (string or integer), optionally ``score`` (the engine's score;
    default: falling with the rank), ``field_scores`` (a score per name of
    ``backend.fields``; default 0) and ``source`` (the document, returned with the hit; the
    ``features.numeric_fields`` are read from it: numbers, or numbers as text, as
    Elasticsearch reads them; anything else is missing). A malformed item is a
    :class:`BadRequestError` naming it."""
    if not isinstance(items, list):
        raise BadRequestError(f"'candidates' must be a list, got {type(items).__name__}")
    n = len(items)
    ids, sources = [], []
    scores = np.empty(n)
    field_scores = np.zeros((n, len(fields)))
    numeric = np.full((n, len(numeric_fields)), np.nan)
    for i, item in enumerate(items):
        where = f"'candidates'[{i}]"
        if not isinstance(item, dict):
            raise BadRequestError(f"{where} must be an object with an 'id'")
        unknown = sorted(set(item) - {"id", "score", "field_scores", "source"})
        if unknown:
            raise BadRequestError(f"{where}: unknown field {unknown[0]!r} (known: field_scores, "
                                  f"id, score, source)")
        doc_id = item.get("id")
        if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or doc_id == "":
            raise BadRequestError(f"{where}.id must be a non-empty string or integer")
        ids.append(str(doc_id))
        scores[i] = _number(item.get("score", float(n - i)), f"{where}.score")
        given = item.get("field_scores") or {}
        if not isinstance(given, dict) or set(given) - set(fields):
            raise BadRequestError(f"{where}.field_scores must map names of backend.fields "
                                  f"({', '.join(fields)}) to numbers")
        for j, f in enumerate(fields):
            if f in given:
                field_scores[i, j] = _number(given[f], f"{where}.field_scores.{f}")
        source = item.get("source") or {}
        if not isinstance(source, dict):
            raise BadRequestError(f"{where}.source must be an object")
        sources.append(source)
        for j, f in enumerate(numeric_fields):
            numeric[i, j] = numeric_value(field_value(source, f))
    if len(set(ids)) != n:
        raise BadRequestError("'candidates' holds an id twice")
    return Candidates(ids=ids, scores=scores, field_scores=field_scores, numeric=numeric,
                      load_sources=lambda indices: [sources[i] for i in indices], total=n)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise BadRequestError(f"{where} must be a finite number, got {value!r}")
    return float(value)


@hookimpl
def reranker_register_backends():
    return [ApplicationBackend]

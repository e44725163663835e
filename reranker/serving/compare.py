"""One query side by side (``GET /compare``): the engine's order and each configured arm's
ranking of the same candidates, each hit with its features and its rank in the other
columns, as OpenSearch's Search Relevance Workbench compares two configurations. The
backend is asked once; each arm ranks the candidates as ``POST /explain`` does
(:func:`reranker.serving.explain.arm_page`: the page's order before any randomised pairs);
nothing is logged, so comparing a query teaches no learner anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reranker.serving.explain import arm_model, arm_page, searched

if TYPE_CHECKING:
    from reranker.serving.service import RerankerService

#: Keys of a stored document that name it for a person, the first found shown.
TITLE_KEYS = ("title", "name", "label", "heading")


def compare_search(service: RerankerService, query: Any, size: Any = None,
                   filters: Any = None) -> dict[str, Any]:
    """The top ``size`` of the engine's order and of every arm's ranking of ``query``'s
    candidates: ``columns`` (the engine first), each a list of hits with their
    ``engine_rank``, ``score``, ``features`` (by the names of the service's feature spec)
    and ``ranks``, the hit's rank in each column in the order of ``columns`` (None where it
    is below the top ``size``)."""
    search = searched(service, query, size, filters)
    ids = search.candidates.ids
    names = list(service.spec.names)
    features = {doc_id: dict(zip(names, row.tolist(), strict=True))
                for doc_id, row in zip(ids, search.X, strict=True)}
    engine = [{"id": doc_id, "engine_rank": i + 1, "score": None}
              for i, doc_id in enumerate(ids)]
    columns: list[dict[str, Any]] = [{"label": "engine", "learner": None,
                                      "model_version": None, "decided_by": None,
                                      "order": engine}]
    for arm in service.arms:
        hits, decision = arm_page(service, arm, search)
        model = arm_model(arm)
        columns.append({"label": arm.label, "learner": model["learner"],
                        "model_version": model["model_version"],
                        "decided_by": None if decision is None else decision.get("by"),
                        "order": hits})
    tops = [column.pop("order")[:search.size] for column in columns]
    ranks = [{hit["id"]: rank for rank, hit in enumerate(top, start=1)} for top in tops]
    shown = sorted({hit["engine_rank"] - 1 for top in tops for hit in top})
    titles = dict(zip((ids[i] for i in shown),
                      (_title(source) for source in search.candidates.load_sources(shown)),
                      strict=True)) if shown else {}
    for column, top in zip(columns, tops, strict=True):
        column["hits"] = [{"id": hit["id"], "title": titles.get(hit["id"]), "rank": rank,
                           "engine_rank": hit["engine_rank"], "score": hit["score"],
                           "ranks": [where.get(hit["id"]) for where in ranks],
                           "features": features[hit["id"]],
                           **({"pinned": True} if hit.get("pinned") else {})}
                          for rank, hit in enumerate(top, start=1)]
    return {"query": search.query, "size": search.size, "candidates": len(ids),
            "total": search.candidates.total, "features": names, "columns": columns}


def _title(source: dict[str, Any]) -> str | None:
    for key in TITLE_KEYS:
        value = source.get(key)
        if isinstance(value, str) and value:
            return value
    return None

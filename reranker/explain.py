"""Why a page looks the way it does: each hit's features, raw and normalised, the engine's
score and rank, the learner's score and, for a linear learner, its parts (weight times
feature); for a logged impression also what its clicks did in training (``POST /explain``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .coactive import CoactiveLearner
from .errors import GoneError
from .events import Impression
from .feedback import skip_above_pairs
from .learner import LinearLearner
from .service import check_impression_id

if TYPE_CHECKING:
    from .arms import Arm
    from .service import RerankerService


def explain_search(service: RerankerService, query: Any, size: Any = None,
                   filters: Any = None) -> dict[str, Any]:
    """What the serving model makes of a search, without logging it: the candidates in the
    model's order (its argmax, before any randomised pairs)."""
    from .backends.filters import parse_filters

    query, size, _, _ = service._check_search(query, size, None, None)
    clauses = parse_filters(filters, service.config.backend.filter_fields)
    candidates = service.backend.search(query, service.config.backend.candidates, clauses)
    clicks = None
    if service.spec.click_features:
        clicks = service.events.click_features(query, candidates.ids,
                                               service.config.features.click_smoothing)
    X = service.spec.build(candidates, clicks)
    arm = service.arms[0]
    if service.experiment is not None:
        arm = service.by_label[service.experiment.spec.control]
    hits = _hits(arm, X, candidates.ids, None)
    hits.sort(key=lambda hit: -hit["score"] if hit["score"] is not None else 0.0)
    return {"query": query, **_model(arm), "hits": hits[:size]}


def explain_impression(service: RerankerService, impression_id: Any) -> dict[str, Any]:
    """A logged page as it was shown, with its clicks and what they taught. Only an id the
    service signed is looked up (403 otherwise, counted as ``forged``): ids cannot be guessed
    to read other users' pages; its age and binding do not matter here."""
    check_impression_id(impression_id)
    with service.trust.counting("explain"):
        service.trust.signer.check(impression_id)
    imp = service.events.get_impression(impression_id)
    if imp.features is None:
        raise GoneError(f"impression {impression_id!r} is older than store.retention: its "
                        f"features were dropped, so it cannot be explained any more (its page "
                        f"and clicks still count in its experiment's report)",
                        field="impression_id")
    arm = next((a for a in service.arms if imp.arm in a.names()), service.arms[0])
    shown = imp.shown().tolist()
    hits = _hits(arm, imp.features, imp.doc_ids, imp.feature_names)
    page = [{**hits[i], "rank": imp.offset + r} for r, i in enumerate(shown, start=1)]
    clicked = set(imp.clicked or [])
    for hit in page:
        hit["clicked"] = hit["id"] in clicked
    return {"impression_id": imp.id, "query": imp.query, "learner": imp.learner,
            "model_version": imp.model_version, "arm": imp.arm, "closed": imp.closed_seq
            is not None, **{k: v for k, v in _model(arm).items() if k == "weights"},
            "hits": page, "training": training(service, arm, imp)}


def _model(arm: Arm) -> dict[str, Any]:
    model = arm.model
    out: dict[str, Any] = {"learner": model.learner_name, "model_version": model.version,
                           "arm": arm.label}
    learner = model.learner
    if isinstance(learner, LinearLearner):
        learned, total = learner.learned_weights(), learner.weights()
        out["weights"] = {name: {"learned": float(a), "start": float(b - a),
                                 "total": float(b)}
                          for name, a, b in zip(model.feature_names, learned, total,
                                                strict=True)}
    return out


def _hits(arm: Arm, X_raw: np.ndarray, ids: list[str],
          names: list[str] | None) -> list[dict[str, Any]]:
    model = arm.model
    names = list(names or model.feature_names)
    if tuple(names) != model.feature_names or not len(ids):
        return [{"id": d, "engine_rank": i + 1, "features": dict(zip(names, row.tolist(),
                                                                       strict=True)),
                 "score": None} for i, (d, row) in enumerate(zip(ids, X_raw, strict=True))]
    X = model.normalize(X_raw)
    learner = model.learner
    weights = learner.weights() if isinstance(learner, LinearLearner) else None
    scores = X @ weights if weights is not None else \
        model.rank(X_raw, len(ids), np.random.default_rng(0)).scores
    hits = []
    for i, doc_id in enumerate(ids):
        hit = {"id": doc_id, "engine_rank": i + 1, "engine_score": float(X_raw[i, 0]),
               "features": dict(zip(names, X_raw[i].tolist(), strict=True)),
               "normalized": dict(zip(names, X[i].tolist(), strict=True)),
               "score": float(scores[i])}
        if weights is not None:
            hit["parts"] = dict(zip(names, (X[i] * weights).tolist(), strict=True))
        hits.append(hit)
    return hits


def training(service: RerankerService, arm: Arm, imp: Impression) -> dict[str, Any]:
    """What the impression's clicks did (or will do) in training, and why."""
    clicks = imp.clicked or []
    if imp.offset:
        return {"learns": False, "why": "a later page: learners learn from first pages only, "
                                        "whose order they randomised"}
    if not clicks:
        return {"learns": False, "why": "no click"}
    learned = arm.feedback(imp)
    if learned is None:
        return {"learns": False, "why": "no arm of this configuration learns from this page "
                                        "(another learner, or other settings, showed it)"}
    X, feedback = learned
    learner = arm.model.learner
    if not isinstance(learner, CoactiveLearner):
        return {"learns": True, "why": f"{learner.name} learns from the clicked results "
                                       f"directly", "clicked": clicks}
    improved = learner.improved(feedback)
    if improved is None:
        why = ("the clicks carry no preference: a click teaches only as the lower result of "
               "a randomised pair (the pairing of this page) whose upper result was not "
               "clicked" if learner.swap_probability > 0 else
               "the clicked results were already on top")
        return {"learns": False, "why": why}
    ranking = feedback.ranking
    if learner.swap_probability == 0:  # the coactive rule: clicked over skipped above
        return {"learns": True, "why": "clicked results are preferred to the unclicked ones "
                                       "shown above them",
                "preferences": [{"preferred": imp.doc_ids[a], "over": imp.doc_ids[b]}
                                for a, b in skip_above_pairs(feedback)]}
    preferences = [{"preferred": imp.doc_ids[improved[p]], "over": imp.doc_ids[ranking[p]],
                    "over_rank": p + 1}
                   for p in np.flatnonzero(improved[:imp.n_shown + 1]
                                           != ranking[:imp.n_shown + 1]).tolist()
                   if improved[p] != ranking[p] and ranking[p] == improved[p + 1]
                   and p + 1 < len(ranking)]
    return {"learns": True, "why": "the clicked result of a randomised pair is preferred to "
                                   "the one shown above it", "preferences": preferences}

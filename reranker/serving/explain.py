"""Why a page looks the way it does (``POST /explain``): each hit's features, raw and
normalised, the engine's score and rank, and its score in parts -- the general model's
(for a linear learner, what its learned weights give and what its starting ranking on the
engine's score gives), and the query's own clicks (the click lift a specialised page adds:
docs/algorithms.md, "General model and query specialisation") -- which of them decided the
page, and the numbers behind that decision; for a logged impression also what its clicks
did in training. A mixed page of an experiment (interleaved or multileaved) is explained per
arm: the ranking each arm asked for and its probability, the results it was credited, and
what the page's clicks teach it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from reranker.backends import Candidates
from reranker.backends.filters import parse_filters
from reranker.core.errors import GoneError
from reranker.learners.base import LinearLearner
from reranker.learners.coactive import CoactiveLearner
from reranker.learners.feedback import skip_above_pairs
from reranker.learners.specialization import (
    GATE,
    GENERAL,
    JUDGED,
    QUERY_FEATURE,
    SPECIALISED,
    WEIGHT,
    QueryEvidence,
    gate_confidence,
    general_ranking,
    minmax,
    specialised_scores,
)
from reranker.models.rules import RULES, Plan
from reranker.serving.checks import check_impression_id, check_search
from reranker.stores.events import NOT_LEARNED, Impression

if TYPE_CHECKING:
    from reranker.models.arms import Arm
    from reranker.serving.service import RerankerService


def explain_search(service: RerankerService, query: Any, size: Any = None,
                   filters: Any = None) -> dict[str, Any]:
    """What the serving model makes of a search, without logging it: the candidates in the
    page's order (before any randomised pairs)."""
    search = searched(service, query, size, filters)
    arm = service.arms[0]
    if service.experiment is not None:
        arm = service.by_label[service.experiment.spec.control]
    hits, decision = arm_page(service, arm, search)
    out = {"query": search.query, **arm_model(arm), "decided_by": decision}
    if search.plan:
        out["rules"] = search.plan.describe(
            {hit["id"]: rank for rank, hit in enumerate(hits, 1) if hit.get("pinned")})
    return {**out, "hits": hits[:search.size]}


@dataclass
class Searched:
    """A search made to be explained or compared, not logged: its checked query and size,
    the engine's candidates, their features and the query's own click counts."""

    query: str
    size: int
    candidates: Candidates
    X: np.ndarray
    evidence: QueryEvidence | None
    #: The query rules that match it (hidden documents are already out of the candidates).
    plan: Plan


def searched(service: RerankerService, query: Any, size: Any = None,
             filters: Any = None) -> Searched:
    """Check a search's fields and ask the backend once for its candidates, with their
    features (:meth:`RerankerService.features`); nothing is logged."""
    query, size, _, _ = check_search(query, size, None, None, service.config.server)
    clauses = parse_filters(filters, service.config.backend.filter_fields)
    candidates = service.backend.search(query, service.config.backend.candidates, clauses)
    plan = service.rules.plan(query)
    candidates = service.with_pinned(query, candidates.without(plan.hidden), plan, clauses)
    X, evidence = service.features(query, candidates)
    return Searched(query, size, candidates, X, evidence, plan)


def arm_page(service: RerankerService, arm: Arm, search: Searched
             ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Every candidate of ``search`` in the order of ``arm``'s page (its model's scores,
    refined by the query's own clicks where they judge a pair; before any randomised
    pairs; the query rules' pins applied, those hits marked ``pinned``), each with its
    features and score in parts, and what decided the page."""
    judgment = None
    if search.evidence is not None and arm.spec.specialize:
        judgment = search.evidence.strongest(
            arm.model.evidence_gate.confidence(arm.spec.confidence))
    hits, decision = _hits(arm, search.X, search.candidates.ids, list(service.spec.names),
                           None if judgment is None else judgment.to_dict(), search.evidence)
    hits.sort(key=lambda hit: -hit["score"] if hit["score"] is not None else 0.0)
    if search.plan:  # the query rules, after the arm ranked: pins and hides
        where = {doc_id: i for i, doc_id in enumerate(search.candidates.ids)}
        ranking, ranks = search.plan.pin(
            np.array([where[hit["id"]] for hit in hits], dtype=np.intp), search.candidates.ids)
        by_id = {hit["id"]: hit for hit in hits}
        hits = [by_id[search.candidates.ids[i]] for i in ranking.tolist()]
        for hit in hits:
            if hit["id"] in ranks:
                hit["pinned"] = True
    return hits, decision


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
    if imp.arm is None and isinstance((imp.context or {}).get("arms"), dict):
        return _mixed_page(service, imp)
    arm = next((a for a in service.arms if imp.arm in a.names()), service.arms[0])
    shown = imp.shown().tolist()
    judged = (imp.context or {}).get(SPECIALISED)
    level = (imp.context or {}).get(GATE)
    hits, decision = _hits(arm, imp.features, imp.doc_ids, imp.feature_names, judged, None,
                           float((imp.context or {}).get(WEIGHT, 1.0)),
                           None if level is None else int(level))
    page = [{**hits[i], "rank": imp.offset + r} for r, i in enumerate(shown, start=1)]
    clicked = set(imp.clicked or [])
    for hit in page:
        hit["clicked"] = hit["id"] in clicked
    rules = (imp.context or {}).get(RULES)
    return {"impression_id": imp.id, "query": imp.query, "learner": imp.learner,
            "model_version": imp.model_version, "arm": imp.arm, "closed": imp.closed_seq
            is not None, **{k: v for k, v in arm_model(arm).items()
                                     if k in ("weights", "queries_learned_from")},
            "decided_by": decision, **({"rules": rules} if rules else {}), "hits": page,
            "training": training(service, arm, imp)}


def _mixed_page(service: RerankerService, imp: Impression) -> dict[str, Any]:
    """A mixed page: the page as shown, each result with the arm it was drawn for (its
    team) and its rank in each arm's own ranking; and per arm the ranking it asked for, the
    model version that ranked, the probability of that ranking under the arm's policy (1
    when its ranking is deterministic), the clicks credited to it, and what the page teaches it
    (docs/algorithms.md, "Comparing learners")."""
    context = imp.context or {}
    logged = context["arms"]
    shown = imp.shown().tolist()
    clicked = set(imp.clicked or [])
    teams = list(imp.teams or [])
    ranks = {label: {index: rank for rank, index in enumerate(entry.get("ranking") or [], 1)}
             for label, entry in logged.items()}
    hits = [{"id": imp.doc_ids[i], "rank": imp.offset + r, "engine_rank": i + 1,
             "team": teams[r - 1] if r - 1 < len(teams) else None,
             "clicked": imp.doc_ids[i] in clicked,
             "arm_ranks": {label: rank_of.get(i) for label, rank_of in ranks.items()}}
            for r, i in enumerate(shown, start=1)]
    arms: dict[str, Any] = {}
    for label, entry in logged.items():
        log_prob = entry.get("log_prob")
        out = {"id": entry.get("id"), "model_version": entry.get("model_version"),
               "ranking": [imp.doc_ids[i] for i in entry.get("ranking") or []
                           if 0 <= i < len(imp.doc_ids)],
               "log_prob": log_prob,
               "probability": math.exp(log_prob) if isinstance(log_prob, int | float) else None,
               "credited_clicks": sum(hit["clicked"] and hit["team"] == label for hit in hits)}
        arm = service.by_label.get(label)
        if entry.get("fallback"):
            out["fallback"] = ("the arm's ranking failed: the engine's order took its place "
                               "on the page")
            out["training"] = {"learns": False, "why": "the engine's order stood in for the "
                                                       "arm's ranking on this page"}
        elif arm is None or entry.get("id") not in arm.names():
            out["training"] = {"learns": False, "why": "this arm is no longer configured with "
                                                       "the settings that ranked the page"}
        else:
            out["learner"] = arm.model.learner_name
            out["serving_version"] = arm.model.version
            out["training"] = training(service, arm, imp)
            out["applied"] = imp.closed_seq is not None \
                and arm.model.progress.cursor >= imp.closed_seq
        arms[label] = out
    return {"impression_id": imp.id, "query": imp.query, "learner": imp.learner,
            "model_version": None, "arm": None, "mixed": True,
            "closed": imp.closed_seq is not None, "log_prob": imp.log_prob,
            "probability": math.exp(imp.log_prob) if imp.log_prob is not None else None,
            **({"rules": context[RULES]} if context.get(RULES) else {}),
            "hits": hits, "arms": arms}


def arm_model(arm: Arm) -> dict[str, Any]:
    """The arm's serving model: its learner, version and label, and, for a linear learner,
    its weights (learned, from the starting ranking, and both)."""
    model = arm.model
    out: dict[str, Any] = {"learner": model.learner_name, "model_version": model.version,
                           "arm": arm.label}
    learner = model.learner
    if isinstance(learner, LinearLearner):
        out["weights"] = learner.weight_parts(model.feature_names)
        if learner.shrinks():
            out["queries_learned_from"] = round(learner.query_count(), 1)
    return out


def _hits(arm: Arm, X_raw: np.ndarray, ids: list[str], names: list[str],
          judged: dict | None, evidence: QueryEvidence | None, weight: float | None = None,
          level: int | None = None) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Each candidate's features and score in parts, and what decided the page: the query's
    own clicks when ``judged`` (the judgment that specialised it) is given, their lift
    counting ``weight`` times (a logged page's; default the arm's query weight now), else
    the general model; the query's clicks judged at the evidence gate's ``level`` (a logged
    page's, when it logged one; default the arm's now)."""
    model = arm.model
    names = list(names)
    columns = arm.columns(names)
    if columns is None or not len(ids):
        return [{"id": d, "engine_rank": i + 1, "features": dict(zip(names, row.tolist(),
                                                                       strict=True)),
                 "score": None} for i, (d, row) in enumerate(zip(ids, X_raw, strict=True))], None
    model_names = list(model.feature_names)
    X = model.normalize(X_raw[:, columns])
    learner = model.learner
    linear = isinstance(learner, LinearLearner)
    weights = learner.weights() if linear else None
    start_weights = learner.start_weights() if linear else None
    general = X @ weights if linear else \
        model.rank(X_raw[:, columns], len(ids), np.random.default_rng(0)).scores
    lift = X_raw[:, names.index(QUERY_FEATURE)] if QUERY_FEATURE in names else None
    specialised = judged is not None and lift is not None
    if weight is None:
        weight = model.query_weight.weight
    scores = specialised_scores(general, lift, weight) if specialised else general
    scaled = minmax(general)
    hits = []
    for i, doc_id in enumerate(ids):
        hit = {"id": doc_id, "engine_rank": i + 1, "engine_score": float(X_raw[i, 0]),
               "features": dict(zip(names, X_raw[i].tolist(), strict=True)),
               "normalized": dict(zip(model_names, X[i].tolist(), strict=True)),
               "score": float(scores[i]), "general_score": float(general[i])}
        if linear:
            hit["parts"] = dict(zip(model_names, (X[i] * weights).tolist(), strict=True))
            start = float(X[i] @ start_weights)
            hit["general_parts"] = {"engine": start, "learned": float(general[i]) - start}
        if specialised:
            hit["page_parts"] = {"general_model": float(scaled[i]),
                                 "query_clicks": weight * (float(lift[i]) - 1.0)}
        hits.append(hit)
    return hits, _decision(arm, ids, general, scores, specialised, judged, evidence, X,
                           weights, learner, weight, level)


def _decision(arm: Arm, ids: list[str], general: np.ndarray, scores: np.ndarray,
              specialised: bool, judged: dict | None, evidence: QueryEvidence | None,
              X: np.ndarray, weights: np.ndarray | None, learner,
              query_weight: float, level: int | None = None) -> dict[str, Any]:
    """Which of the engine, the general model and the query's own clicks decided the top of
    the page, with the numbers behind it (``query_weight``: the one the page counts the
    query's click lift with; ``level``: the evidence gate's level its clicks were judged at,
    None for the arm's now)."""
    top = min(10, len(ids))
    engine = list(range(top))
    order = general_ranking(general)[:top].tolist()
    gate = arm.model.evidence_gate
    level = gate.level if level is None else level
    confidence = gate_confidence(arm.spec.confidence, level)
    out: dict[str, Any] = {"confidence": confidence, "evidence_gate": {
        "confidence": confidence, "level": level, "arm_level_now": gate.level,
        "duels_since_last_move": gate.tallies(arm.spec.confidence)}}
    if specialised:
        page = general_ranking(scores)[:top].tolist()
        now = arm.model.query_weight
        out.update(by="query_clicks", judgment={**judged, "doc": ids[int(judged["doc"])]},
                   moved=sum(a != b for a, b in zip(page, order, strict=True)),
                   query_weight={"weight": query_weight, "arm_weight_now": now.weight,
                                 "duels_since_last_move": {"doubled": list(now.doubled),
                                                           "halved": list(now.halved)}},
                   why=f"this query's users click a result {judged['clicked']} than its other "
                       f"results (at {confidence:.0%} confidence): its click lift, "
                       f"weighted {query_weight:g}, refines the general model's order")
        return out
    moved = sum(a != b for a, b in zip(order, engine, strict=True))
    out.update(by="general_model" if moved else "engine", moved_from_engine=moved)
    if weights is not None:
        start = X @ learner.start_weights()
        learned = X @ weights - start
        out["engine_share"] = float(np.abs(start).sum() / max(np.abs(start).sum()
                                                              + np.abs(learned).sum(), 1e-300))
    if not arm.spec.specialize:
        out["why"] = "specialisation is off for this learner (learner.specialize)"
    elif evidence is None or not evidence.any_clicks:
        out["why"] = "no click for this query yet: only the general model ranks it"
    else:
        out["why"] = (f"this query's clicks judge no result better or worse than the others "
                      f"at {confidence:.0%} confidence yet")
    if not moved:
        out["why"] += "; the general model keeps the engine's order at the top"
    return out


def training(service: RerankerService, arm: Arm, imp: Impression) -> dict[str, Any]:
    """What the impression's clicks did (or will do) in training, and why."""
    clicks = imp.clicked or []
    if imp.offset:
        return {"learns": False, "why": "a later page: learners learn from first pages only, "
                                        "whose order they randomised"}
    if not imp.learned:
        return {"learns": False, "why": f"{(imp.context or {})[NOT_LEARNED]}: the site's "
                                        f"order, not a learner's; neither the learners nor "
                                        f"the click features learn from it"}
    if not clicks:
        return {"learns": False, "why": "no click"}
    if arm.factory.learner_cls.capabilities.floor:
        return {"learns": False, "why": f"{arm.model.learner_name} is a floor: it never "
                                        f"learns"}
    learned = arm.feedback(imp)
    if learned is None:
        return {"learns": False, "why": "no arm of this configuration learns from this page "
                                        "(another learner, or other settings, showed it)"}
    context = imp.context or {}
    if SPECIALISED in context and imp.arm in arm.names():
        judged = context.get(JUDGED) or []
        general = context.get(GENERAL) or []
        pairs = [{"preferred": imp.doc_ids[general[u + 1] if lower else general[u]],
                  "over": imp.doc_ids[general[u] if lower else general[u + 1]],
                  "general_rank": u + 1}
                 for u, lower in judged if u + 1 < len(general)]
        if not arm.factory.learner_cls.capabilities.learns_from_mixed_lists:
            return {"learns": False, "why": f"a page this query's clicks specialised: "
                                            f"{arm.model.learner_name} learns only from its own "
                                            f"pages"}
        if not pairs:
            return {"learns": False, "why": "a page this query's clicks specialised, whose "
                                            "judgments cover none of the general model's "
                                            "adjacent pairs"}
        return {"learns": True, "why": "a page this query's clicks specialised teaches the "
                                       "general model the query's judgments at its own "
                                       "ranking, not the order the page showed",
                "judgments": pairs}
    X, feedback = learned
    learner = arm.model.learner
    if not isinstance(learner, CoactiveLearner) and imp.arm is None:
        return {"learns": True, "why": f"{learner.name} learns from the clicks on the mixed "
                                       f"page's randomised pairs, weighted by the swap "
                                       f"probability the page logged", "clicked": clicks}
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
                   if p + 1 < len(ranking) and improved[p] != ranking[p]
                   and ranking[p] == improved[p + 1]]
    return {"learns": True, "why": "the clicked result of a randomised pair is preferred to "
                                   "the one shown above it", "preferences": preferences}

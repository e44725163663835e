"""Ranking a search's candidates for one arm: its model's ranking, guarded (a learner that
raises or is too slow gives way to the engine's order, :class:`LearnerBreaker`), refined by
the query's own clicks where they judge a pair (docs/algorithms.md, "General model and query
specialisation"); and the ranking of a later page, which continues its first page's."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import numpy as np

from reranker.features.clicks.position_bias import (
    PAIR_DEPTH,
    PAIR_OFFSET,
    SWAP_PROBABILITY_KEY,
    SWAPPED,
)
from reranker.features.extraction import feature_columns
from reranker.learners.base import RankResult
from reranker.learners.specialization import (
    QUERY_FEATURE,
    SPECIALISED,
    WEIGHT,
    QueryEvidence,
    specialise,
    specialised_scores,
)
from reranker.models.arms import Arm
from reranker.models.model import RankingModel
from reranker.serving.monitoring import LearnerBreaker
from reranker.serving.page import RankedPage
from reranker.stores.events import NOT_LEARNED, SHOWN_PROPENSITIES, Impression

if TYPE_CHECKING:  # pragma: no cover
    from reranker.backends.options import SortKey

log = logging.getLogger(__name__)

#: The learner and arm of a page served in the backend's order because the arm's learner
#: failed or was too slow: no arm learns from it.
BACKEND_ORDER = "backend_order"
#: The context keys of a page's randomised pairs (a later page carries its first page's).
PAIR_KEYS = (PAIR_OFFSET, SWAPPED, SWAP_PROBABILITY_KEY, PAIR_DEPTH)


class Ranker:
    """Ranks pages for the arms of one service, all drawing on one random generator (its
    bit generator serialises the threads' draws; a generator per search would cost more than
    ranking does)."""

    def __init__(self, arms: list[Arm], names: tuple[str, ...], breaker: LearnerBreaker,
                 fallbacks, rng: np.random.Generator):
        self.arms = arms
        self.by_label: dict[str, Arm] = {label: arm for arm in arms for label in arm.labels}
        self.names = names
        #: The column of the query's own click lift, which specialised pages add.
        self.query_lift = names.index(QUERY_FEATURE) if QUERY_FEATURE in names else -1
        self.breaker = breaker
        #: The counter of pages served in the backend's order, by arm label and reason.
        self.fallbacks = fallbacks
        self.rng = rng
        #: Arms (by id) whose last ranking raised or could not be served, with why: their
        #: searches get the backend's order until one ranks again (``/healthz``).
        self.failures: dict[str, str] = {}

    def page(self, X: np.ndarray, n_shown: int, label: str,
             evidence: QueryEvidence | None = None) -> RankedPage:
        """The page of the arm ``label`` shown alone: its ranking of the candidates ``X``
        (one row each), of which ``n_shown`` are shown."""
        arm = self.by_label[label]
        model = arm.model
        page = RankedPage(model.learner_name, model.version, arm.id, label,
                          teams=[label] * n_shown)
        if X.shape[0]:
            result = self.arm_ranking(arm, model, X, n_shown)
            if result is None:
                return backend_order(X.shape[0], label, "learner")
            result = self.specialised(arm, model, result, X, evidence, n_shown)
            log_prob = result.log_prob
            if log_prob is None and not model.learner.capabilities.stochastic:
                log_prob = 0.0  # a deterministic policy shows its ranking with certainty
            context = result.context
            if result.shown_propensities is not None:
                context = {**(context or {}),
                           SHOWN_PROPENSITIES: result.shown_propensities.tolist()}
            page.ranking, page.scores, page.log_prob = result.ranking, result.scores, log_prob
            page.propensities, page.context = result.propensities, context
        return page

    def arm_ranking(self, arm: Arm, model: RankingModel, X: np.ndarray,
                    n_shown: int) -> RankResult | None:
        """The ranking of ``model``, the arm's as the caller read it (the version the page
        logs is the one that ranked), or None when the backend's order must serve instead:
        its learner raised, or its breaker is open after rankings over the time budget
        (:class:`reranker.serving.monitoring.LearnerBreaker`); logged and counted."""
        if self.breaker.open(arm.id):
            self.fallbacks.labels(arm.labels[0], "slow").inc()
            return None
        started = time.perf_counter()
        columns = arm.columns(self.names)
        if columns is not None and len(columns) != X.shape[1]:
            X = X[:, columns]  # (the model leaves the query's own click lift out)
        try:
            rng = self.rng if model.learner.capabilities.stochastic else None
            result = model.rank(X, n_shown, rng, check=False)  # X is built finite
        except Exception as exc:  # noqa: BLE001 -- any learner failure: the engine's order
            log.exception("learner %s (arm %s) failed to rank %d candidates: the backend's "
                          "order is served", model.learner_name, arm.labels[0], X.shape[0])
            self.fallbacks.labels(arm.labels[0], "error").inc()
            self.failures[arm.id] = f"{type(exc).__name__}: {exc}"
            return None
        self.breaker.timed(arm.id, time.perf_counter() - started)
        if self.failures:  # (empty on the usual path: nothing to do)
            self.failures.pop(arm.id, None)
        return result

    def specialised(self, arm: Arm, model: RankingModel, result: RankResult, X: np.ndarray,
                    evidence: QueryEvidence | None, n_shown: int) -> RankResult:
        """The page of ``arm`` for a search: its ``model``'s own (``result``), or the page
        this query's own clicks specialise when they judge a pair of its candidates, with
        the model's query weight and evidence gate
        (:func:`reranker.learners.specialization.specialise`)."""
        if not self.specialises(arm, evidence):
            return result
        page, _ = specialise(result, X[:, self.query_lift], evidence, n_shown, self.rng,
                             arm.spec.confidence, weight=model.query_weight.weight,
                             gate=model.evidence_gate.level)
        return page

    @staticmethod
    def specialises(arm: Arm, evidence: QueryEvidence | None) -> bool:
        """Whether the query's own clicks may refine ``arm``'s pages (it asks for it, and
        the query has clicks)."""
        return evidence is not None and arm.spec.specialize and evidence.any_clicks

    def continued(self, first: Impression, ids: list[str]) -> RankedPage:
        """A later page's ranking: the first page's, over this search's candidates ``ids``
        (a hit gone from the index since is left out; a new one comes after the rest)."""
        where = {doc_id: i for i, doc_id in enumerate(ids)}
        order = [where[first.doc_ids[i]] for i in first.ranking.tolist()
                 if first.doc_ids[i] in where]
        seen = set(order)
        order += [i for i in range(len(ids)) if i not in seen]
        ranking = np.array(order, dtype=np.intp)
        arm = next((arm for arm in self.arms if first.arm in arm.names()), None)
        # the first page's pairs, so that its swapped pairs on this page are marked
        context = {"continues": first.id, **{key: value for key, value in (
            first.context or {}).items() if key in PAIR_KEYS}}
        return RankedPage(first.learner, first.model_version, first.arm,
                          None if arm is None else arm.labels[0], ranking,
                          scores=self.first_page_scores(arm, first, where, ranking),
                          context=context)

    def first_page_scores(self, arm: Arm | None, first: Impression, where: dict[str, int],
                          ranking: np.ndarray) -> np.ndarray:
        """Per candidate of a later page (``where``: its index by id), the score its arm's
        model gives it on the first page's logged features, as the first page scored it
        (with the query's click lift on a specialised page): the first page's scale, and
        its very scores while no newer model version is served. Minus the rank when that
        cannot be: the arm is gone, its learner fails, or retention dropped the features."""
        scores = -np.argsort(ranking).astype(np.float64)
        if arm is None or first.features is None or not len(first.doc_ids):
            return scores
        X = first.features
        columns = feature_columns(first.feature_names, arm.factory.feature_names)
        if columns is None:
            return scores
        model = arm.model
        try:  # (a failure here costs the page its scores, not its ranking)
            result = model.rank(X[:, columns], first.n_shown, self.rng
                                if model.learner.capabilities.stochastic else None, check=False)
        except Exception:  # noqa: BLE001
            log.exception("learner %s (arm %s) failed to score a later page", model.learner_name,
                          arm.labels[0])
            return scores
        general = np.asarray(result.scores, dtype=np.float64)
        lift = first.feature_names.index(QUERY_FEATURE) \
            if QUERY_FEATURE in first.feature_names else -1
        if SPECIALISED in (first.context or {}) and lift >= 0:
            general = specialised_scores(general, X[:, lift],
                                         float(first.context.get(WEIGHT, 1.0)))
        for i, doc_id in enumerate(first.doc_ids):
            if doc_id in where:
                scores[where[doc_id]] = general[i]
        return scores

    def troubles(self) -> dict[str, dict[str, str]]:
        """Per arm label, why its searches get the backend's order now (``/healthz``)."""
        out = {}
        for arm in self.arms:
            failure = self.failures.get(arm.id)
            if failure is not None:
                out[arm.labels[0]] = {"status": "failing", "error": failure}
            elif self.breaker.open(arm.id):
                out[arm.labels[0]] = {"status": "too slow"}
        return out


def sorted_page(n: int, sort: tuple[SortKey, ...]) -> RankedPage:
    """A page of ``n`` candidates in the engine's order by the ``sort`` keys: logged under
    no arm and as :data:`~reranker.stores.events.NOT_LEARNED`, so that neither a learner nor
    the query's click features take it for evidence (its order is the site's, not a
    ranking of relevance)."""
    ranking = np.arange(n, dtype=np.intp)
    return RankedPage("sorted", -1, BACKEND_ORDER, None, ranking,
                      scores=-ranking.astype(np.float64), log_prob=0.0,
                      context={"sort": [key.to_dict() for key in sort],
                               NOT_LEARNED: "sorted by " + ", ".join(
                                   f"{key.field} {key.order}" for key in sort)})


def backend_order(n: int, label: str, reason: str) -> RankedPage:
    """A page of ``n`` candidates in the backend's order, logged under no arm so that no
    learner takes it for its own."""
    ranking = np.arange(n, dtype=np.intp)
    return RankedPage(BACKEND_ORDER, -1, BACKEND_ORDER, label, ranking,
                      scores=-ranking.astype(np.float64), log_prob=0.0,
                      context={"fallback": reason})

"""The reranking service: one object that searches the backend, builds features, ranks with
the current model (or the experiment's arms), logs the impression, takes feedback and reports
its health, for one configuration. It composes the parts that do each job:

- ranking one arm's page, guarded, and continuing a first page (:mod:`reranker.serving.ranking`);
- mixing the arms of an experiment on one page (:mod:`reranker.serving.mixing`);
- checking a request's fields (:mod:`reranker.serving.checks`) and trusting no client: signed
  impressions, limits, API keys (:mod:`reranker.serving.trust`);
- taking clicks and rewards (:mod:`reranker.serving.feedback`);
- health and readiness (:mod:`reranker.serving.health`).

The HTTP layer (:mod:`reranker.api.app`) and the demo call this object; it knows nothing about
HTTP. Each arm picks up model versions saved by any trainer (in this process or another) by
watching its model folder, and keeps serving the last good model when a newer one fails to
load (:class:`reranker.models.arms.Arm`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pluggy

from reranker.backends import Candidates
from reranker.backends.application import candidates_from
from reranker.backends.filters import filters_key, parse_facets, parse_filters
from reranker.backends.options import parse_highlight, parse_sort, parse_source
from reranker.core.config import Config
from reranker.core.errors import BadRequestError, DeadlineError, NotFoundError, RerankerError
from reranker.core.plugins import backend_class, get_plugin_manager
from reranker.experiments.experiment import Decision, Experiment, experiment_from_config
from reranker.features.clicks import lifts_from_counts, query_key
from reranker.features.extraction import FeatureSpec, kernels
from reranker.learners.specialization import QueryEvidence
from reranker.models.arms import Arm, arms_from_config
from reranker.models.database_store import model_place
from reranker.models.model import ModelFactory, RankingModel
from reranker.models.rules import RULES, Plan, ServedRules
from reranker.models.store import ModelStore
from reranker.models.trainer import Trainer
from reranker.serving.checks import check_offset, check_search
from reranker.serving.feedback import FeedbackDesk
from reranker.serving.health import FeatureWatch, HealthChecks, applied_cursor
from reranker.serving.mixing import mixed_page
from reranker.serving.monitoring import LearnerBreaker, PrometheusMetrics
from reranker.serving.page import RankedPage
from reranker.serving.probes import Deadline
from reranker.serving.ranking import BACKEND_ORDER, Ranker, sorted_page
from reranker.serving.trust import Binding, TrustGuard
from reranker.stores import EventStore, open_event_store
from reranker.stores.events import NOT_LEARNED, ClickResult, Impression, RewardResult

log = logging.getLogger(__name__)

#: Seconds a request that waits on the event store is given beyond ``store.timeout`` (the
#: store's own timeouts answer first when the database answers at all).
STORE_CALL_GRACE = 2.0

#: Seconds a first page's ranking is continued by later pages of the same query, filters and
#: user or session.
PAGE_WINDOW = 3600.0


class RerankerService:
    """Search, rank, log and learn for one configuration: one arm (the ``learner:``
    section), or the arms of an experiment."""

    def __init__(self, config: Config, pm: pluggy.PluginManager | None = None):
        self.config = config
        self.pm = pm or get_plugin_manager()
        self.spec = FeatureSpec.from_config(config)
        self.arms: list[Arm] = arms_from_config(config, self.pm)
        self.factory: ModelFactory = self.arms[0].factory
        self.backend = backend_class(self.pm, config.backend.type)(config)
        self.events: EventStore | None = None
        self.trainer: Trainer | None = None
        self.models: ModelStore = self.arms[0].models
        self.experiment: Experiment | None = None
        #: Signed impression ids, limits and the count of refused requests (opened by open()).
        self.trust: TrustGuard | None = None
        #: Clicks and rewards (opened by open()).
        self.feedback: FeedbackDesk | None = None
        #: Background threads (the trainer) with their stop events, ended by close().
        self.background: list[tuple[threading.Thread, threading.Event]] = []
        self.feature_watch = FeatureWatch(self.spec.names)
        #: The query rules every arm honours (``reranker rules``; :mod:`reranker.models.rules`).
        self.rules = ServedRules(model_place(config.store))
        server = config.server
        self.prometheus = PrometheusMetrics(self)
        self.ranker = Ranker(self.arms, self.spec.names,
                             LearnerBreaker(server.ranking_budget_ms / 1000.0,
                                            server.breaker_strikes, server.breaker_cooldown),
                             self.prometheus.fallbacks, np.random.default_rng(config.learner.seed))
        self.by_label: dict[str, Arm] = self.ranker.by_label
        self.health_checks = HealthChecks(self)
        #: The threads HTTP searches run in, each answered within server.search_timeout.
        self.searches = Deadline(config.server.threads, config.server.search_timeout,
                                 "search")
        #: The threads the other requests that wait on the event store run in (clicks,
        #: rewards, explanations, reports), each answered within store.timeout and a grace:
        #: a server-side timeout cannot end a wait on a database that is frozen.
        self.store_calls = Deadline(config.server.threads,
                                    config.store.timeout + STORE_CALL_GRACE, "store call")

    # -- life cycle -------------------------------------------------------------------------

    def open(self) -> RerankerService:
        """Start-up checks: the backend answers, the store opens, every arm's model loads.
        Raises a :class:`reranker.core.errors.RerankerError` naming the problem."""
        self.backend.open()
        self.rules.load()
        self.events = open_event_store(self.config, self.pm)
        self.trust = TrustGuard.from_config(self.config, self.events, self.prometheus.refused,
                                            self.prometheus.limit_exchanges)
        self.feedback = FeedbackDesk(self.events, self.trust,
                                     self.config.trainer.feedback_window)
        self.trainer = Trainer.from_config(self.config, self.events, self.arms)
        for arm in self.arms:
            arm.prepare()
            self.trainer.check_store(arm.load(), arm.models)
        self.experiment = experiment_from_config(self.config, self.events)
        if self.experiment is not None:
            self.experiment.start_arms(self.arms)
            self.trainer.after_pass = self._guard
        kernels().warm_up()  # compiled (or loaded) before the first search, not during it
        # The request limits' counts are exchanged with the other processes from now on,
        # not from the first request on (reranker.serving.limits).
        self.trust.start_sharing()
        return self

    def close(self) -> None:
        """Stop the background trainers (waiting for a pass under way: closing the store
        under it would pull its connection away), then release the store and backend."""
        for _, stop in self.background:
            stop.set()
        for thread, _ in self.background:
            thread.join(timeout=30)
        self.background.clear()
        try:
            if self.trust is not None:
                self.trust.close()
        finally:
            try:
                if self.events is not None:
                    self.events.close()
            finally:
                self.backend.close()

    @property
    def model(self) -> RankingModel:
        """The newest good model of the first arm (the only one without an experiment)."""
        return self.arms[0].model

    def _guard(self, report) -> None:
        action = self.experiment.guard()
        if action:
            log.warning("experiment %s: %s", self.experiment.spec.name, action)

    # -- requests ---------------------------------------------------------------------------

    def search(self, query: Any, size: Any = None, user_id: Any = None,
               session_id: Any = None, *, filters: Any = None, offset: Any = None,
               facets: Any = None, source: Any = None, highlight: Any = None,
               sort: Any = None, candidates: Candidates | None = None,
               client_address: str | None = None,
               deadline: float | None = None) -> dict[str, Any]:
        """Rank the backend's candidates for ``query`` (that pass ``filters``); log and
        return the page of ``size`` hits after the first ``offset``, and the ``facets``.

        Paging: the learner ranks the candidate window once per query, filters and user (or
        session); a later page (``offset`` > 0) is cut from the ranking of the latest first
        page of the same query, filters and ``user_id`` or ``session_id`` (within
        :data:`PAGE_WINDOW` seconds), so pages neither repeat nor lose a hit. Without a
        user or session, or without that first page, the later page is cut from a new
        ranking.

        ``source`` chooses the fields of each hit's document, ``highlight`` asks for
        highlighted fragments and ``sort`` orders the page by a field instead
        (:mod:`reranker.backends.options`): a sorted page is the engine's order by that
        field, logged, and learned from by no learner.

        ``candidates`` are the application's own (:meth:`rerank`), instead of the
        backend's. The page's ``impression_id`` is signed and bound to ``user_id``, else
        ``session_id`` (:mod:`reranker.serving.trust`); ``client_address`` (the HTTP client's)
        stands
        for the client in the log when neither is given. A search still under way at
        ``deadline`` (``time.monotonic()``; :meth:`search_in_time`) is not logged: its
        caller has been answered 503."""
        query, size, user_id, session_id = check_search(query, size, user_id, session_id,
                                                        self.config.server)
        window = self.config.backend.candidates
        clauses = parse_filters(filters, self.config.backend.filter_fields)
        asked = parse_facets(facets, self.config.backend.filter_fields)
        # (value counts by name, which every backend takes; ranges and stats as asked)
        facet_fields = tuple(f.field if f.values else f for f in asked.values())
        fields = parse_source(source)
        marks = parse_highlight(highlight, self.config.backend.fields)
        sort_keys = parse_sort(sort, self.sortable)
        offset = check_offset(offset, size, window, self.config.server.max_size)
        who = user_id or session_id
        # (a sorted search's later pages are cut from the engine's sorted order itself)
        page_key = None if who is None or sort_keys else hashlib.sha256("\x1f".join(
            (query_key(query), filters_key(clauses), who)).encode("utf-8")).hexdigest()[:32]
        from_backend = candidates is None
        if from_backend:
            n_wanted = max(window, offset + size)
            candidates = self._from_backend(self.backend.search_sorted, query, n_wanted,
                                            clauses, facet_fields, sort_keys) if sort_keys \
                else self._from_backend(self.backend.search, query, n_wanted, clauses,
                                        facet_fields)
        elif clauses or facet_fields or sort_keys or marks:
            name = "filter" if clauses else "facets" if facet_fields else \
                "sort" if sort_keys else "highlight"
            raise BadRequestError(f"{name!r} needs the search backend; the application "
                                  f"filters, counts, sorts and highlights the candidates it "
                                  f"passes itself", field=name)
        plan = self.rules.plan(query)
        if plan.hidden:
            candidates = candidates.without(plan.hidden)
        if from_backend:
            candidates = self.with_pinned(query, candidates, plan, clauses)
        X, evidence = self.features(query, candidates)
        self.feature_watch.watch(X)
        n = len(candidates)
        n_shown = max(0, min(size, n - offset))
        first = None
        if offset and page_key is not None:
            first = self.events.first_page(page_key, time.time() - PAGE_WINDOW)
        if sort_keys:
            page = sorted_page(n, sort_keys)
            decision = Decision((page.label,), False, False)
        elif first is not None:
            page = self.ranker.continued(first, candidates.ids)
            decision = Decision((page.label,), False, False)
        else:
            if self.experiment is None:
                decision = Decision((self.arms[0].label,), False, False)
            else:
                decision = self.experiment.decide(user_id, session_id, self.ranker.rng)
            if decision.mixed and n and not offset:
                page = mixed_page(self.ranker, self.experiment.spec.mode, X, n_shown,
                                  decision.labels, evidence)
            else:
                page = self.ranker.page(X, offset + n_shown, decision.labels[0], evidence)
        # (by candidate: a pin may move the pairs the page swapped)
        swapped = {int(page.ranking[p]) for p in page.swapped_positions(offset + n_shown)}
        page, pinned = self._pin(page, plan, candidates.ids)
        shown = page.ranking[offset: offset + n_shown]
        sources = self._from_backend(candidates.load_sources, shown.tolist())
        highlights = None if marks is None else self._from_backend(
            self.backend.highlight, query, [candidates.ids[i] for i in shown.tolist()],
            sources, marks)
        in_experiment = decision.counted and self.experiment is not None and not offset \
            and page.arm != BACKEND_ORDER and NOT_LEARNED not in (page.context or {})
        impression = Impression(
            id=self.trust.signer.sign(Binding.of(user_id, session_id)), created=time.time(),
            query=query,
            user_id=self.trust.logged_client(user_id, session_id, client_address),
            learner=page.learner, model_version=page.model_version,
            doc_ids=candidates.ids, feature_names=list(self.spec.names), features=X,
            ranking=page.ranking, n_shown=n_shown, log_prob=page.log_prob,
            propensities=page.propensities, context=page.context, arm=page.arm,
            teams=page.teams if in_experiment else None,
            experiment=self.experiment.spec.name if in_experiment else None,
            offset=offset, page_key=page_key)
        if deadline is not None and time.monotonic() > deadline:
            raise DeadlineError("the search took longer than server.search_timeout: it was "
                                "answered 503 and its page is not logged")
        self.events.log_impression(impression)
        scores = page.scores
        hits = [{"id": candidates.ids[i], "rank": rank, "score": _finite(scores[i]),
                 "source": source if fields is None else fields.apply(source)}
                for rank, (i, source)
                in enumerate(zip(shown.tolist(), sources, strict=True), start=offset + 1)]
        for j, (hit, i) in enumerate(zip(hits, shown.tolist(), strict=True)):
            if hit["source"] is None:  # "source": false
                del hit["source"]
            if highlights is not None:
                hit["highlight"] = highlights[j]
            if i in swapped:  # shown out of the order of its score, to learn
                hit["randomised"] = True
            if candidates.ids[i] in pinned:  # shown at the rank a query rule gave it
                hit["pinned"] = True
        answer = {"impression_id": impression.id, "learner": page.learner,
                  "model_version": None if page.arm is None else page.model_version,
                  "total": candidates.total, "from": offset, "hits": hits}
        if facet_fields:  # (the backends answer the most frequent values first)
            answer["facets"] = {
                name: dict(itertools.islice(counts.items(), asked[name].size))
                if name in asked and asked[name].values else counts
                for name, counts in candidates.facets.items()}
        if candidates.aggregations:
            answer["aggregations"] = candidates.aggregations
        if self.experiment is not None:
            answer["experiment"] = impression.experiment
            answer["arm"] = page.label
        return answer

    def with_pinned(self, query: str, candidates: Candidates, plan: Plan,
                     clauses: tuple) -> Candidates:
        """``candidates`` with the documents the rules pin that the search did not retrieve
        (read by id, where they pass the search's filters; a pin adds a result as
        Elasticsearch's pinned query does), at the end: the pin moves them to their
        ranks."""
        if not plan.pins:
            return candidates
        have = set(candidates.ids)
        missing = [doc_id for doc_id, _, _ in plan.pins
                   if doc_id not in have and doc_id not in plan.hidden]
        if not missing:
            return candidates
        extra = self._from_backend(self.backend.fetch, query, missing, clauses)
        return candidates if extra is None else candidates.plus(extra)

    @staticmethod
    def _pin(page: RankedPage, plan: Plan, ids: list[str]) -> tuple[RankedPage, dict[str, int]]:
        """``page`` with the query rules' pins applied, and the rank each pinned document
        took. The rules that matched are logged with the page; a page whose order a pin
        changed is logged as learned from by no learner, and counts in no experiment."""
        if not plan:
            return page, {}
        ranking, ranks = plan.pin(page.ranking, ids)
        context = {**(page.context or {}), RULES: plan.describe(ranks)}
        if not np.array_equal(ranking, page.ranking):
            reason = "ordered by query rule " + ", ".join(
                sorted({rule for doc_id, _, rule in plan.pins if doc_id in ranks}))
            context[NOT_LEARNED] = "; ".join(filter(None, (context.get(NOT_LEARNED), reason)))
        return dataclasses.replace(page, ranking=ranking, context=context), ranks

    @property
    def sortable(self) -> tuple[str, ...]:
        """The fields a search may sort by: the filter and numeric fields."""
        return tuple(dict.fromkeys((*self.config.backend.filter_fields,
                                    *self.config.features.numeric_fields)))

    def search_in_time(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """:meth:`search` within ``server.search_timeout`` seconds, in one of
        ``server.threads`` threads: a :class:`DeadlineError` (503) when it takes longer, or
        at once when every thread still waits on a search that took longer (a stuck engine
        or event store holds those threads, not every request of the process)."""
        timeout = self.config.server.search_timeout
        return self.searches.within(
            self.prometheus.searches_timed_out,
            f"no answer within {timeout:g} s (server.search_timeout): the search engine or "
            f"the event store is slow or stuck (/healthz says which)",
            f"every search thread of this process waits on a search that took longer than "
            f"{timeout:g} s (server.search_timeout): the search engine or the event store is "
            f"stuck (/healthz says which)", self.search, *args, **kwargs)

    def in_time(self, endpoint: str, call: Callable[..., Any], *args: Any,
                **kwargs: Any) -> Any:
        """``call(*args, **kwargs)`` (a request's work that waits on the event store)
        within ``store.timeout`` and :data:`STORE_CALL_GRACE` seconds, in one of
        ``server.threads`` threads: a :class:`DeadlineError` (503) when it takes longer
        (nothing it answers would be acknowledged: a click sent again is counted once), or
        at once when every such thread still waits on one that took longer."""
        timeout = self.store_calls.timeout
        return self.store_calls.within(
            self.prometheus.store_calls_timed_out.labels(endpoint),
            f"no answer within {timeout:g} s (store.timeout and {STORE_CALL_GRACE:g} s): the "
            f"event store is slow or stuck (/healthz says so); not acknowledged: send it "
            f"again later (a click sent twice counts once)",
            f"every thread of this process for the event store waits on a call that took "
            f"longer than {timeout:g} s: the event store is stuck (/healthz says so); send it "
            f"again later", lambda deadline: call(*args, **kwargs))

    def features(self, query: str, candidates: Candidates
                 ) -> tuple[np.ndarray, QueryEvidence | None]:
        """The features of ``candidates`` for ``query`` (one row each, in the feature
        spec's order), with the query's own click counts as evidence when click features
        are on (from clicks logged before this call only)."""
        clicks, evidence = None, None
        if self.spec.click_features:
            counts, total = self.events.click_counts(query, candidates.ids)
            clicks = lifts_from_counts(counts, total[0], total[1],
                                       self.config.features.click_smoothing)
            evidence = QueryEvidence.from_counts(counts)
        return self.spec.build(candidates, clicks), evidence

    def _from_backend(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)``, a request to the search backend: its failures (5xx) counted."""
        try:
            return call(*args)
        except RerankerError as exc:
            if exc.status >= 500:
                self.prometheus.backend_errors.inc()
            raise

    def rerank(self, query: Any, candidates: Any, size: Any = None, user_id: Any = None,
               session_id: Any = None, offset: Any = None) -> dict[str, Any]:
        """Rank candidates the application fetched itself (a list of ``{"id", "score",
        "field_scores", "source"}``, in its engine's order: see
        :func:`reranker.backends.application.candidates_from`); log and return the page as
        :meth:`search` does."""
        given = candidates_from(candidates,
                                [name.split(":", 1)[1] for name in self.spec.query_names],
                                self.config.features.numeric_fields)
        return self.search(query, size, user_id, session_id, offset=offset, candidates=given)

    # -- feedback (reranker.serving.feedback) --------------------------------------------------

    def click(self, impression_id: Any, doc_id: Any, user_id: Any = None,
              session_id: Any = None) -> ClickResult:
        """Record a click on a shown result (:meth:`FeedbackDesk.click`)."""
        return self.feedback.click(impression_id, doc_id, user_id, session_id)

    def click_many(self, clicks: list[dict[str, Any]]) -> list[ClickResult | RerankerError]:
        """Record a batch of clicks (:meth:`FeedbackDesk.click_many`)."""
        return self.feedback.click_many(clicks)

    def reward(self, impression_id: Any, value: Any, user_id: Any = None,
               session_id: Any = None) -> RewardResult:
        """Record the application's reward for a page (:meth:`FeedbackDesk.reward`)."""
        return self.feedback.reward(impression_id, value, user_id, session_id)

    # -- reports ----------------------------------------------------------------------------

    def arm_info(self) -> dict[str, dict[str, Any]]:
        """Per arm label: its id, learner, parameters and serving model version."""
        out = {}
        for arm in self.arms:
            model = arm.model
            for label in arm.labels:
                out[label] = {"id": arm.id, "learner": arm.spec.learner,
                              "params": dict(arm.spec.params), "model_version": model.version,
                              "pinned": arm.pinned,
                              "learns": not arm.factory.learner_cls.capabilities.floor,
                              "progress": model.progress.to_dict()}
        return out

    def experiment_status(self) -> dict[str, Any]:
        """What ``GET /experiments`` answers."""
        if self.experiment is None:
            raise NotFoundError("no experiment is configured (experiment.mode is null)")
        return self.experiment.status(self.arm_info())

    # -- health (reranker.serving.health) ---------------------------------------------------

    def store_writable(self) -> bool:
        """Whether the event store took a write at the last check
        (:meth:`HealthChecks.store_writable`)."""
        return self.health_checks.store_writable()

    def ready(self) -> dict[str, Any]:
        """The readiness check (:meth:`HealthChecks.ready`)."""
        return self.health_checks.ready()

    def health(self) -> dict[str, Any]:
        """The health report (:meth:`HealthChecks.health`)."""
        return self.health_checks.health()

    def shared_trainer(self) -> dict[str, Any] | None:
        """The status the store's trainer keeps in the event store, or None."""
        return self.health_checks.shared_trainer()

    #: How far the trainer has applied an arm's impressions (``/metrics`` reads it).
    applied_cursor = staticmethod(applied_cursor)


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None

"""The reranking service: search the backend, build features, rank with the current model
(or the experiment's arms), log the impression; record clicks; report health and the
experiment's results.

The HTTP layer (:mod:`reranker.api.app`) and the demo call this object; it knows nothing about
HTTP. Each arm picks up model versions saved by any trainer (in this process or another) by
watching its model folder, and keeps serving the last good model when a newer one fails to
load (:class:`reranker.models.arms.Arm`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pluggy

from reranker.backends import Candidates
from reranker.backends.application import candidates_from
from reranker.backends.filters import filters_key, parse_facets, parse_filters
from reranker.core.config import Config
from reranker.core.errors import (
    BadRequestError,
    ConflictError,
    DeadlineError,
    NotFoundError,
    RerankerError,
    shorten,
)
from reranker.core.plugins import backend_class, get_plugin_manager
from reranker.experiments.experiment import Decision, Experiment, experiment_from_config
from reranker.experiments.interleaving import (
    MIXED_PAIR_DEPTH,
    perturb_pairs,
    perturbed_list_log_probability,
    team_draft,
)
from reranker.features.clicks import lifts_from_counts, query_key
from reranker.features.clicks.position_bias import (
    PAIR_DEPTH,
    PAIR_OFFSET,
    SWAP_PROBABILITY_KEY,
    SWAPPED,
)
from reranker.features.extraction import FeatureSpec, kernels
from reranker.learners.base import RankResult
from reranker.learners.specialization import (
    QUERY_FEATURE,
    QueryEvidence,
    specialise,
    specialised_ranking,
)
from reranker.models.arms import Arm, arms_from_config
from reranker.models.budget import CLIENT_PARTS
from reranker.models.model import ModelFactory, RankingModel
from reranker.models.store import ModelStore
from reranker.models.trainer import Trainer
from reranker.serving.monitoring import LearnerBreaker, Metrics
from reranker.serving.page import RankedPage
from reranker.serving.probes import Deadline, Probes, StuckError
from reranker.serving.trust import Binding, TrustGuard, rejection
from reranker.stores import EventStore, open_event_store
from reranker.stores.events import SHOWN_PROPENSITIES, ClickResult, Impression, RewardResult

log = logging.getLogger(__name__)

#: Searches over which features that are always 0 are looked for.
FEATURE_WATCH = 100
#: The learner and arm of a page served in the backend's order because the arm's learner
#: failed or was too slow: no arm learns from it.
BACKEND_ORDER = "backend_order"
#: Seconds a check that the event store takes writes stands for (``/metrics`` reads it).
WRITABLE_CHECK_EVERY = 5.0
#: Seconds a request that waits on the event store is given beyond ``store.timeout`` (the
#: store's own timeouts answer first when the database answers at all).
STORE_CALL_GRACE = 2.0

#: Seconds a first page's ranking is continued by later pages of the same query, filters and
#: user or session.
PAGE_WINDOW = 3600.0
#: Seconds after its issue during which a click or reward on an impression the event store
#: does not have waits for it (every :data:`UNWRITTEN_PAUSE` seconds): a worker process
#: writes its impressions after answering (:mod:`reranker.stores.write_behind`), and the
#: click may reach another worker first.
UNWRITTEN_GRACE = 2.0
UNWRITTEN_PAUSE = 0.02

#: Chance that each randomised pair of a mixed (interleaved) page is swapped: the papers'
#: 0.5, for which the clicks on the pair's two results compare them without position bias.
MIXED_SWAP_PROBABILITY = 0.5

#: What counts as one term of a query for ``server.max_query_terms``: a run of letters and
#: digits, as the engines' default tokenizers split text.
QUERY_TERM = re.compile(r"\w+")


#: Seconds (at least) after which a trainer that has not run while impressions wait, or an
#: impression still open after its feedback window, is a problem in ``/healthz``.
TRAINER_GRACE = 60.0


class RerankerService:
    """Search, rank, log and learn for one configuration: one arm (the ``learner:``
    section), or the arms of an experiment."""

    def __init__(self, config: Config, pm: pluggy.PluginManager | None = None):
        self.config = config
        self.pm = pm or get_plugin_manager()
        self.spec = FeatureSpec.from_config(config)
        #: The column of the query's own click lift, which specialised pages add.
        self._query_lift = self.spec.names.index(QUERY_FEATURE) \
            if QUERY_FEATURE in self.spec.names else -1
        self.arms: list[Arm] = arms_from_config(config, self.pm)
        self.by_label: dict[str, Arm] = {label: arm for arm in self.arms
                                         for label in arm.labels}
        self.factory: ModelFactory = self.arms[0].factory
        self.backend = backend_class(self.pm, config.backend.type)(config)
        self.events: EventStore | None = None
        self.trainer: Trainer | None = None
        self.models: ModelStore = self.arms[0].models
        self.experiment: Experiment | None = None
        #: Signed impression ids, limits and the count of refused requests (opened by open()).
        self.trust: TrustGuard | None = None
        # One generator for every search: its bit generator serialises the threads' draws,
        # and building a generator per search would cost more than ranking does.
        self._rng = np.random.default_rng(config.learner.seed)
        #: Background threads (the trainer) with their stop events, ended by close().
        self.background: list[tuple[threading.Thread, threading.Event]] = []
        self._feature_seen = np.zeros(len(self.spec.names), dtype=bool)
        self._feature_searches = 0
        server = config.server
        self.metrics = Metrics(self)
        self.breaker = LearnerBreaker(server.ranking_budget_ms / 1000.0,
                                      server.breaker_strikes, server.breaker_cooldown)
        #: Arms (by id) whose last ranking raised or could not be served, with why: their
        #: searches get the backend's order until one ranks again (``/healthz``).
        self.rank_failures: dict[str, str] = {}
        self._writable: tuple[float, bool] = (-math.inf, True)
        #: The checks of /healthz and /readyz, each answered within a deadline.
        self.probes = Probes()
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
        self.events = open_event_store(self.config, self.pm)
        self.trust = TrustGuard.from_config(self.config, self.events, self.metrics.refused,
                                            self.metrics.limit_exchanges)
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
               facets: Any = None, candidates: Candidates | None = None,
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

        ``candidates`` are the application's own (:meth:`rerank`), instead of the
        backend's. The page's ``impression_id`` is signed and bound to ``user_id``, else
        ``session_id`` (:mod:`reranker.serving.trust`); ``client_address`` (the HTTP client's)
        stands
        for the client in the log when neither is given. A search still under way at
        ``deadline`` (``time.monotonic()``; :meth:`search_in_time`) is not logged: its
        caller has been answered 503."""
        query, size, user_id, session_id = self._check_search(query, size, user_id,
                                                              session_id)
        window = self.config.backend.candidates
        clauses = parse_filters(filters, self.config.backend.filter_fields)
        facet_fields = parse_facets(facets, self.config.backend.filter_fields)
        if offset is None:
            offset = 0
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise BadRequestError(f"'from' must be a non-negative integer, got "
                                  f"{shorten(offset)}", field="from")
        if offset + size > max(window, self.config.server.max_size):
            raise BadRequestError(f"'from' + 'size' is {offset + size}, more than the "
                                  f"{window} candidates reranked per search "
                                  f"(backend.candidates)", field="from")
        who = user_id or session_id
        page_key = None if who is None else hashlib.sha256("\x1f".join(
            (query_key(query), filters_key(clauses), who)).encode("utf-8")).hexdigest()[:32]
        if candidates is None:
            candidates = self._from_backend(self.backend.search, query,
                                            max(window, offset + size), clauses, facet_fields)
        elif clauses or facet_fields:
            raise BadRequestError("'filter' and 'facets' need the search backend; the "
                                  "application filters the candidates it passes itself",
                                  field="filter" if clauses else "facets")
        clicks, evidence = None, None
        if self.spec.click_features:  # from clicks logged before this search only
            counts, total = self.events.click_counts(query, candidates.ids)
            clicks = lifts_from_counts(counts, total[0], total[1],
                                       self.config.features.click_smoothing)
            evidence = QueryEvidence.from_counts(counts)
        X = self.spec.build(candidates, clicks)
        self._watch_features(X)
        n = len(candidates)
        n_shown = max(0, min(size, n - offset))
        first = None
        if offset and page_key is not None:
            first = self.events.first_page(page_key, time.time() - PAGE_WINDOW)
        if first is not None:
            page = self._continued(first, candidates.ids)
            decision = Decision((page.label,), False, False)
        else:
            if self.experiment is None:
                decision = Decision((self.arms[0].label,), False, False)
            else:
                decision = self.experiment.decide(user_id, session_id, self._rng)
            if decision.mixed and n and not offset:
                page = self._mixed(X, n_shown, decision.labels, evidence)
            else:
                page = self._single(X, offset + n_shown, decision.labels[0], evidence)
        shown = page.ranking[offset: offset + n_shown]
        sources = self._from_backend(candidates.load_sources, shown.tolist())
        in_experiment = decision.counted and self.experiment is not None and not offset \
            and page.arm != BACKEND_ORDER
        impression = Impression(
            id=self.trust.signer.sign(Binding.of(user_id, session_id)), created=time.time(),
            query=query, user_id=self._logged_client(user_id, session_id, client_address),
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
                 "source": source}
                for rank, (i, source)
                in enumerate(zip(shown.tolist(), sources, strict=True), start=offset + 1)]
        answer = {"impression_id": impression.id, "learner": page.learner,
                  "model_version": None if page.arm is None else page.model_version,
                  "total": candidates.total, "from": offset, "hits": hits}
        if facet_fields:
            answer["facets"] = candidates.facets
        if candidates.aggregations:
            answer["aggregations"] = candidates.aggregations
        if self.experiment is not None:
            answer["experiment"] = impression.experiment
            answer["arm"] = page.label
        return answer

    def search_in_time(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """:meth:`search` within ``server.search_timeout`` seconds, in one of
        ``server.threads`` threads: a :class:`DeadlineError` (503) when it takes longer, or
        at once when every thread still waits on a search that took longer (a stuck engine
        or event store holds those threads, not every request of the process)."""
        timeout = self.config.server.search_timeout
        return _within(
            self.searches, self.metrics.searches_timed_out,
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
        return _within(
            self.store_calls, self.metrics.store_calls_timed_out.labels(endpoint),
            f"no answer within {timeout:g} s (store.timeout and {STORE_CALL_GRACE:g} s): the "
            f"event store is slow or stuck (/healthz says so); not acknowledged: send it "
            f"again later (a click sent twice counts once)",
            f"every thread of this process for the event store waits on a call that took "
            f"longer than {timeout:g} s: the event store is stuck (/healthz says so); send it "
            f"again later", lambda deadline: call(*args, **kwargs))

    def _from_backend(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)``, a request to the search backend: its failures (5xx) counted."""
        try:
            return call(*args)
        except RerankerError as exc:
            if exc.status >= 500:
                self.metrics.backend_errors.inc()
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

    def _watch_features(self, X: np.ndarray) -> None:
        """Over the first :data:`FEATURE_WATCH` searches with candidates, note the features
        that are never anything but 0 (a misspelt or empty field): they are reported in
        ``/healthz`` and logged once."""
        if self._feature_searches >= FEATURE_WATCH or not len(X):
            return
        self._feature_seen |= np.any(X != 0, axis=0)
        self._feature_searches += 1
        if self._feature_searches == FEATURE_WATCH:
            zero = self.constant_zero_features()
            if zero:
                log.warning("features %s were 0 for every candidate of the first %d searches: "
                            "check the fields they come from (backend.fields, "
                            "features.numeric_fields) against the documents",
                            ", ".join(zero), FEATURE_WATCH)

    def constant_zero_features(self) -> list[str]:
        """The features 0 for every candidate so far (of the first searches watched)."""
        if not self._feature_searches:
            return []
        return [name for name, seen in zip(self.spec.names, self._feature_seen.tolist(),
                                           strict=True) if not seen]

    def _continued(self, first: Impression, ids: list[str]) -> RankedPage:
        """A later page's ranking: the first page's, over this search's candidates (a hit
        gone from the index since is left out; a new one comes after the rest)."""
        where = {doc_id: i for i, doc_id in enumerate(ids)}
        order = [where[first.doc_ids[i]] for i in first.ranking.tolist()
                 if first.doc_ids[i] in where]
        seen = set(order)
        order += [i for i in range(len(ids)) if i not in seen]
        ranking = np.array(order, dtype=np.intp)
        label = next((arm.labels[0] for arm in self.arms if first.arm in arm.names()), None)
        return RankedPage(first.learner, first.model_version, first.arm, label, ranking,
                          scores=-np.argsort(ranking).astype(np.float64),
                          context={"continues": first.id})

    def _guarded_rank(self, arm: Arm, model: RankingModel, X: np.ndarray,
                      n_shown: int) -> RankResult | None:
        """The ranking of ``model``, the arm's as the caller read it (the version the page
        logs is the one that ranked), or None when the backend's order must serve instead:
        its learner raised, or its breaker is open after rankings over the time budget
        (:class:`reranker.serving.monitoring.LearnerBreaker`); logged and counted."""
        if self.breaker.open(arm.id):
            self.metrics.fallbacks.labels(arm.labels[0], "slow").inc()
            return None
        started = time.perf_counter()
        columns = arm.columns(self.spec.names)
        if columns is not None and len(columns) != X.shape[1]:
            X = X[:, columns]  # (the model leaves the query's own click lift out)
        try:
            rng = self._rng if model.learner.capabilities.stochastic else None
            result = model.rank(X, n_shown, rng, check=False)  # X is built finite
        except Exception as exc:  # noqa: BLE001 -- any learner failure: the engine's order
            log.exception("learner %s (arm %s) failed to rank %d candidates: the backend's "
                          "order is served", model.learner_name, arm.labels[0], X.shape[0])
            self.metrics.fallbacks.labels(arm.labels[0], "error").inc()
            self.rank_failures[arm.id] = f"{type(exc).__name__}: {exc}"
            return None
        self.breaker.timed(arm.id, time.perf_counter() - started)
        if self.rank_failures:  # (empty on the usual path: nothing to do)
            self.rank_failures.pop(arm.id, None)
        return result

    def _backend_order(self, n: int, label: str, reason: str) -> RankedPage:
        """A page in the backend's order, logged under no arm so that no learner takes it
        for its own."""
        ranking = np.arange(n, dtype=np.intp)
        return RankedPage(BACKEND_ORDER, -1, BACKEND_ORDER, label, ranking,
                          scores=-ranking.astype(np.float64), log_prob=0.0,
                          context={"fallback": reason})

    def _specialise(self, arm: Arm, result: RankResult, X: np.ndarray,
                    evidence: QueryEvidence | None, n_shown: int) -> RankResult:
        """The page of ``arm`` for a search: its model's own (``result``), or the page this
        query's own clicks specialise when they judge a pair of its candidates
        (:func:`reranker.learners.specialization.specialise`)."""
        if evidence is None or not arm.spec.specialize or not evidence.any_clicks:
            return result
        lift = X[:, self._query_lift]
        page, _ = specialise(result, lift, evidence, n_shown, self._rng, arm.spec.confidence)
        return page

    def _single(self, X: np.ndarray, n_shown: int, label: str,
                evidence: QueryEvidence | None = None) -> RankedPage:
        """One arm ranks and is shown alone."""
        arm = self.by_label[label]
        model = arm.model
        page = RankedPage(model.learner_name, model.version, arm.id, label,
                          teams=[label] * n_shown)
        if X.shape[0]:
            result = self._guarded_rank(arm, model, X, n_shown)
            if result is None:
                return self._backend_order(X.shape[0], label, "learner")
            result = self._specialise(arm, result, X, evidence, n_shown)
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

    def _mixed(self, X: np.ndarray, n_shown: int, labels: tuple[str, ...],
               evidence: QueryEvidence | None = None) -> RankedPage:
        """Every arm ranks with its own policy; team-draft interleaving (two arms) or
        multileaving (more) mixes their rankings, and randomised pairs on the mixed page let
        every arm learn from it (:func:`reranker.experiments.interleaving.perturb_pairs`).
        Each arm's own ranking and probability are logged with the impression."""
        rankings, logged = [], {}
        for label in labels:
            arm = self.by_label[label]
            model = arm.model
            result = self._guarded_rank(arm, model, X, n_shown)
            if result is None:  # the engine's order takes its place on the page
                rankings.append(np.arange(X.shape[0], dtype=np.intp))
                logged[label] = {"id": BACKEND_ORDER, "model_version": -1,
                                 "ranking": rankings[-1][: max(n_shown, arm.spec.depth)]
                                 .tolist(), "log_prob": 0.0, "fallback": "learner"}
                continue
            if evidence is not None and arm.spec.specialize and evidence.any_clicks \
                    and evidence.strongest(arm.spec.confidence) is not None:
                # the arm's ranking as its own specialised page would order it
                result.ranking = specialised_ranking(result.scores, X[:, self._query_lift])
            rankings.append(result.ranking)
            logged[label] = {"id": arm.id, "model_version": model.version,
                             "ranking": result.ranking[: max(n_shown, arm.spec.depth)].tolist(),
                             "log_prob": result.log_prob}
        ranking, teams = team_draft(rankings, self._rng, length=n_shown)
        ranking, teams, offset, swapped = perturb_pairs(ranking, teams, n_shown, self._rng,
                                                        MIXED_SWAP_PROBABILITY)
        return RankedPage(
            self.experiment.spec.mode, -1, None, None, ranking,
            scores=-np.argsort(ranking).astype(np.float64),
            teams=[labels[t] for t in teams[:n_shown].tolist()],
            log_prob=perturbed_list_log_probability(rankings, ranking[:n_shown],
                                                    MIXED_SWAP_PROBABILITY),
            context={"arms": logged, "interleaving": "team_draft", PAIR_OFFSET: offset,
                     SWAPPED: swapped, SWAP_PROBABILITY_KEY: MIXED_SWAP_PROBABILITY,
                     PAIR_DEPTH: MIXED_PAIR_DEPTH})

    def _check_search(self, query: Any, size: Any, user_id: Any, session_id: Any
                      ) -> tuple[str, int, str | None, str | None]:
        if not isinstance(query, str) or not query or query.isspace():  # no copy of a long one
            raise BadRequestError("'query' must be a non-empty string", field="query")
        self._check_query_bounds(query)
        if size is None:
            size = self.config.server.default_size
        max_size = self.config.server.max_size
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= max_size:
            raise BadRequestError(f"'size' must be an integer from 1 to {max_size}, got "
                                  f"{shorten(size)}", field="size")
        for field, value in (("user_id", user_id), ("session_id", session_id)):
            if value is not None:
                if not isinstance(value, str):
                    raise BadRequestError(f"'{field}' must be a string, got {shorten(value)}",
                                          field=field)
                _check_text(field, value)
        return query, size, user_id, session_id

    def _check_query_bounds(self, query: str) -> None:
        """A query's work and memory grow with its terms (the engine looks every term up in
        every field): ``server.max_query_bytes`` and ``server.max_query_terms`` bound them.
        The bytes are checked first, so counting terms never scans a long text; a text of
        more characters than the limit has bytes (at least one each) is not even encoded."""
        limits = self.config.server
        if len(query) > limits.max_query_bytes \
                or len(_check_text("query", query)) > limits.max_query_bytes:
            raise BadRequestError(f"'query' is longer than {limits.max_query_bytes} bytes of "
                                  f"UTF-8 (server.max_query_bytes)", field="query")
        terms = sum(1 for _ in QUERY_TERM.finditer(query))
        if terms > limits.max_query_terms:
            raise BadRequestError(f"'query' holds {terms} words; at most "
                                  f"{limits.max_query_terms} (server.max_query_terms)",
                                  field="query")

    def click(self, impression_id: Any, doc_id: Any, user_id: Any = None,
              session_id: Any = None) -> ClickResult:
        """Record a click on a shown result; durable when this returns. ``user_id`` and
        ``session_id`` are the ones the search gave: a page served to a user or session
        accepts clicks only with them (:mod:`reranker.serving.trust`)."""
        doc_id = self._check_click(impression_id, doc_id, user_id, session_id)
        with self.trust.counting("click"):
            return self._feedback(self.events.record_click, impression_id, doc_id)

    def click_many(self, clicks: list[dict[str, Any]]) -> list[ClickResult | RerankerError]:
        """Record a batch of clicks, each a mapping as :meth:`click` takes its arguments
        (``impression_id``, ``doc_id``, ``user_id``, ``session_id``), all durable when this
        returns, in as few commits as the store makes of them (``POST /clicks``: an
        application's server forwarding its users' clicks). Each click is checked as
        :meth:`click` checks it; the outcomes come in the clicks' order, a
        :class:`ClickResult` or the error that refused that click alone. An error of the
        store itself (unavailable, full) refuses the whole batch."""
        outcomes: list[ClickResult | RerankerError | None] = [None] * len(clicks)
        checked: list[tuple[int, str, str]] = []
        for i, item in enumerate(clicks):
            impression_id = item.get("impression_id")
            try:
                doc_id = self._check_click(impression_id, item.get("doc_id"),
                                           item.get("user_id"), item.get("session_id"))
            except RerankerError as exc:
                outcomes[i] = exc
                continue
            checked.append((i, impression_id, doc_id))
        now = time.time()
        while checked:
            written = self.events.record_clicks([(imp, doc, now) for _, imp, doc in checked])
            waiting = []
            for click, outcome in zip(checked, written, strict=True):
                if isinstance(outcome, NotFoundError) and self._unwritten(click[1]):
                    waiting.append(click)  # see _feedback
                    continue
                if isinstance(outcome, ConflictError):  # its page was closed and trained on
                    outcome = rejection(self._late(outcome), "replayed")
                    self.trust.count("click", "replayed")
                outcomes[click[0]] = outcome
            if waiting:
                time.sleep(UNWRITTEN_PAUSE)
            checked = waiting
        return outcomes

    def _check_click(self, impression_id: Any, doc_id: Any, user_id: Any,
                     session_id: Any) -> str:
        """A click's fields and trust checks (signature, binding, the page's click limit);
        its ``doc_id`` as a string."""
        check_impression_id(impression_id)
        if isinstance(doc_id, int) and not isinstance(doc_id, bool):
            doc_id = str(doc_id)
        if not isinstance(doc_id, str) or not doc_id:
            raise BadRequestError("'doc_id' must be a non-empty string", field="doc_id")
        _check_text("doc_id", doc_id)
        with self.trust.counting("click"):
            self._verify(impression_id, user_id, session_id)
            self.trust.limit_impression(impression_id)
        return doc_id

    def reward(self, impression_id: Any, value: Any, user_id: Any = None,
               session_id: Any = None) -> RewardResult:
        """Record the application's reward for a page (a purchase, a satisfaction signal),
        which learners of unknown position weights learn from; durable when this returns.
        ``user_id`` and ``session_id`` as for :meth:`click`."""
        check_impression_id(impression_id)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise BadRequestError(f"'value' must be a finite number, got {shorten(value)}",
                                  field="value")
        with self.trust.counting("reward"):
            self._verify(impression_id, user_id, session_id)
            return self._feedback(self.events.record_reward, impression_id, float(value))

    # -- trust (reranker.serving.trust) ------------------------------------------------------------

    def _verify(self, impression_id: str, user_id: Any, session_id: Any) -> None:
        for field, value in (("user_id", user_id), ("session_id", session_id)):
            if value is not None and not isinstance(value, str):
                raise BadRequestError(f"'{field}' must be a string, got {shorten(value)}",
                                      field=field)
            if value is not None:
                _check_text(field, value)  # (a lone surrogate cannot be signed over)
        self.trust.signer.verify(impression_id, user_id, session_id)

    def _feedback(self, write, impression_id: str, *args):
        """``write(impression_id, *args)`` (a click or a reward): a closed page's refusal is
        counted as ``replayed``; an impression the store does not have yet, issued within
        :data:`UNWRITTEN_GRACE` seconds, is waited for (another process may still hold it in
        its queue of impressions to write: :mod:`reranker.stores.write_behind`)."""
        while True:
            try:
                return write(impression_id, *args)
            except ConflictError as exc:  # its page was closed and trained on
                raise rejection(self._late(exc), "replayed") from None
            except NotFoundError:
                if not self._unwritten(impression_id):
                    raise
            time.sleep(UNWRITTEN_PAUSE)

    def _late(self, exc: ConflictError) -> ConflictError:
        """The store's refusal of feedback on a closed page, with the window it missed."""
        window = self.config.trainer.feedback_window
        return ConflictError(f"{exc.message} (a page takes clicks and its reward for "
                             f"trainer.feedback_window, {window:g} s, after its search)",
                             field=exc.field)

    def _unwritten(self, impression_id: str) -> bool:
        """Whether an impression the store does not have may still be on its way: issued
        within :data:`UNWRITTEN_GRACE` seconds (plus one: the issue time is whole
        seconds)."""
        return time.time() - self.trust.signer.issued(impression_id) <= UNWRITTEN_GRACE + 1

    def _logged_client(self, user_id: str | None, session_id: str | None,
                       address: str | None) -> str | None:
        """Who the impression is logged as served to (its ``user_id`` in the store, what
        the trainer bounds per client, :class:`reranker.models.budget.ClientBudget`): the user, else
        ``session:<session_id>``, else ``address:<keyed hash of the address>``; None for an
        in-process search with none. Without API keys the ids are the client's word, so the
        address's key follows them (``<id>\x1faddress:<key>``): the trainer bounds the
        address too, whatever ids it claims."""
        address_key = f"address:{self.trust.signer.address_key(address)}" if address \
            else None
        who = user_id or (f"session:{session_id}" if session_id else None)
        if who is None:
            return address_key
        if address_key is not None and not self.trust.api_keys:
            return f"{who}{CLIENT_PARTS}{address_key}"
        return who

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

    def _queued(self) -> dict[str, Any]:
        """The impressions this process holds for the event store, and why, while they
        wait because it fails (:meth:`reranker.stores.EventStore.impressions_waiting`)."""
        waiting, failure = self.events.impressions_waiting()
        return {"queued_impressions": waiting,
                **({"queue_failing": failure} if failure is not None else {})}

    def store_writable(self) -> bool:
        """Whether the event store took a write at the last check, made at most every
        :data:`WRITABLE_CHECK_EVERY` seconds."""
        checked, writable = self._writable
        if time.monotonic() - checked >= WRITABLE_CHECK_EVERY:
            writable = self._check_writable()
        return writable

    def _check_writable(self) -> bool:
        """A durable write to the event store now (of the store alone: a backend that is
        down says nothing about it), remembered for :meth:`store_writable`."""
        try:
            self.events.check_damage()
            self.events.check_writable()
            writable = True
        except RerankerError as exc:
            log.warning("readiness: %s", exc.message)
            writable = False
        self._writable = (time.monotonic(), writable)
        return writable

    def ready(self) -> dict[str, Any]:
        """The readiness check: the backend answers and the event store takes a write, both
        within the probes' deadline (``stuck`` names a check that gave no answer by then)."""
        outcomes = self.probes.run({"writable": self._check_writable,
                                    "backend": self.backend.health})
        problems, stuck = [], []
        for name, part in (("writable", "events"), ("backend", "backend")):
            outcome = outcomes[name]
            if outcome.stuck is not None:
                stuck.append(part)
            ok = outcome.stuck is None and outcome.error is None and (
                outcome.value is True if name == "writable"
                else outcome.value.get("status", "ok") == "ok")
            if not ok:
                problems.append(part)
        answer = {"status": "unavailable" if problems else "ok", "problems": problems}
        if stuck:
            answer["stuck"] = stuck
        return answer

    def _events_state(self) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """The store trainer's shared status and the event store's state (a health check)."""
        self.events.check_damage()
        shared = self.shared_trainer()
        return shared, self.events.pending(min(self.applied_cursor(arm, shared)
                                               for arm in self.arms))

    def shared_trainer(self) -> dict[str, Any] | None:
        """The status the store's trainer keeps in the event store (whichever process or
        machine runs it: :meth:`reranker.stores.EventStore.record_trainer`), or None."""
        try:
            return self.events.trainer_status()
        except RerankerError:
            return None

    @staticmethod
    def applied_cursor(arm: Arm, shared: dict[str, Any] | None) -> int:
        """How far the trainer has applied ``arm``'s impressions: the newer of the served
        model's cursor and the trainer's own (which a pinned version, or impressions that
        taught nothing and are not saved yet, leave ahead)."""
        cursor = arm.model.progress.cursor
        if shared:
            with contextlib.suppress(TypeError, ValueError, AttributeError):
                cursor = max(cursor, int((shared.get("cursors") or {}).get(arm.id) or 0))
        return cursor

    def _trainer_troubles(self, trainer: dict[str, Any], shared: dict[str, Any] | None,
                          events: dict[str, Any]) -> bool:
        """Whether the store's trainer, wherever it runs, is in trouble, noted in
        ``trainer``: its last pass failed (``shared``), it has not run for a while although
        impressions wait (``stalled_seconds``), or impressions are still open long after
        their feedback window (``overdue_seconds``: no trainer closes them). A while is
        :data:`TRAINER_GRACE` seconds, or ten of its passes' intervals when longer."""
        now = time.time()
        interval = self.config.trainer.interval
        troubled = False
        if shared is not None:
            trainer["shared"] = {"last_run": shared.get("last_run"),
                                 "last_error": shared.get("last_error")}
            with contextlib.suppress(TypeError, ValueError):
                interval = float(shared.get("interval") or interval)
            troubled = bool(shared.get("last_error"))
        grace = max(TRAINER_GRACE, 10 * interval)
        oldest_open = events.get("oldest_open")
        overdue = 0.0 if oldest_open is None else \
            now - oldest_open - self.config.trainer.feedback_window
        if overdue > grace:
            trainer["overdue_seconds"] = round(overdue)
            troubled = True
        last_run = (shared or {}).get("last_run")
        if isinstance(last_run, int | float) and now - last_run > grace and (
                events.get("closed_unapplied") or overdue > 0):
            trainer["stalled_seconds"] = round(now - last_run)
            troubled = True
        return troubled

    def health(self) -> dict[str, Any]:
        """State of the backend, the models, the trainer and the event store; ``status`` is
        ``degraded`` when any of them has a problem."""
        model = self.model
        outcomes = self.probes.run({"backend": self.backend.health,
                                    "events": self._events_state,
                                    "writable": self._check_writable})
        trainer = self.trainer.status()
        problems = []
        try:
            backend = outcomes["backend"].get()
        except StuckError as exc:
            backend = {"status": "stuck", "error": str(exc)}
        if backend.get("status", "ok") != "ok":
            problems.append("backend")
        model_errors = [error for arm in self.arms for error in arm.model_errors]
        if model_errors:
            problems.append("model")
        ranking = {}  # arms whose searches the backend's order serves now
        for arm in self.arms:
            failure = self.rank_failures.get(arm.id)
            if failure is not None:
                ranking[arm.labels[0]] = {"status": "failing", "error": failure}
            elif self.breaker.open(arm.id):
                ranking[arm.labels[0]] = {"status": "too slow"}
        if ranking:
            problems.append("learner")
        shared = None
        try:
            shared, pending = outcomes["events"].get()
            events = {"status": "ok", **pending}
            if not outcomes["writable"].get():  # reads work, writes (clicks) would answer 503
                events["status"] = "unwritable"
                problems.append("events")
        except StuckError as exc:
            events = {"status": "stuck", "error": f"the event store gave {exc}"}
            problems.append("events")
        except RerankerError as exc:
            events = {"status": "damaged" if getattr(exc, "damaged", False) else "unavailable",
                      "error": exc.message}
            problems.append("events")
        events.update(self._queued())
        if self._trainer_troubles(trainer, shared, events) or trainer["last_error"]:
            problems.append("trainer")
        answer = {"status": "degraded" if problems else "ok", "problems": problems,
                  "learner": model.learner_name, "model_version": model.version,
                  "model": {"version": model.version, **model.progress.to_dict()},
                  "pinned": self.arms[0].pinned,
                  "model_errors": model_errors, "backend": backend,
                  "features": {"searches_watched": self._feature_searches,
                               "constant_zero": self.constant_zero_features()},
                  "trainer": trainer, "events": events}
        if ranking:
            answer["ranking"] = ranking
        if len(self.arms) > 1 or self.experiment is not None:
            answer["arms"] = {label: {"id": arm.id, "model_version": arm.model.version,
                                      "pinned": arm.pinned,
                                      **arm.model.progress.to_dict()}
                              for arm in self.arms for label in arm.labels}
        return answer


def _within(pool: Deadline, timed_out: Any, late: str, busy: str, call: Callable[..., Any],
            *args: Any, **kwargs: Any) -> Any:
    """``pool.run(call, ...)``; a :class:`DeadlineError` saying ``late`` when the call took
    longer than the pool's timeout, or ``busy`` when every thread of the pool still waits on
    such a call; each counted in the counter ``timed_out``."""
    try:
        return pool.run(call, *args, **kwargs)
    except TimeoutError:
        timed_out.inc()
        raise DeadlineError(late) from None
    except OverflowError:
        timed_out.inc()
        raise DeadlineError(busy) from None


def check_impression_id(impression_id: Any) -> str:
    """``impression_id`` of a click, reward or explanation: a non-empty string of Unicode
    text."""
    if not isinstance(impression_id, str) or not impression_id:
        raise BadRequestError("'impression_id' must be a non-empty string",
                              field="impression_id")
    _check_text("impression_id", impression_id)
    return impression_id


def _check_text(field: str, value: str) -> bytes:
    """``value`` in UTF-8. JSON allows lone surrogates, and NUL characters, that no UTF-8
    store or engine can hold (PostgreSQL refuses NUL in text): a client error."""
    if "\x00" in value:
        raise BadRequestError(f"'{field}' holds a NUL character", field=field)
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequestError(f"'{field}' is not valid Unicode text (it holds a lone "
                              f"surrogate)", field=field) from None


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None

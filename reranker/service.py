"""The reranking service: search the backend, build features, rank with the current model,
log the impression; record clicks; report health.

The HTTP layer (:mod:`reranker.app`) and the demo call this object; it knows nothing about
HTTP. It picks up model versions saved by any trainer (in this process or another) by
watching the model folder, and keeps serving the last good model when a newer one fails to
load.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from typing import Any

import numpy as np
import pluggy

from .config import Config
from .errors import BadRequestError, ModelLoadError, RerankerError
from .events import ClickResult, EventStore, Impression
from .features import FeatureSpec
from .model import ModelFactory, RankingModel
from .model_store import ModelStore
from .plugins import backend_class, get_plugin_manager
from .trainer import Trainer

log = logging.getLogger(__name__)


class RerankerService:
    """Search, rank, log and learn for one configuration."""

    def __init__(self, config: Config, pm: pluggy.PluginManager | None = None):
        self.config = config
        self.pm = pm or get_plugin_manager()
        self.spec = FeatureSpec.from_config(config)
        self.factory = ModelFactory.from_config(config, self.pm)
        self.backend = backend_class(self.pm, config.backend.type)(config)
        self.events: EventStore | None = None
        self.trainer: Trainer | None = None
        self.models: ModelStore | None = None
        self._model: RankingModel | None = None
        self._model_stamp = -1
        self._model_checked = 0.0
        self._model_tried = -1  # newest version number a reload has looked at
        self._model_errors: list[str] = []
        self._reload_lock = threading.Lock()
        # One generator for every search: its bit generator serialises the threads' draws,
        # and building a generator per search would cost more than ranking does.
        self._rng = np.random.default_rng(config.learner.seed)

    # -- life cycle -------------------------------------------------------------------------

    def open(self) -> RerankerService:
        """Start-up checks: the backend answers, the store opens, a model loads. Raises a
        :class:`reranker.errors.RerankerError` naming the problem."""
        self.backend.open()
        self.events = EventStore(self.config.store.path)
        self.trainer = Trainer.from_config(self.config, self.factory, self.events)
        self.models = self.trainer.models
        stamp = self.models.stamp()
        model, errors = self.models.load_latest(self.factory)
        if model is None:
            if errors:
                raise ModelLoadError("no saved model of learner "
                                     f"{self.config.learner.name!r} loads: " + "; ".join(errors))
            model = self.factory.new()
        self.trainer.check_store(model)
        self._model, self._model_stamp, self._model_errors = model, stamp, errors
        self._model_checked = time.monotonic()
        return self

    def close(self) -> None:
        if self.events is not None:
            self.events.close()
        self.backend.close()

    #: Seconds between full checks of the model folder, in case two saves fell into one tick
    #: of a coarse file-system clock and left its modification time unchanged.
    FULL_CHECK_INTERVAL = 1.0

    @property
    def model(self) -> RankingModel:
        """The newest good model. Checks the model folder for new versions (one stat per
        request); a version that fails to load is reported and the current one kept."""
        stamp = self.models.stamp()
        now = time.monotonic()
        if stamp != self._model_stamp or now - self._model_checked > self.FULL_CHECK_INTERVAL:
            with self._reload_lock:
                self._model_checked = now
                current = self._model.version
                try:
                    newest = max(self.models.versions(), default=-1)
                    if stamp != self._model_stamp or newest > max(current, self._model_tried):
                        self._model_tried = newest  # a refused version is not retried
                        model, errors = self.models.load_latest(self.factory,
                                                                newer_than=current)
                        if model is not None:
                            self._model = model
                        if model is not None or errors:
                            self._model_errors = errors
                except RerankerError as exc:  # an unreadable folder: keep serving
                    log.error("%s", exc.message)
                    self._model_errors = [exc.message]
                self._model_stamp = stamp
        return self._model

    # -- requests ---------------------------------------------------------------------------

    def search(self, query: Any, size: Any = None, user_id: Any = None) -> dict[str, Any]:
        """Rank the backend's candidates for ``query``; log and return the page."""
        query, size, user_id = self._check_search(query, size, user_id)
        candidates = self.backend.search(query, max(self.config.backend.candidates, size))
        clicks = None
        if self.spec.click_features:  # from clicks logged before this search only
            clicks = self.events.click_features(query, candidates.ids,
                                                self.config.features.click_smoothing)
        X = self.spec.build(candidates, clicks)
        model = self.model
        rng = self._rng if model.learner.stochastic else None
        n = len(candidates)
        n_shown = min(size, n)
        if n:
            result = model.rank(X, n_shown, rng)
            ranking, scores = result.ranking, result.scores
            log_prob, propensities = result.log_prob, result.propensities
            context = result.context
        else:
            ranking, scores, log_prob, propensities = np.empty(0, np.intp), np.empty(0), None, None
            context = None
        shown = ranking[:n_shown]
        sources = candidates.load_sources(shown.tolist())
        impression = Impression(
            id=uuid.uuid4().hex, created=time.time(), query=query, user_id=user_id,
            learner=model.learner_name, model_version=model.version, doc_ids=candidates.ids,
            feature_names=list(model.feature_names), features=X, ranking=ranking,
            n_shown=n_shown, log_prob=log_prob, propensities=propensities, context=context)
        self.events.log_impression(impression)
        hits = [{"id": candidates.ids[i], "rank": rank, "score": _finite(scores[i]),
                 "source": source}
                for rank, (i, source)
                in enumerate(zip(shown.tolist(), sources, strict=True), start=1)]
        return {"impression_id": impression.id, "learner": model.learner_name,
                "model_version": model.version, "total": candidates.total, "hits": hits}

    def _check_search(self, query: Any, size: Any, user_id: Any) -> tuple[str, int, str | None]:
        if not isinstance(query, str) or not query.strip():
            raise BadRequestError("'query' must be a non-empty string")
        _check_text("query", query)
        if size is None:
            size = self.config.server.default_size
        max_size = self.config.server.max_size
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= max_size:
            raise BadRequestError(f"'size' must be an integer from 1 to {max_size}, got {size!r}")
        if user_id is not None:
            if not isinstance(user_id, str):
                raise BadRequestError(f"'user_id' must be a string, got {user_id!r}")
            _check_text("user_id", user_id)
        return query, size, user_id

    def click(self, impression_id: Any, doc_id: Any) -> ClickResult:
        """Record a click on a shown result; durable when this returns."""
        if not isinstance(impression_id, str) or not impression_id:
            raise BadRequestError("'impression_id' must be a non-empty string")
        if isinstance(doc_id, int) and not isinstance(doc_id, bool):
            doc_id = str(doc_id)
        if not isinstance(doc_id, str) or not doc_id:
            raise BadRequestError("'doc_id' must be a non-empty string")
        _check_text("impression_id", impression_id)
        _check_text("doc_id", doc_id)
        return self.events.record_click(impression_id, doc_id)

    def health(self) -> dict[str, Any]:
        """State of the backend, the model, the trainer and the event store; ``status`` is
        ``degraded`` when any of them has a problem."""
        model = self.model
        backend = self.backend.health()
        trainer = self.trainer.status()
        problems = []
        if backend.get("status", "ok") != "ok":
            problems.append("backend")
        if self._model_errors:
            problems.append("model")
        if trainer["last_error"]:
            problems.append("trainer")
        try:
            events = {"status": "ok", **self.events.pending(model.progress.cursor)}
        except RerankerError as exc:
            events = {"status": "unavailable", "error": exc.message}
            problems.append("events")
        return {"status": "degraded" if problems else "ok", "problems": problems,
                "learner": model.learner_name, "model_version": model.version,
                "model": {"version": model.version, **model.progress.to_dict()},
                "model_errors": list(self._model_errors), "backend": backend,
                "trainer": trainer, "events": events}


def _check_text(field: str, value: str) -> None:
    """JSON allows lone surrogates that no UTF-8 store or engine can hold: a client error."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequestError(f"'{field}' is not valid Unicode text (it holds a lone "
                              f"surrogate)") from None


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None

"""What an operator watches: Prometheus metrics (``GET /metrics``), JSON log lines, the
redaction of internal details from public answers, and the breaker that serves the
backend's order while a learner fails or is too slow.

The Prometheus metrics (prometheus_client, one registry per service):

- ``reranker_request_seconds{endpoint, status}``: a histogram of request latency;
- ``reranker_clicks_total{outcome}``: clicks accepted (``accepted``, ``duplicate``) and
  rejected, by reason (``invalid``, ``unknown_impression``, ``closed``, ``unavailable``, ...);
- ``reranker_backend_errors_total``: searches the backend failed;
- ``reranker_limit_exchanges_total{outcome}``: exchanges of request counts with the other
  processes of the event store (``ok``, ``failed``: each process then limits on its own);
- ``reranker_learner_fallbacks_total{arm, reason}``: searches served in the backend's order
  because a learner raised (``error``) or its breaker was open (``slow``);
- read when scraped: ``reranker_model_version{arm, learner}``,
  ``reranker_trainer_lag_impressions{arm}`` (closed impressions the trainer has not yet
  applied), ``reranker_trainer_lag_seconds{arm}`` (age of the oldest of them),
  ``reranker_trainer_overdue_seconds`` (how long the oldest open impression has waited past
  its feedback window: no trainer closes impressions while it grows),
  ``reranker_open_impressions`` and ``reranker_store_writable``, and
  ``reranker_refused_total{endpoint, reason}`` (what the trust checks refused, summed over
  worker processes).

With several worker processes (``PROMETHEUS_MULTIPROC_DIR`` set, as prometheus_client's
multiprocess mode asks), the counters and histograms of every worker are summed in each
answer.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily

from reranker.core.errors import RerankerError
from reranker.core.renamed import renamed

log = logging.getLogger(__name__)

#: Latency buckets in seconds: a search takes about a millisecond, a slow backend seconds.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
           10.0)

#: What a click's error status says about it, for the rejected clicks' ``outcome``.
CLICK_REJECTIONS = {400: "invalid", 403: "forged_or_foreign", 404: "unknown_impression",
                    409: "late", 410: "expired", 413: "too_large", 422: "not_shown",
                    429: "rate_limited", 503: "unavailable"}


class PrometheusMetrics:
    """The service's Prometheus metrics (``GET /metrics``), in a registry of its own
    (several services may share a process, as tests and embedding applications do)."""

    def __init__(self, service: Any):
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Histogram("reranker_request_seconds", "Latency of HTTP requests.",
                                  ["endpoint", "status"], buckets=BUCKETS,
                                  registry=self.registry)
        self.clicks = Counter("reranker_clicks", "Clicks by outcome: accepted, duplicate, "
                              "or the reason they were rejected.", ["outcome"],
                              registry=self.registry)
        self.searches_timed_out = Counter("reranker_searches_timed_out", "Searches answered "
                                          "503 because they took longer than "
                                          "server.search_timeout (or every search thread "
                                          "still waited on one that did).",
                                          registry=self.registry)
        self.store_calls_timed_out = Counter(
            "reranker_store_calls_timed_out", "Clicks, rewards, explanations and reports "
            "answered 503 because the event store gave no answer within store.timeout and "
            "a grace (or every thread for them still waited on one that did).", ["endpoint"],
            registry=self.registry)
        self.backend_errors = Counter("reranker_backend_errors", "Searches the backend "
                                      "failed or could not be reached for.",
                                      registry=self.registry)
        self.refused = Counter("reranker_refused", "Requests refused by the trust checks, by "
                               "endpoint and reason (forged, expired, foreign, replayed, "
                               "impression_limit, rate_limited, unauthorized).",
                               ["endpoint", "reason"], registry=self.registry)
        self.cors_refused = Counter("reranker_cors_refused", "Requests from a web page on "
                                    "an origin that server.cors_origins does not list, by "
                                    "endpoint (the browser keeps the answer from the page).",
                                    ["endpoint"], registry=self.registry)
        self.limit_exchanges = Counter("reranker_limit_exchanges", "Exchanges of request "
                                       "counts with the other processes of the event store "
                                       "(security.limits_exchange), by outcome: ok, failed.",
                                       ["outcome"], registry=self.registry)
        self.fallbacks = Counter("reranker_learner_fallbacks", "Searches served in the "
                                 "backend's order because the learner failed (error) or was "
                                 "too slow (slow).", ["arm", "reason"], registry=self.registry)
        # the gauges read from the service when scraped, apart: in multiprocess mode the
        # registry above is summed across the workers' files, and these are not
        self.state = CollectorRegistry(auto_describe=True)
        self.state.register(_ServiceState(service))

    def render(self) -> tuple[bytes, str]:
        """The text exposition of every metric, and its content type."""
        events = self.registry
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            events = CollectorRegistry()
            multiprocess.MultiProcessCollector(events)
        return generate_latest(events) + generate_latest(self.state), CONTENT_TYPE_LATEST

    def click_rejected(self, exc: RerankerError) -> None:
        self.clicks.labels(CLICK_REJECTIONS.get(exc.status, f"status_{exc.status}")).inc()


class _ServiceState:
    """Gauges read from the service when scraped: every process sharing the store reports
    the same values."""

    def __init__(self, service: Any):
        self.service = service

    def describe(self):
        return []

    def collect(self):
        service = self.service
        version = GaugeMetricFamily("reranker_model_version", "Model version each arm serves.",
                                    labels=["arm", "learner"])
        lag = GaugeMetricFamily("reranker_trainer_lag_impressions", "Closed impressions the "
                                "arm's model has not yet learned from.", labels=["arm"])
        age = GaugeMetricFamily("reranker_trainer_lag_seconds", "Age of the oldest closed "
                                "impression the arm's model has not learned from.",
                                labels=["arm"])
        open_ = GaugeMetricFamily("reranker_open_impressions", "Impressions still accepting "
                                  "clicks.")
        writable = GaugeMetricFamily("reranker_store_writable", "1 if the event store took a "
                                     "write at the last check, else 0.")
        queued = GaugeMetricFamily("reranker_impressions_queued", "Impressions this process "
                                   "has logged and not yet written to the event store.")
        overdue = GaugeMetricFamily("reranker_trainer_overdue_seconds", "How long the oldest "
                                    "open impression has waited past its feedback window (no "
                                    "trainer closes impressions while this grows).")
        queued.add_metric([], service.events.queued_impressions)  # before the reads flush
        now = time.time()
        oldest_open = open_count = None
        shared = service.shared_trainer()
        for arm in service.arms:
            model = arm.model
            label = arm.labels[0]
            version.add_metric([label, model.learner_name], model.version)
            try:  # (from where the trainer has applied, not the served, maybe pinned, model)
                pending = service.events.pending(service.applied_cursor(arm, shared))
            except RerankerError:
                continue
            lag.add_metric([label], pending["closed_unapplied"])
            oldest = pending.get("oldest_unapplied")
            age.add_metric([label], max(0.0, now - oldest) if oldest is not None else 0.0)
            open_count, oldest_open = pending["open_impressions"], pending.get("oldest_open")
        if open_count is not None:
            open_.add_metric([], open_count)
            window = service.config.trainer.feedback_window
            overdue.add_metric([], 0.0 if oldest_open is None
                               else max(0.0, now - oldest_open - window))
        writable.add_metric([], 1.0 if service.store_writable() else 0.0)
        yield from (version, lag, age, open_, overdue, writable, queued)


# -- public answers -----------------------------------------------------------------------------

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"),]+")
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/-])/(?:[^\s/'\"():,]+/)+([^\s/'\"():,]+)")


def redact(text: str) -> str:
    """``text`` without internal locations: a URL becomes ``<hidden>``, an absolute path its
    last component (``/srv/reranker/events.sqlite`` -> ``events.sqlite``)."""
    return _ABSOLUTE_PATH.sub(r"\1", _URL.sub("<hidden>", text))


def redact_all(value: Any) -> Any:
    """:func:`redact` over every string of a JSON-like value."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_all(v) for v in value]
    return value


# -- the breaker -------------------------------------------------------------------------------


class LearnerBreaker:
    """Serves the backend's order in place of a learner that fails or is too slow.

    A ranking that raises is replaced by the backend's order at once. A ranking that takes
    longer than ``budget`` seconds counts a strike (a fast one clears them); ``strikes``
    in a row open the breaker for ``cooldown`` seconds, during which the arm's searches are
    served in the backend's order without asking the learner; then the learner gets one
    ranking to show it is fast again (a Python call cannot be stopped half-way, so a slow
    learner costs the few searches that find out)."""

    def __init__(self, budget: float, strikes: int, cooldown: float):
        self.budget, self.strikes, self.cooldown = budget, strikes, cooldown
        self._state: dict[str, tuple[int, float]] = {}  # arm -> (strikes, open until)
        self._lock = threading.Lock()

    def open(self, arm: str) -> bool:
        """True while ``arm``'s searches skip its learner."""
        return self._state.get(arm, (0, 0.0))[1] > time.monotonic()

    def timed(self, arm: str, seconds: float) -> None:
        """Record a ranking's duration."""
        if seconds <= self.budget and self._state.get(arm, (0, 0.0))[0] == 0:
            return  # the usual case, on every search: nothing to record, no lock
        with self._lock:
            count, until = self._state.get(arm, (0, 0.0))
            if seconds <= self.budget:
                self._state[arm] = (0, until)
                return
            count += 1
            if count >= self.strikes:
                log.warning("learner of arm %s took %.0f ms, over its budget of %.0f ms, %d "
                            "times in a row: its searches get the backend's order for %.0f s",
                            arm, seconds * 1000, self.budget * 1000, count, self.cooldown)
                self._state[arm] = (0, time.monotonic() + self.cooldown)
            else:
                self._state[arm] = (count, until)


# -- logs --------------------------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the process id (which worker
    of ``serve --workers``), and the fields a record carries in ``extra`` (a request's
    method, path, status and milliseconds)."""

    FIELDS = ("method", "path", "status", "ms", "endpoint", "arm", "reason")

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(), "logger": record.name, "pid": record.process,
            "message": record.getMessage()}
        for key in self.FIELDS:
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(kind: str, level: int = logging.INFO) -> None:
    """Log lines as ``text`` (for a terminal) or ``json`` (for a log collector, which also
    gets one line per request from ``reranker.access``)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if kind == "json" else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("reranker.access").setLevel(level if kind == "json" else logging.WARNING)


__getattr__ = renamed(__name__, {"Metrics": "PrometheusMetrics"}, globals())

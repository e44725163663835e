"""What a service says about its own health (``GET /healthz``, ``GET /readyz``, the gauges of
``/metrics``): the backend, the models, the learners, the trainer wherever it runs, the event
store (readable, writable, damaged, its queue), and features that are always 0. Every check
runs within the probes' deadline (:mod:`reranker.serving.probes`), so a stuck part is named
instead of holding the answer."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from reranker.core.errors import RerankerError
from reranker.models.arms import Arm
from reranker.serving.probes import Probes, StuckError

if TYPE_CHECKING:
    from reranker.serving.service import RerankerService

log = logging.getLogger(__name__)

#: Searches over which features that are always 0 are looked for.
FEATURE_WATCH = 100
#: Seconds a check that the event store takes writes stands for (``/metrics`` reads it).
WRITABLE_CHECK_EVERY = 5.0
#: Seconds (at least) after which a trainer that has not run while impressions wait, or an
#: impression still open after its feedback window, is a problem in ``/healthz``.
TRAINER_GRACE = 60.0


class FeatureWatch:
    """Over the first :data:`FEATURE_WATCH` searches with candidates, notes the features
    that are never anything but 0 (a misspelt or empty field): they are reported in
    ``/healthz`` and logged once."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.searches = 0
        self._seen = np.zeros(len(names), dtype=bool)

    def watch(self, X: np.ndarray) -> None:
        """Note the features of one search's candidates ``X`` (one row each)."""
        if self.searches >= FEATURE_WATCH or not len(X):
            return
        self._seen |= np.any(X != 0, axis=0)
        self.searches += 1
        if self.searches == FEATURE_WATCH:
            zero = self.constant_zero()
            if zero:
                log.warning("features %s were 0 for every candidate of the first %d searches: "
                            "check the fields they come from (backend.fields, "
                            "features.numeric_fields) against the documents",
                            ", ".join(zero), FEATURE_WATCH)

    def constant_zero(self) -> list[str]:
        """The features 0 for every candidate so far (of the first searches watched)."""
        if not self.searches:
            return []
        return [name for name, seen in zip(self.names, self._seen.tolist(), strict=True)
                if not seen]


def applied_cursor(arm: Arm, shared: dict[str, Any] | None) -> int:
    """How far the trainer has applied ``arm``'s impressions: the newer of the served
    model's cursor and the trainer's own in its ``shared`` status (which a pinned version,
    or impressions that taught nothing and are not saved yet, leave ahead)."""
    cursor = arm.model.progress.cursor
    if shared:
        with contextlib.suppress(TypeError, ValueError, AttributeError):
            cursor = max(cursor, int((shared.get("cursors") or {}).get(arm.id) or 0))
    return cursor


class HealthChecks:
    """The health and readiness of one service's parts."""

    def __init__(self, service: RerankerService):
        self.service = service
        #: The checks of /healthz and /readyz, each answered within a deadline.
        self.probes = Probes()
        self._writable: tuple[float, bool] = (-math.inf, True)

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
        events = self.service.events
        try:
            events.check_damage()
            events.check_writable()
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
                                    "backend": self.service.backend.health})
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

    def shared_trainer(self) -> dict[str, Any] | None:
        """The status the store's trainer keeps in the event store (whichever process or
        machine runs it: :meth:`reranker.stores.EventStore.record_trainer`), or None."""
        try:
            return self.service.events.trainer_status()
        except RerankerError:
            return None

    def _events_state(self) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """The store trainer's shared status and the event store's state (a health check)."""
        events = self.service.events
        events.check_damage()
        shared = self.shared_trainer()
        return shared, events.pending(min(applied_cursor(arm, shared)
                                          for arm in self.service.arms))

    def _queued(self) -> dict[str, Any]:
        """The impressions this process holds for the event store, and why, while they
        wait because it fails (:meth:`reranker.stores.EventStore.impressions_waiting`)."""
        waiting, failure = self.service.events.impressions_waiting()
        return {"queued_impressions": waiting,
                **({"queue_failing": failure} if failure is not None else {})}

    def _trainer_troubles(self, trainer: dict[str, Any], shared: dict[str, Any] | None,
                          events: dict[str, Any]) -> bool:
        """Whether the store's trainer, wherever it runs, is in trouble, noted in
        ``trainer``: its last pass failed (``shared``), it has not run for a while although
        impressions wait (``stalled_seconds``), or impressions are still open long after
        their feedback window (``overdue_seconds``: no trainer closes them). A while is
        :data:`TRAINER_GRACE` seconds, or ten of its passes' intervals when longer."""
        config = self.service.config.trainer
        now = time.time()
        interval = config.interval
        troubled = False
        if shared is not None:
            trainer["shared"] = {"last_run": shared.get("last_run"),
                                 "last_error": shared.get("last_error")}
            with contextlib.suppress(TypeError, ValueError):
                interval = float(shared.get("interval") or interval)
            troubled = bool(shared.get("last_error"))
        grace = max(TRAINER_GRACE, 10 * interval)
        oldest_open = events.get("oldest_open")
        overdue = 0.0 if oldest_open is None else now - oldest_open - config.feedback_window
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
        service = self.service
        model = service.model
        outcomes = self.probes.run({"backend": service.backend.health,
                                    "events": self._events_state,
                                    "writable": self._check_writable})
        trainer = service.trainer.status()
        problems = []
        try:
            backend = outcomes["backend"].get()
        except StuckError as exc:
            backend = {"status": "stuck", "error": str(exc)}
        if backend.get("status", "ok") != "ok":
            problems.append("backend")
        model_errors = [error for arm in service.arms for error in arm.model_errors]
        if model_errors:
            problems.append("model")
        ranking = service.ranker.troubles()  # arms whose searches the backend's order serves
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
                  "pinned": service.arms[0].pinned,
                  "model_errors": model_errors, "backend": backend,
                  "features": {"searches_watched": service.feature_watch.searches,
                               "constant_zero": service.feature_watch.constant_zero()},
                  "trainer": trainer, "events": events}
        if ranking:
            answer["ranking"] = ranking
        if len(service.arms) > 1 or service.experiment is not None:
            answer["arms"] = {label: {"id": arm.id, "model_version": arm.model.version,
                                      "pinned": arm.pinned,
                                      **arm.model.progress.to_dict()}
                              for arm in service.arms for label in arm.labels}
        return answer

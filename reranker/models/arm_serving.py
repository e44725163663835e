"""Which version of an arm a process serves: the pinned one while a pin is honoured, else the
newest good one, picked up from the model store as any trainer (in this process or another)
saves versions, and the problems that stop it from serving what it should
(:attr:`ServedModel.model_errors`, which ``/healthz`` reports)."""

from __future__ import annotations

import logging
import threading
import time

from reranker.core.errors import ModelLoadError, RerankerError
from reranker.models.model import ModelFactory, RankingModel
from reranker.models.store import ModelStore

#: The errors keep the logger they have always had (from when one module held all of an arm):
#: operators filter their logs and alerts by it.
log = logging.getLogger("reranker.models.arms")


class ServedModel:
    """The model one process serves for an arm (``label``, ``arm_id``: how messages name
    it) whose versions and pin ``models`` holds. It reads the store; it never writes it."""

    def __init__(self, models: ModelStore, factory: ModelFactory, label: str, arm_id: str):
        self.models = models
        #: Seconds between full checks of the model store: the store's own
        #: (``full_check_interval``: every second for a folder, in case two saves fell into
        #: one tick of a coarse file-system clock; a safety net for the database, whose
        #: changes are notified).
        self.FULL_CHECK_INTERVAL = models.full_check_interval
        self.factory = factory
        self.label = label
        self.arm_id = arm_id
        self._model: RankingModel | None = None
        self._stamp = -1
        self._checked = 0.0
        self._tried = -1  # newest version number a reload has looked at
        #: Why the process does not serve what it should: versions that do not load, a pin
        #: that cannot be honoured, an unreadable store.
        self.model_errors: list[str] = []
        self._lock = threading.Lock()
        #: The pinned version as last read from the pin (None: not pinned).
        self._pinned: int | None = None
        #: Why the pin cannot be honoured (its version does not load, or the pin file holds
        #: no version), while it cannot.
        self._pin_problem: str | None = None

    def load(self) -> RankingModel:
        """Load the model to serve: the pinned version when one is pinned, else the newest
        good one (a fresh one when there is none; raise when saved versions exist and none
        loads). A pin that cannot be honoured (its version does not load, or the pin file
        holds no version) does not stop the start: the newest good version serves, and
        :attr:`model_errors` says why."""
        stamp = self.models.stamp()
        pinned, problem = self.models.pin_state()
        model = None
        if pinned is not None:
            try:
                model, errors = self.models.load(pinned, self.factory), []
            except ModelLoadError as exc:
                problem = f"pinned version {pinned} does not load: {exc.message}"
        if model is None:
            model, errors = self.models.load_latest(self.factory)
        if model is None:
            if errors:
                raise ModelLoadError(f"no saved model of arm {self.label!r} ({self.arm_id}) "
                                     f"loads: " + "; ".join(errors))
            model = self.factory.new()
        self._model, self._stamp, self.model_errors = model, stamp, errors
        self._pinned, self._pin_problem = pinned, problem
        if problem is not None:
            self.model_errors = [self._unhonoured(problem), *errors]
            log.error("%s", self.model_errors[0])
        self._checked = time.monotonic()
        return model

    @property
    def model(self) -> RankingModel:
        """The model to serve: the pinned version while one is pinned, else the newest good
        one. Checks the model store for new versions and pin changes (one stat per request,
        and a full check every :attr:`FULL_CHECK_INTERVAL` seconds); a version that fails to
        load is reported and the current one kept."""
        stamp = self.models.stamp()
        now = time.monotonic()
        if stamp != self._stamp or now - self._checked > self.FULL_CHECK_INTERVAL:
            with self._lock:
                self._checked = now
                try:
                    self._refresh(changed=stamp != self._stamp)
                except RerankerError as exc:  # an unreadable folder or pin: keep serving
                    log.error("%s", exc.message)
                    self.model_errors = [exc.message]
                self._stamp = stamp
        return self._model

    @property
    def pinned(self) -> int | None:
        """The version pinned for this arm when the model was last checked, or None."""
        return self._pinned

    def _refresh(self, changed: bool) -> None:
        """Switch to the pinned version, or to the newest good one (``changed``: the store's
        stamp moved since the last check)."""
        pinned, problem = self.models.pin_state()
        if problem is not None:  # a pin file that holds no version: the newest serves
            if changed or problem != self._pin_problem:
                self._serve_newest(problem)
            self._pinned, self._pin_problem = None, problem
            return
        if pinned is not None:
            self._follow_pin(pinned, changed)
            return
        current = self._model.version
        if self._pinned is not None or self._pin_problem is not None:
            # unpinned: back to the newest good version
            self._pinned, self._tried, self._pin_problem = None, -1, None
            model, errors = self.models.load_latest(self.factory)
            if model is not None:
                self._model = model
            self.model_errors = errors
            return
        newest = max(self.models.versions(), default=-1)
        if changed or newest > max(current, self._tried):
            self._tried = newest  # a refused version is not retried
            model, errors = self.models.load_latest(self.factory, newer_than=current)
            if model is not None:
                self._model = model
            if model is not None or errors:
                self.model_errors = errors

    def _follow_pin(self, pinned: int, changed: bool) -> None:
        """Serve the pinned version (the newest good one while it does not load)."""
        if pinned != self._model.version and (changed or pinned != self._pinned):
            try:
                self._model = self.models.load(pinned, self.factory)
                self.model_errors, self._pin_problem = [], None
            except ModelLoadError as exc:  # the newest good version serves
                self._pin_problem = f"pinned version {pinned} does not load: {exc.message}"
                self._serve_newest(self._pin_problem)
        elif pinned == self._model.version:  # served from memory: is its file still there?
            gone = [] if self.models.has(pinned) else [pinned_gone(self.models, pinned)]
            if gone and self.model_errors != gone:  # (said once)
                log.error("%s", gone[0])
            self.model_errors = gone
        self._pinned = pinned

    def _unhonoured(self, problem: str) -> str:
        return (f"arm {self.label!r} ({self.arm_id}): the pin cannot be honoured: {problem}; "
                f"serving the newest good version, {self._model.version}, instead: pin a "
                f"version that loads (`reranker models pin VERSION`) or serve the newest "
                f"(`reranker models unpin`)")

    def _serve_newest(self, problem: str) -> None:
        """A pin that cannot be honoured: serve the newest good version, and say why."""
        model, errors = self.models.load_latest(self.factory)
        if model is not None:
            self._model = model
        message = self._unhonoured(problem)
        if not self.model_errors or self.model_errors[0] != message:  # (said once)
            log.error("%s", message)
        self.model_errors = [message, *errors]


def pinned_gone(models: ModelStore, pinned: int) -> str:
    """The problem of a pin whose version's file is gone."""
    return (f"pinned version {pinned} is gone from {models.location} (deleted): a "
            f"process serving it keeps it in memory, one that starts now refuses to; pin "
            f"another version (`reranker models pin`) or unpin")

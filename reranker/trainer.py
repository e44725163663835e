"""The trainer: closes impressions whose feedback window has passed, turns their clicks into
feedback, updates the model and saves a new version.

Exactly-once: the model file records the ``closed_seq`` it has applied through (its
cursor). A pass loads the newest good model, applies the closed impressions after its
cursor in order and saves version ``newest + 1`` atomically. A crash before the save loses
nothing (the impressions are applied again from the old cursor); a crash after it repeats
nothing. A file lock keeps two trainers (``serve``'s and ``reranker train``) from racing, and
the model store refuses to overwrite a version as a second line of defence.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from .errors import StoreError
from .events import EventStore, Impression
from .feedback import feedback_from_clicks
from .model import ModelFactory, RankingModel
from .model_store import ModelStore

log = logging.getLogger(__name__)


@dataclass
class TrainReport:
    """What one training pass did."""

    closed: int = 0  # impressions whose window closed in this pass
    applied: int = 0  # impressions applied
    clicks: int = 0  # clicks in them
    updates: int = 0  # impressions that changed the model
    skipped: int = 0  # impressions passed over: another feature set, or a failed update
    versions: list[int] = field(default_factory=list)  # versions saved
    model_errors: list[str] = field(default_factory=list)  # newer versions that failed to load

    @property
    def version(self) -> int | None:
        return self.versions[-1] if self.versions else None


class Trainer:
    """Applies closed impressions to the model of one learner."""

    def __init__(self, factory: ModelFactory, events: EventStore, models: ModelStore, *,
                 feedback_window: float, batch_size: int = 500,
                 clock: Callable[[], float] = time.time):
        self.factory = factory
        self.events = events
        self.models = models
        self.feedback_window = feedback_window
        self.batch_size = batch_size
        self.clock = clock
        self.last_report: TrainReport | None = None
        self.last_error: str | None = None
        self.last_run: float | None = None

    @classmethod
    def from_config(cls, config, factory: ModelFactory, events: EventStore) -> Trainer:
        models = ModelStore(config.store.models, factory.learner_cls.name,
                            keep=config.store.keep_models)
        return cls(factory, events, models, feedback_window=config.trainer.feedback_window,
                   batch_size=config.trainer.batch_size)

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        lock_path = self.models.dir / ".trainer.lock"
        try:
            self.models.dir.mkdir(parents=True, exist_ok=True)
            handle = open(lock_path, "a+b")
        except OSError as exc:
            raise StoreError(f"store.models: cannot use {lock_path}: {exc}") from exc
        with handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def check_store(self, model: RankingModel) -> None:
        """Refuse a model whose cursor belongs to another event log: continuing would skip
        or repeat impressions."""
        progress = model.progress
        if progress.store_id is not None and progress.store_id != self.events.store_id:
            raise StoreError(
                f"model version {model.version} in {self.models.dir} was trained from another "
                f"event store than {self.events.path}; point store.models at a new folder (to "
                f"start afresh) or store.path at the event store it was trained from")
        if progress.cursor > self.events.last_closed_seq():
            raise StoreError(
                f"model version {model.version} in {self.models.dir} has applied impressions "
                f"up to number {progress.cursor}, but {self.events.path} has only "
                f"{self.events.last_closed_seq()}; the event store was reset or replaced")

    def run_once(self, *, close_all: bool = False) -> TrainReport:
        """Close the impressions whose window has passed (all open ones with ``close_all``)
        and apply every closed impression not yet in the model."""
        report = TrainReport()
        with self._exclusive():
            model, report.model_errors = self.models.load_latest(self.factory)
            if model is None:
                model = self.factory.new()
            self.check_store(model)
            model.progress.store_id = self.events.store_id
            before = float("inf") if close_all else self.clock() - self.feedback_window
            report.closed = self.events.close_impressions(before)
            next_version = max(self.models.versions(), default=0) + 1
            while True:
                batch = self.events.closed_since(model.progress.cursor, self.batch_size)
                if not batch:
                    break
                for imp in batch:
                    self._apply(model, imp, report)
                model.version = next_version
                self.models.save(model)
                report.versions.append(next_version)
                next_version += 1
        self.last_report = report
        self.last_run = self.clock()
        return report

    def _apply(self, model: RankingModel, imp: Impression, report: TrainReport) -> None:
        progress = model.progress
        progress.cursor = imp.closed_seq
        if tuple(imp.feature_names) != model.feature_names:
            # Logged under another feature configuration: its weights would mean nothing here.
            log.warning("impression %s skipped: logged with features %s, the model has %s",
                        imp.id, imp.feature_names, list(model.feature_names))
            progress.skipped += 1
            report.skipped += 1
            return
        index = {doc_id: i for i, doc_id in enumerate(imp.doc_ids)}
        clicked = np.array([index[d] for d in imp.clicked or [] if d in index], dtype=np.intp)
        feedback = feedback_from_clicks(imp.ranking, imp.n_shown, clicked,
                                        log_prob=imp.log_prob, propensities=imp.propensities,
                                        context=imp.context)
        changed = False
        if len(imp.doc_ids):
            snapshot = model.snapshot()
            try:
                with np.errstate(over="raise", invalid="raise", divide="raise"):
                    changed = model.learn(imp.features, feedback)
            except (ValueError, ArithmeticError) as exc:
                # One impression that breaks the update must not stop learning for good:
                # undo it, count it, and go on.
                model.restore(snapshot)
                log.warning("impression %s skipped: its update failed (%s)", imp.id, exc)
                progress.skipped += 1
                report.skipped += 1
                return
        progress.impressions += 1
        progress.clicks += len(clicked)
        progress.updates += int(changed)
        report.applied += 1
        report.clicks += len(clicked)
        report.updates += int(changed)

    def run_pass(self) -> TrainReport | None:
        """One background pass: :meth:`run_once`, with any error logged and kept in
        :attr:`last_error` (reported by ``/healthz``) instead of raised."""
        try:
            report = self.run_once()
        except Exception as exc:  # noqa: BLE001 -- the background loop must survive
            self.last_error = str(getattr(exc, "message", exc))
            self.last_run = self.clock()
            log.exception("training pass failed")
            return None
        self.last_error = None
        if report.versions:
            log.info("trained on %d impressions (%d clicks, %d updates, %d skipped): model "
                     "version %d", report.applied, report.clicks, report.updates, report.skipped,
                     report.version)
        return report

    def run_forever(self, stop: threading.Event, interval: float) -> None:
        """A pass every ``interval`` seconds until ``stop`` is set; a failed pass is retried
        from the saved cursor at the next one."""
        while not stop.is_set():
            self.run_pass()
            stop.wait(interval)

    def status(self) -> dict:
        """For ``/healthz``: when the last pass ran, what it saved, and its error if any."""
        report = self.last_report
        return {"last_run": self.last_run, "last_error": self.last_error,
                "last_saved_version": report.version if report else None,
                "last_skipped": report.skipped if report else 0}

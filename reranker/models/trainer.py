"""The trainer: closes impressions whose feedback window has passed, turns their clicks into
feedback, updates each arm's model and saves a new version of it.

Exactly-once: the model file records the ``closed_seq`` it has applied through (its
cursor). A pass loads the newest good model, applies the closed impressions after its
cursor in order and, when they taught it something, saves the next version number (never
one used before) atomically. A crash before the save loses
nothing (the impressions are applied again from the old cursor); a crash after it repeats
nothing. A file lock keeps two trainers of one machine (``serve``'s and ``reranker train``)
from racing, the event store's lock (:meth:`reranker.stores.EventStore.trainer_lock`) does
the same for trainers on several machines sharing a PostgreSQL store, and the model store
refuses to overwrite a version as a second line of defence.

Retention (``store.retention``): every ``store.retention_interval`` seconds the background
trainer removes the impressions older than the retention age that every arm's newest saved
version has applied (:meth:`Trainer.retain`); ``reranker prune`` does the same on demand.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from reranker.core.errors import ModelStoreError, RerankerError, StoreError
from reranker.features.clicks import query_key
from reranker.learners.specialization import (
    GATE,
    GATE_DUELS,
    SPECIALISED,
    WEIGHT,
    WEIGHT_DUELS,
    duel_outcomes,
)
from reranker.models.budget import ClientBudget
from reranker.models.model import RankingModel
from reranker.models.store import ModelStore
from reranker.stores import EventStore, Reader, Retained
from reranker.stores.events import Impression

if TYPE_CHECKING:
    from reranker.models.arm_processes import ArmProcesses
    from reranker.models.arms import Arm

log = logging.getLogger(__name__)

#: Seconds between two records of a training loop's status in the event store (one that
#: fails, or succeeds again, is recorded at once): ``/healthz`` allows a minute at least.
RECORD_EVERY = 5.0


@dataclass
class TrainReport:
    """What one training pass did (for every arm, with each arm's own report in ``arms``)."""

    closed: int = 0  # impressions whose window closed in this pass
    applied: int = 0  # impressions applied
    clicks: int = 0  # clicks in them
    updates: int = 0  # impressions that changed the model
    skipped: int = 0  # impressions passed over: another feature set, or a failed update
    bounded: int = 0  # impressions passed over: their client's budget was spent (models/budget.py)
    #: impressions passed over so that every query weighs alike (models/balance.py)
    balanced: int = 0
    versions: list[int] = field(default_factory=list)  # versions saved
    #: Impressions applied after the last version saved, which taught nothing: the next
    #: pass reads them again (the saved cursor is before them). Summed over the arms in a
    #: pass's report; per arm in ``arms``.
    unsaved: int = 0
    model_errors: list[str] = field(default_factory=list)  # newer versions that failed to load
    arms: dict[str, TrainReport] = field(default_factory=dict)  # by arm label
    #: Arms whose training failed in this pass (by label): what failed, naming the arm and
    #: its learner. The other arms trained; the failed one applies its impressions again
    #: from its saved cursor in the next pass.
    errors: dict[str, str] = field(default_factory=dict)
    #: Clicks that taught nothing, by reason (see :func:`uninformative_reason`).
    uninformative: dict[str, int] = field(default_factory=dict)
    #: An arm's report: the last impression the pass applied (saved or not).
    cursor: int = 0

    @property
    def version(self) -> int | None:
        return self.versions[-1] if self.versions else None

    def add(self, label: str, report: TrainReport) -> None:
        self.arms[label] = report
        for key in ("applied", "clicks", "updates", "skipped", "bounded", "balanced"):
            setattr(self, key, getattr(self, key) + getattr(report, key))
        self.versions.extend(report.versions)
        self.unsaved += report.unsaved
        self.model_errors.extend(report.model_errors)
        for reason, count in report.uninformative.items():
            self.uninformative[reason] = self.uninformative.get(reason, 0) + count


class Trainer:
    """Applies closed impressions to the models of the arms, each arm only what it may learn
    from (:meth:`reranker.models.arms.Arm.feedback`)."""

    def __init__(self, arms: list[Arm], events: EventStore, *, feedback_window: float,
                 batch_size: int = 500, clock: Callable[[], float] = time.time,
                 client_budget: int = 0, client_window: float = 3600.0,
                 address_budget: int = 0, query_budget: int = 0,
                 retention: float | None = None, retention_interval: float = 600.0,
                 keep_experiment: str | None = None):
        self.arms = list(arms)
        #: Seconds after which applied impressions are removed (None: never), how often the
        #: background loop does it, and the experiment whose impressions are compacted
        #: instead (:meth:`retain`).
        self.retention = retention
        self.retention_interval = retention_interval
        self.keep_experiment = keep_experiment
        self.last_retained: float | None = None
        #: Clicked impressions of one client per window learned from (0: no bound).
        self.client_budget = client_budget
        self.client_window = client_window
        #: Clicked impressions of one network address per window learned from (0: no bound).
        self.address_budget = address_budget
        #: Clicked impressions of one query per window learned from (0: no bound).
        self.query_budget = query_budget
        #: Per arm id, the per-client bound on what it learns (:class:`ClientBudget`).
        self.budgets: dict[str, ClientBudget] = {}
        self.events = events
        self.feedback_window = feedback_window
        self.batch_size = batch_size
        self.clock = clock
        self.last_report: TrainReport | None = None
        #: The version this trainer saved last, in whichever pass (most passes save none).
        self.last_saved_version: int | None = None
        self.last_error: str | None = None
        self._arm_errors: dict[str, str] = {}  # by arm label: the last failure logged
        self.interval: float | None = None  # of the background loop, when one runs
        self._recorded: tuple[float, str | None] = (-math.inf, None)  # when, and the error
        self.last_run: float | None = None
        #: With a leader-mode background loop: whether this process is the store's trainer
        #: (None: no such loop).
        self.leading: bool | None = None
        #: Called after every pass that saved a version (the experiment's guard).
        self.after_pass: Callable[[TrainReport], None] | None = None
        #: The processes that apply the arms' impressions, when they learn at once
        #: (:meth:`train_in_processes`); None: this process applies them.
        self.processes: ArmProcesses | None = None

    @property
    def models(self) -> ModelStore:
        """The model store of the first arm (the only one without an experiment)."""
        return self.arms[0].models

    @classmethod
    def from_config(cls, config, events: EventStore, arms: list[Arm] | None = None) -> Trainer:
        if arms is None:
            from reranker.core.plugins import get_plugin_manager
            from reranker.models.arms import arms_from_config

            arms = arms_from_config(config, get_plugin_manager())
            for arm in arms:
                arm.prepare()
        return cls(arms, events, feedback_window=config.trainer.feedback_window,
                   batch_size=config.trainer.batch_size,
                   client_budget=config.security.client_budget,
                   address_budget=config.security.address_budget,
                   query_budget=config.security.query_budget,
                   client_window=config.security.client_window,
                   retention=config.store.retention,
                   retention_interval=config.store.retention_interval,
                   keep_experiment=config.experiment.name if config.experiment.mode else None)

    def check_store(self, model: RankingModel, models: ModelStore | None = None) -> None:
        """Refuse a model whose cursor belongs to another event log: continuing would skip
        or repeat impressions."""
        folder = (models or self.models).location
        progress = model.progress
        if progress.store_id is not None and progress.store_id != self.events.store_id:
            raise ModelStoreError(
                f"model version {model.version} in {folder} was trained from another "
                f"event store than {self.events.location}; point store.models at a new folder "
                f"(to start afresh) or the store section at the event store it was trained "
                f"from")
        if progress.cursor > self.events.last_closed_seq():
            raise ModelStoreError(
                f"model version {model.version} in {folder} has applied impressions "
                f"up to number {progress.cursor}, but {self.events.location} has only "
                f"{self.events.last_closed_seq()}; the event store was reset or replaced")

    def run_once(self, *, close_all: bool = False) -> TrainReport:
        """Close the impressions whose window has passed (all open ones with ``close_all``)
        and apply every closed impression not yet in each arm's model."""
        report = TrainReport()
        before = float("inf") if close_all else self.clock() - self.feedback_window
        report.closed = self.events.close_impressions(before)
        if self.processes is not None:
            self.processes.train(report)  # (each process its arms, at once)
        else:
            self.train_arms(report)
        self.last_report = report
        if report.version is not None:
            self.last_saved_version = report.version
        self.last_run = self.clock()
        return report

    def train_arms(self, report: TrainReport) -> None:
        """Apply the closed impressions to every arm's model, one arm after the other, into
        ``report``: an arm that fails is named in ``report.errors`` and the others train;
        the event store's failure is every arm's, and is raised."""
        for arm in self.arms:
            try:
                report.add(arm.label, self._train_arm(arm))
            except StoreError as exc:
                if not isinstance(exc, ModelStoreError):
                    raise  # the event store's trouble is every arm's: the pass fails
                report.errors[arm.label] = self._arm_failed(arm, exc)
            except Exception as exc:  # noqa: BLE001 -- one arm's learner or model must not
                # stop the others from learning
                report.errors[arm.label] = self._arm_failed(arm, exc)
            else:
                if self._arm_errors.pop(arm.label, None) is not None:
                    log.info("arm %s (learner %s) trains again", arm.label,
                             arm.factory.learner_cls.name)

    def train_in_processes(self, config, jobs: int, *,
                           setup: Callable[[], None] | None = None) -> int:
        """Apply the arms' impressions in up to ``jobs`` processes of their own from now on,
        the arms dealt out between them (:class:`reranker.models.arm_processes.ArmProcesses`):
        arms are independent, so they learn at once on as many cores. This process still
        closes impressions, keeps retention and records the status. Returns the number of
        processes (1, and none started, with one arm or ``jobs`` 1). ``setup`` is called
        first in each (a picklable callable: for example the logging set up as here)."""
        from reranker.models.arm_processes import ArmProcesses, deal

        groups = deal([arm.label for arm in self.arms], jobs)
        if len(groups) > 1:
            self.processes = ArmProcesses(
                config, groups, setup=setup,
                learners={arm.label: arm.factory.learner_cls.name for arm in self.arms})
        return len(groups)

    def close(self) -> None:
        """End the processes of :meth:`train_in_processes` (after the pass they run)."""
        if self.processes is not None:
            self.processes.close()
            self.processes = None

    def _arm_failed(self, arm: Arm, exc: Exception) -> str:
        """What failed in ``arm``'s training, logged with its traceback when it is new (a
        learner that fails every pass would fill the log)."""
        message = (f"arm {arm.label} (learner {arm.factory.learner_cls.name}): "
                   f"{getattr(exc, 'message', None) or f'{type(exc).__name__}: {exc}'}")
        if self._arm_errors.get(arm.label) != message:
            self._arm_errors[arm.label] = message
            log.error("training %s; its impressions wait for the next pass", message,
                      exc_info=exc)
        return message

    def _train_arm(self, arm: Arm) -> TrainReport:
        """Apply the closed impressions after the cursor of ``arm``'s newest good version (the
        newest, even while another version is pinned for serving) and save what they taught.

        After each batch a version is saved, numbered by
        :meth:`reranker.models.store.ModelStore.next_version` (never a number used before),
        when an impression since the last save changed the model or was skipped (a decision
        worth keeping, or it would be logged again every pass), or when ``10 * batch_size``
        impressions were read since the last save. A pass that learned nothing (impressions
        without clicks, or whose clicks teach nothing) saves no version: the next pass reads
        those impressions again from the saved cursor and applies them again to the saved
        model, which changes nothing again, and a long run of them still moves the saved
        cursor every ``10 * batch_size`` impressions. (With ``zscore`` normalisation their
        statistics are saved with the next version.) The report counts every impression the
        pass applied; ``versions`` lists what it saved."""
        report = TrainReport()
        unsaved_limit = 10 * self.batch_size
        # The store's lock spans machines (PostgreSQL); the folder's, this machine's
        # processes, and the commands that save versions without training.
        with self.events.trainer_lock(arm.models.name), arm.models.lock():
            model, report.model_errors = arm.models.load_latest(arm.factory)
            if model is None:
                model = arm.factory.new()
            self.check_store(model, arm.models)
            model.progress.store_id = self.events.store_id
            budget = self.budgets.setdefault(
                arm.id, ClientBudget(self.client_budget, self.client_window,
                                     self.address_budget, self.query_budget))
            budget.forget_through(model.progress.cursor)
            names = arm.names()
            # (pages without a click come bare when they teach this arm nothing)
            read_batch = self.events.closed_since_lean \
                if arm.learning.learns_only_from_clicks() else self.events.closed_since
            updates, skipped, read = 0, 0, 0  # since the last save
            applied_at_save = 0
            while True:
                batch = read_batch(model.progress.cursor, self.batch_size, arms=names)
                if not batch:
                    break
                for imp in batch:
                    self._apply(arm, model, imp, report, budget)
                read += len(batch)
                if report.updates == updates and report.skipped == skipped \
                        and read < unsaved_limit:
                    continue  # nothing learned since the last save: not worth a version
                model.version = arm.models.next_version()
                model.origin = None  # a trained version (a rollback's is its first only)
                arm.models.save(model)
                report.versions.append(model.version)
                updates, skipped, read = report.updates, report.skipped, 0
                applied_at_save = report.applied
            if report.versions:  # (later pages and others' mixed lists are not applied)
                report.unsaved = report.applied - applied_at_save
            report.cursor = model.progress.cursor
        return report

    def _apply(self, arm: Arm, model: RankingModel, imp: Impression,
               report: TrainReport, budget: ClientBudget) -> None:
        progress = model.progress
        progress.cursor = imp.closed_seq
        if imp.bare:  # no click, no reward: counted as applied, and nothing to learn
            if not arm.learning.takes(imp):
                return
            learned = None, None
        else:
            try:
                learned = arm.feedback(imp)
            except (ValueError, LookupError) as exc:  # a page whose logged ranking is broken
                log.warning("impression %s skipped: its feedback cannot be read (%s: %s)",
                            imp.id, type(exc).__name__, exc)
                progress.skipped += 1
                report.skipped += 1
                return
            if learned is None:  # a mixed list this arm had no part in, or cannot learn from
                return
        if arm.columns(imp.feature_names) is None:
            # Logged under another feature configuration (the model's features are not all
            # among the logged ones): its weights would mean nothing here.
            log.warning("impression %s skipped: logged with features %s, the model has %s",
                        imp.id, imp.feature_names, list(model.feature_names))
            progress.skipped += 1
            report.skipped += 1
            return
        X, feedback = learned
        if X is None and not imp.bare:  # an arm added after retention compacted it
            log.warning("impression %s skipped: retention dropped its features before this "
                        "arm learned from it", imp.id)
            progress.skipped += 1
            report.skipped += 1
            return
        # (a specialised page teaches judgments, not its clicks: count the clicks it had)
        clicked = len(imp.clicked or []) if SPECIALISED in (imp.context or {}) \
            or feedback is None else len(feedback.clicked)
        query = query_key(imp.query)
        if not budget.allows(imp.user_id, imp.closed_seq, imp.created, clicked > 0,
                             query if budget.query_budget else None):
            progress.impressions += 1
            report.applied += 1
            report.bounded += 1
            return
        moved = self._weigh(arm, model, imp)
        if arm.spec.query_balance and not model.balance.keeps(query, imp.id):
            progress.impressions += 1
            progress.clicks += clicked
            report.applied += 1
            report.clicks += clicked
            report.balanced += 1
            progress.updates += int(moved)
            report.updates += int(moved)
            return
        changed = False
        if feedback is not None and len(imp.doc_ids):
            feedback.query = query
            snapshot = model.snapshot()
            try:
                with np.errstate(over="raise", invalid="raise", divide="raise"):
                    changed = model.learn(X, feedback)
            except (ValueError, ArithmeticError) as exc:
                # One impression that breaks the update must not stop learning for good:
                # undo it, count it, and go on.
                model.restore(snapshot)
                log.warning("impression %s skipped: its update failed (%s)", imp.id, exc)
                progress.skipped += 1
                report.skipped += 1
                return
            except Exception as exc:
                # Anything else is the learner's own fault (a bug, not this page's data):
                # the arm's pass stops, and the impression waits for a fixed learner.
                raise RerankerError(f"its update on impression {imp.id} failed: "
                                    f"{type(exc).__name__}: {exc}") from exc
        changed = changed or moved
        progress.impressions += 1
        progress.clicks += clicked
        progress.updates += int(changed)
        report.applied += 1
        report.clicks += clicked
        report.updates += int(changed)
        if clicked and not changed:
            reason = uninformative_reason(model.learner, feedback, imp.context)
            report.uninformative[reason] = report.uninformative.get(reason, 0) + clicked

    @staticmethod
    def _weigh(arm: Arm, model: RankingModel, imp: Impression) -> bool:
        """Count the duels of the query weight and of the evidence gate that ``imp``, a page
        of this arm ranked with the model's present weight and gate, settled
        (docs/algorithms.md, "General model and query specialisation"); True when either
        moved."""
        context = imp.context or {}
        if not imp.clicked or imp.arm not in arm.names():
            return False
        moved, clicked = False, imp.clicked_positions()
        # (a page ranked with another weight, or at another level, tested other pairs)
        if context.get(WEIGHT_DUELS) and \
                float(context.get(WEIGHT, 1.0)) == model.query_weight.weight:
            moved = model.query_weight.observe(duel_outcomes(context, clicked),
                                               arm.spec.confidence)
        if context.get(GATE_DUELS) and context.get(GATE) == model.evidence_gate.level:
            moved = model.evidence_gate.observe(duel_outcomes(context, clicked, GATE_DUELS),
                                                arm.spec.confidence) or moved
        return moved

    def retain(self, age: float | None = None) -> Retained:
        """Remove the impressions created more than ``age`` seconds ago (default
        ``store.retention``) that every arm's newest saved version has applied: deleted with
        their clicks and rewards, or, those of the running experiment, compacted
        (:meth:`reranker.stores.EventStore.retain`). An arm without a saved version, or whose
        version was trained from another event store, has applied none."""
        age = self.retention if age is None else age
        if age is None:
            raise ValueError("no retention age: store.retention is not set")
        readers = []
        for arm in self.arms:
            model, _ = arm.models.load_latest(arm.factory)
            applied = model is not None and model.progress.store_id == self.events.store_id
            readers.append(Reader(tuple(arm.names()), model.progress.cursor if applied else 0))
        retained = self.events.retain(self.clock() - age, readers, self.keep_experiment)
        self.last_retained = self.clock()
        if retained.deleted or retained.compacted:
            log.info("retention: deleted %d impressions older than %gs, compacted %d",
                     retained.deleted, age, retained.compacted)
        return retained

    def run_pass(self) -> TrainReport | None:
        """One background pass: :meth:`run_once`, then, with ``store.retention``, a
        retention pass every ``store.retention_interval`` seconds (:meth:`retain`); any
        error logged and kept in :attr:`last_error` (reported by ``/healthz``) instead of
        raised."""
        try:
            report = self.run_once()
            if report.errors:  # (the other arms' versions are kept; the pass goes on)
                self.last_error = "; ".join(report.errors.values())
            if self.after_pass is not None:
                self.after_pass(report)
            if self.retention is not None and (
                    self.last_retained is None
                    or self.clock() - self.last_retained >= self.retention_interval):
                self.retain()
        except Exception as exc:  # noqa: BLE001 -- the background loop must survive
            message = str(getattr(exc, "message", exc))
            if message != self.last_error:  # (a failure of every pass: logged once)
                log.exception("training pass failed")
            self.last_error = message
            self.last_run = self.clock()
            self.record(None)
            return None
        if not report.errors:
            if self.last_error is not None:
                log.info("training passes succeed again")
            self.last_error = None
        self.record(report)
        for label, arm_report in report.arms.items():
            if arm_report.versions:
                idle = "; ".join(f"{n} {why}" for why, n in arm_report.uninformative.items())
                log.info("%s: trained on %d impressions (%d clicks, %d updates, %d skipped, "
                         "%d over their client's budget): model version %d%s%s", label,
                         arm_report.applied, arm_report.clicks, arm_report.updates,
                         arm_report.skipped, arm_report.bounded, arm_report.version,
                         unsaved_note(arm_report),
                         f"; clicks that taught nothing: {idle}" if idle else "")
        return report

    def record(self, report: TrainReport | None) -> None:
        """Keep this pass's status in the event store, for the services that do not train
        themselves (:meth:`reranker.stores.EventStore.record_trainer`): its error, the cursors
        of the arms it trained (the impressions applied, saved or not) and how often passes
        run (the loop's interval; for a single pass, as ``reranker train`` runs from a
        scheduler, the time since the last pass recorded)."""
        now = time.time()
        if self.interval is not None and self.last_error == self._recorded[1] \
                and now - self._recorded[0] < RECORD_EVERY:
            return  # (a loop records at most every few seconds, and at once when it fails)
        self._recorded = (now, self.last_error)
        cursors = {} if report is None else {
            arm.id: report.arms[arm.label].cursor for arm in self.arms
            if arm.label in report.arms}
        try:
            interval = self.interval
            if interval is None:
                last = (self.events.trainer_status() or {}).get("last_run")
                interval = now - last if isinstance(last, int | float) and last < now else None
            self.events.record_trainer({"last_run": now, "last_error": self.last_error,
                                        "cursors": cursors, "interval": interval})
        except RerankerError as exc:
            log.debug("the trainer's status was not kept: %s", exc.message)

    def run_forever(self, stop: threading.Event, interval: float, *,
                    lead: bool = False) -> None:
        """A pass every ``interval`` seconds until ``stop`` is set; a failed pass is retried
        from the saved cursor at the next one. With ``lead``, passes run only while this
        process holds the store's trainer leadership
        (:meth:`reranker.stores.EventStore.trainer_leadership`), which it tries to take
        every ``interval`` seconds: of many processes serving one store, one trains."""
        leadership = None
        waiting = False  # (said once per wait)
        self.interval = interval
        try:
            while not stop.is_set():
                if lead and (leadership is None or not leadership.held()):
                    leadership, failed = self._take_lead(leadership)
                    if leadership is None:
                        if not waiting and not failed:
                            log.info("another process runs the trainer of %s; this one takes "
                                     "over when it stops", self.events.location)
                        waiting = waiting or not failed
                        stop.wait(interval)
                        continue
                    waiting = False
                self.run_pass()
                stop.wait(interval)
        finally:
            if leadership is not None:
                leadership.release()
            if lead:
                self.leading = False

    def _take_lead(self, lost):
        """The store's trainer leadership if this process can take it now, else None; and
        whether asking the store failed (else another process holds it)."""
        if lost is not None:
            lost.release()
            log.warning("this process lost the trainer's leadership (its connection to the "
                        "event store broke); trying to take it again")
        failed = False
        try:
            leadership = self.events.trainer_leadership()
        except StoreError as exc:
            self.last_error = exc.message
            log.warning("%s", exc.message)
            leadership, failed = None, True
        self.leading = leadership is not None
        if leadership is not None:
            log.info("this process runs the trainer of %s", self.events.location)
        return leadership, failed

    def status(self) -> dict:
        """For ``/healthz``: when the last pass ran, what it saved, and its error if any."""
        report = self.last_report
        return {"leading": self.leading, "last_run": self.last_run,
                "last_error": self.last_error,
                "last_saved_version": self.last_saved_version,
                "last_skipped": report.skipped if report else 0}


def unsaved_note(report: TrainReport) -> str:
    """How many of a pass's impressions the saved version leaves out (they taught nothing,
    and the next pass reads them again)."""
    if not report.unsaved:
        return ""
    return (f" (which holds all but the last {report.unsaved}: they taught nothing, and the "
            f"next version takes them)")


def uninformative_reason(learner, feedback, context: dict | None = None) -> str:
    """Why the clicks of an impression changed nothing, in a few words for the log."""
    from reranker.learners.coactive import CoactiveLearner

    if SPECIALISED in (context or {}):
        if not learner.capabilities.learns_from_mixed_lists:
            return "a page its query's clicks specialised, which this learner cannot learn from"
        return "a page its query's clicks specialised, whose judgments cover none of the " \
            "model's own adjacent pairs"

    if isinstance(learner, CoactiveLearner):
        if learner.swap_probability > 0:
            return "not on the lower result of a randomised pair with its upper unclicked"
        return "on results already on top"
    return "the learner's update left the model as it was"

"""Arms that learn at once, each group in a process of its own (``reranker train --jobs N``).

An experiment's arms are independent: each has its own model, its own cursor in the event
log and its own lock (:meth:`reranker.stores.EventStore.trainer_lock`), and reads only the
pages it may learn from. So a trainer may apply them at once, on as many cores: the arms
are dealt out to ``N`` processes (:func:`deal`), each of which opens the event store and
the model store itself and keeps its arms' training state (their clients' budgets) from
one pass to the next. The process that started them closes the impressions, asks every
process for a pass, waits for all of them and adds their reports up, then keeps retention
and records the status as one trainer does (:class:`reranker.models.trainer.Trainer`).

A process that dies (killed, out of memory) fails its arms' pass only: their impressions
wait at the saved cursors, and the next pass starts a new process for them. The processes
are started with ``spawn`` (a fresh interpreter, no copy of this process's threads and
connections), so a learner plugin must be installed (an entry point), not registered in
this process alone.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING

from reranker.core.errors import RerankerError, StoreError

if TYPE_CHECKING:
    from reranker.core.config import Config
    from reranker.models.trainer import Trainer, TrainReport

log = logging.getLogger(__name__)


def deal(labels: list[str], jobs: int) -> list[list[str]]:
    """``labels`` dealt out to at most ``jobs`` groups, in turn (none empty)."""
    jobs = max(1, min(jobs, len(labels)))
    return [labels[k::jobs] for k in range(jobs)]


class ArmProcesses:
    """One process per group of arm labels (module docstring)."""

    def __init__(self, config: Config, groups: list[list[str]], *,
                 learners: dict[str, str] | None = None,
                 setup: Callable[[], None] | None = None):
        self.config = config
        self.learners = learners or {}  # by label: the learner's name, for the errors
        self.groups = [list(group) for group in groups]
        #: Called first in each process (picklable: the logging set up as this process's)
        self.setup = setup
        self._context = multiprocessing.get_context("spawn")
        self._executors: list[ProcessPoolExecutor | None] = [None] * len(self.groups)
        self._failures: dict[str, str] = {}  # by label: the last process failure logged

    def _executor(self, k: int) -> ProcessPoolExecutor:
        if self._executors[k] is None:
            self._executors[k] = ProcessPoolExecutor(
                1, mp_context=self._context, initializer=_start,
                initargs=(self.config, self.groups[k], self.setup))
        return self._executors[k]

    def train(self, report: TrainReport) -> None:
        """One pass of every group at once, added to ``report`` in the order of the groups'
        arms; an event store's failure in any process is raised (as :meth:`Trainer.train_arms`
        raises it) once every process has ended its pass."""
        futures = [self._submit(k) for k in range(len(self.groups))]
        failure = None
        for k, future in enumerate(futures):
            try:
                if isinstance(future, Exception):
                    raise future
                arms, errors, store_error = future.result()
            except Exception as exc:  # noqa: BLE001 -- the process died or could not start
                self._lost(k)
                why = f"its training process ended ({type(exc).__name__}" + (
                    f": {exc})" if str(exc) else ")")
                for label in self.groups[k]:
                    message = f"arm {label} (learner {self.learners.get(label, '?')}): {why}"
                    report.errors[label] = message
                    if self._failures.get(label) != message:
                        self._failures[label] = message
                        log.error("training %s; its impressions wait for the next pass",
                                  message)
                continue
            for label in self.groups[k]:
                self._failures.pop(label, None)
                if label in arms:
                    report.add(label, arms[label])
            report.errors.update(errors)
            failure = failure or store_error
        if failure is not None:
            raise StoreError(failure)

    def _submit(self, k: int) -> Future | Exception:
        try:
            return self._executor(k).submit(_train)
        except BrokenProcessPool as exc:  # (found dead since its last pass)
            return exc

    def pids(self) -> list[int]:
        """The processes running now (for tests and operators: ``ps`` shows them too)."""
        return [pid for executor in self._executors if executor is not None
                for pid in executor._processes]  # noqa: SLF001 -- no public accessor

    def _lost(self, k: int) -> None:
        executor, self._executors[k] = self._executors[k], None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        for k, executor in enumerate(self._executors):
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
            self._executors[k] = None


# -- in the process of a group ----------------------------------------------------------------

_trainer: Trainer | None = None


def _start(config: Config, labels: list[str], setup: Callable[[], None] | None) -> None:
    """A group's process: its arms, the event store, and a trainer of those arms alone."""
    global _trainer
    # The process that started it stops it, after the pass it runs (a signal to the whole
    # process group, as a terminal's Ctrl-C sends, must not cut a pass short).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if setup is not None:
        setup()
    from multiprocessing.util import Finalize

    from reranker.core.plugins import get_plugin_manager
    from reranker.models.arms import arms_from_config
    from reranker.models.trainer import Trainer
    from reranker.stores import open_event_store

    arms = [arm for arm in arms_from_config(config, get_plugin_manager())
            if arm.label in labels]
    for arm in arms:
        arm.prepare()
    events = open_event_store(config)
    Finalize(None, events.close, exitpriority=10)  # (run as the process ends)
    _trainer = Trainer.from_config(config, events, arms)


def _train() -> tuple[dict[str, TrainReport], dict[str, str], str | None]:
    """One pass of this process's arms: their reports, their failures, and the event
    store's failure if it failed (then the pass ended there)."""
    from reranker.models.trainer import TrainReport

    report = TrainReport()
    try:
        _trainer.train_arms(report)
    except RerankerError as exc:
        return report.arms, report.errors, exc.message
    return report.arms, report.errors, None

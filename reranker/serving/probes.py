"""Deadlines: ``/healthz`` and ``/readyz`` answer within a second whatever the search engine
or the event store is doing, and say what is stuck; a search that cannot be answered within
``server.search_timeout`` is answered 503 (:class:`Deadline`).

Each named check (the backend's health, the event store's state, a test write) runs in a
thread of its own, the same thread at every probe (what a check opens for its thread, such as
a database connection, serves the next probe too). The checks of one probe run together, and
the answer waits for them up to one deadline: a check that has not returned by then is
reported stuck, with how long it has been waiting, and it is not started again while it
still runs (a store frozen for a minute holds one thread, not one per probe).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from reranker.core.errors import DeadlineError
from reranker.core.forks import renew_in_child

#: Seconds a health or readiness probe waits for its checks.
PROBE_DEADLINE = 0.8


@dataclass
class _Run:
    """One run of a check, in its check's thread."""

    call: Callable[[], Any]
    started: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None

    def __call__(self) -> None:
        try:
            self.value = self.call()
        except BaseException as exc:  # handed to the probe that waits for it
            self.error = exc
        finally:
            self.done.set()


class _Thread:
    """A daemon thread that runs the calls put in its queue, one after the other (a check
    stuck for good never holds up the interpreter's exit)."""

    def __init__(self, name: str):
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        while True:
            self.jobs.get()()


@dataclass(frozen=True)
class Outcome:
    """A check's outcome: its value, or the error it raised, or stuck (no answer by the
    deadline) with the seconds it has been waiting."""

    value: Any = None
    error: BaseException | None = None
    stuck: float | None = None

    def get(self) -> Any:
        """The value; the check's error raised again; :class:`StuckError` when stuck."""
        if self.stuck is not None:
            raise StuckError(self.stuck)
        if self.error is not None:
            raise self.error
        return self.value


class StuckError(Exception):
    """A check that gave no answer by its probe's deadline."""

    def __init__(self, seconds: float):
        super().__init__(f"no answer within the health check's deadline (waiting for "
                         f"{seconds:.1f} s)")
        self.seconds = seconds


class Probes:
    """The checks of one service, each run at most once at a time."""

    def __init__(self, deadline: float = PROBE_DEADLINE):
        self.deadline = deadline
        self._reset()
        renew_in_child(self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, _Run] = {}
        self._threads: dict[str, _Thread] = {}  # one thread per check, kept

    def run(self, checks: Mapping[str, Callable[[], Any]]) -> dict[str, Outcome]:
        """Run ``checks`` together (a check still running from an earlier probe is waited
        for, not started again) and return each one's outcome by the deadline."""
        with self._lock:
            runs = {}
            for name, call in checks.items():
                run = self._running.get(name)
                if run is None or run.done.is_set():
                    run = self._running[name] = _Run(call)
                    if name not in self._threads:
                        self._threads[name] = _Thread(f"health check {name}")
                    self._threads[name].jobs.put(run)
                runs[name] = run
        until = time.monotonic() + self.deadline
        outcomes = {}
        for name, run in runs.items():
            if run.done.wait(max(0.0, until - time.monotonic())):
                outcomes[name] = Outcome(run.value, run.error)
            else:
                outcomes[name] = Outcome(stuck=time.monotonic() - run.started)
        return outcomes


class Deadline:
    """Runs calls (a search) in a bounded pool of threads and waits for each at most
    ``timeout`` seconds: a call with no answer by then is abandoned to its thread and its
    caller gets :class:`TimeoutError`; once every thread waits on such a call, new calls are
    refused at once with :class:`OverflowError` instead of queueing behind them. (Python
    cannot stop a call that waits on the engine or the database; the pool bounds what
    waits.)"""

    def __init__(self, threads: int, timeout: float, name: str):
        self.threads = threads
        self.timeout = timeout
        self.name = name
        self._reset()
        renew_in_child(self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._busy = 0
        self._pool: ThreadPoolExecutor | None = None

    @property
    def busy(self) -> int:
        """Calls running now (those abandoned to their thread included)."""
        return self._busy

    def run(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call(*args, deadline=..., **kwargs)``'s value, where ``deadline`` is the
        ``time.monotonic()`` after which the call's answer goes unseen."""
        with self._lock:
            if self._busy >= self.threads:
                raise OverflowError(self._busy)
            self._busy += 1
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix=self.name)
            pool = self._pool
        deadline = time.monotonic() + self.timeout

        def task() -> Any:
            try:
                return call(*args, deadline=deadline, **kwargs)
            finally:
                with self._lock:
                    self._busy -= 1

        future = pool.submit(task)
        try:
            return future.result(timeout=self.timeout)
        except FutureTimeout:
            raise TimeoutError(self.timeout) from None

    def within(self, timed_out: Any, late: str, busy: str, call: Callable[..., Any],
               *args: Any, **kwargs: Any) -> Any:
        """:meth:`run`, with a :class:`reranker.core.errors.DeadlineError` (503) saying
        ``late`` when the call took longer than :attr:`timeout`, or ``busy`` when every
        thread still waits on such a call; each counted in the counter ``timed_out``."""
        try:
            return self.run(call, *args, **kwargs)
        except TimeoutError:
            timed_out.inc()
            raise DeadlineError(late) from None
        except OverflowError:
            timed_out.inc()
            raise DeadlineError(busy) from None

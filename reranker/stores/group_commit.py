"""Group commit: the writes that concurrent threads submit, made durable together.

A durable commit costs a flush to disk (SQLite's fsync of its log, PostgreSQL's of its WAL)
whatever it holds, so one click per commit caps a store at a few hundred clicks per second.
Here the first thread to submit a write while none is being written becomes the *writer*: it
takes every write queued so far and hands them to ``write_batch``, which runs them in one
transaction with one flush. Threads that submit meanwhile queue up; when the commit ends,
each one whose write it held returns that write's outcome, and the next thread still waiting
becomes the writer of everything that queued up during the commit. A lone write is committed
at once (nothing waits for company), and each caller returns only after the commit that
holds its write: durable when :meth:`GroupCommit.submit` returns.

The same scheme as the group commit of database logs (Helland et al., "Group Commit Timers
and High Volume Transaction Systems", HPTS 1987), inside one process: the threads of the
HTTP server, or of several servers sharing a store object.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from reranker.core.errors import RerankerError

T = TypeVar("T")
R = TypeVar("R")


class _Pending:
    __slots__ = ("item", "outcome", "done")

    def __init__(self, item):
        self.item = item
        self.outcome = None
        self.done = False


class GroupCommit(Generic[T, R]):
    """Runs ``write_batch(items)`` for the items that concurrent :meth:`submit` calls bring,
    as many at once as have queued (at most ``max_batch``).

    ``write_batch`` returns one outcome per item, in order: a result, or the exception that
    item's caller gets (an error of that request alone, such as an unknown id, which wrote
    nothing). When ``write_batch`` itself raises, nothing of the batch was written and every
    caller in it gets the error.
    """

    def __init__(self, write_batch: Callable[[list[T]], Sequence[R | BaseException]],
                 max_batch: int = 500):
        self._write_batch = write_batch
        self.max_batch = max_batch
        self._cond = threading.Condition()
        self._queue: list[_Pending] = []
        self._writing = False
        #: Batches written, and items in them (for tests and benchmarks).
        self.batches = 0
        self.items = 0

    def submit(self, item: T) -> R:
        """Queue ``item`` and return its outcome once the commit that holds it has ended (or
        raise its error)."""
        pending = _Pending(item)
        with self._cond:
            self._queue.append(pending)
            while not pending.done:
                if self._writing:
                    self._cond.wait()
                    continue
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
                self._writing = True
                self._cond.release()
                try:
                    outcomes = self._run(batch)
                finally:
                    self._cond.acquire()
                    for entry, outcome in zip(batch, outcomes, strict=True):
                        entry.outcome, entry.done = outcome, True
                    self._writing = False
                    self.batches += 1
                    self.items += len(batch)
                    self._cond.notify_all()
        if isinstance(pending.outcome, BaseException):
            raise pending.outcome
        return pending.outcome

    def _run(self, batch: list[_Pending]) -> list:
        """The outcomes of one batch; never raises (a failure is every item's outcome)."""
        try:
            outcomes = list(self._write_batch([entry.item for entry in batch]))
        except RerankerError as exc:
            return [_copy(exc) for _ in batch]  # one object per caller: each raises its own
        except BaseException as exc:  # noqa: BLE001 -- every caller learns of it
            return [exc] * len(batch)
        if len(outcomes) != len(batch):
            error = RuntimeError(f"write_batch returned {len(outcomes)} outcomes for "
                                 f"{len(batch)} items")
            return [error] * len(batch)
        return outcomes


def _copy(exc: RerankerError) -> RerankerError:
    copy = type(exc)(exc.message, exc.status)
    copy.__cause__ = exc
    return copy

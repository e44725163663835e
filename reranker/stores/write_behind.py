"""Write-behind: writes that the caller hands over and does not wait for.

A search logs its impression, but nothing in its answer depends on the row being written:
the next request that needs it is a click seconds later. So :meth:`WriteBehind.put` queues
the impression and returns, and one thread of the process writes everything queued so far
in one transaction, after lingering a few milliseconds for company (PostgreSQL's
``commit_delay`` does the same for its log flushes): one row at a time when traffic is
light, batches under load. The search's answer no longer waits for the event store's write
lock or its statements, and the store takes far fewer transactions per impression, which
leaves the searches more of the machine (and of Python's interpreter lock, which the
writer thread holds between statements). This is the write-behind of caches and the asynchronous
commit of databases (PostgreSQL's ``synchronous_commit = off``): a crash loses what was
queued in the last moments, never what a durable write (a click) has confirmed.

Whoever reads or writes what depends on the queued items first waits for them
(:meth:`WriteBehind.flush`): a click for its impression, a read of the log, the trainer.
When a batch fails for the store's sake (unavailable, locked, the disk full), it stays
queued and is tried again with growing pauses; :meth:`flush` raises the failure meanwhile,
so a click answers 503 instead of waiting, and :meth:`put` refuses new items once
``max_pending`` wait (then a search answers 503). A batch that fails for what it holds (an
error the store marks ``permanent``, a value the database refuses, or an error that is not
the store's at all) is written again one item at a time, each leaving the queue once
written, and only an item that fails so alone is dropped, logged and counted: one bad item
never holds up the others, and no item is written or dropped twice.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from reranker.core.errors import StoreError
from reranker.core.forks import renew_in_child

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds between tries of a failing batch: doubling from the first to the last.
RETRY_PAUSES = (0.05, 2.0)


class WriteBehind(Generic[T]):
    """Queues items for ``write_batch(items)``, which one thread of this process runs on
    everything queued (at most ``max_batch`` at once), after waiting up to ``linger``
    seconds for more to arrive (unless a :meth:`flush` waits); ``dropped(items)`` runs for
    items dropped (see the module)."""

    def __init__(self, write_batch: Callable[[list[T]], object], *, name: str, what: str,
                 store: str = "",
                 max_batch: int = 500, max_pending: int = 10_000, linger: float = 0.0,
                 dropped: Callable[[list[T]], object] | None = None):
        self._write_batch = write_batch
        self._dropped = dropped
        self.name = name
        self.what = what  # what the items are, for messages: "impressions"
        self.store = f"event store {store}" if store else "the event store"  # for messages
        self.max_batch = max_batch
        self.max_pending = max_pending
        self.linger = linger
        self._reset()
        # a forked child starts empty, with a lock of its own: the parent writes its own
        # queue, and its lock may have been held at the fork
        renew_in_child(self._reset)
        #: Batches written, items in them, and items dropped (for tests, benchmarks, logs).
        self.batches = self.items = self.dropped = 0

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[T] = []
        self._put = 0  # items ever queued
        self._done = 0  # items ever written (or dropped)
        self._failures = 0  # failed tries so far
        self._failure: StoreError | None = None  # of the latest try, while it fails
        self._closing = False
        self._close_by = math.inf  # closing: the writer tries until then
        self._urgent = False  # a flush waits: write now (no linger, no pause)
        self._thread: threading.Thread | None = None

    def put(self, item: T) -> None:
        """Queue ``item``; :class:`StoreError` when ``max_pending`` items already wait (the
        store fails, or does not keep up)."""
        with self._cond:
            if self._closing:
                raise StoreError(f"{self.store} is closed: no more {self.what} are taken")
            if len(self._queue) >= self.max_pending:
                why = f"which fails: {self._failure}" if self._failure is not None else \
                    "which does not keep up"
                raise StoreError(f"{len(self._queue)} {self.what} wait for {self.store}, "
                                 f"{why}")
            self._queue.append(item)
            self._put += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            if len(self._queue) == 1 or len(self._queue) >= self.max_batch:
                # The writer waits for a first item, or lingers for a full batch: waking
                # it for every item would only hand it the interpreter lock to no purpose.
                self._cond.notify_all()

    @property
    def pending(self) -> int:
        """Items queued and not yet written."""
        with self._cond:
            return self._put - self._done

    @property
    def failure(self) -> str | None:
        """The failure of the latest try to write, while writing fails; None otherwise."""
        with self._cond:
            return None if self._failure is None else str(self._failure)

    def last(self, test: Callable[[T], bool]) -> T | None:
        """The last item still queued that passes ``test``, or None."""
        with self._cond:
            return next((item for item in reversed(self._queue) if test(item)), None)

    def flush(self, timeout: float) -> None:
        """Return once every item queued before this call is written; raise the store's
        error if a try fails meanwhile, or :class:`StoreError` after ``timeout`` seconds."""
        with self._cond:
            target, failures = self._put, self._failures
            if self._done < target:
                self._urgent = True  # the writer writes now: no linger, no pause
                self._cond.notify_all()
            deadline = time.monotonic() + timeout
            while self._done < target:
                if self._failures > failures and self._failure is not None:
                    raise StoreError(str(self._failure))  # a try failed since this call began
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreError(f"{self.store} has not written {target - self._done} "
                                     f"queued {self.what} within {timeout:g}s (store.timeout)")
                self._cond.wait(left)

    def close(self, timeout: float) -> None:
        """Write what is queued, trying again while the store fails, for up to ``timeout``
        seconds (logging what could not be written), and stop the thread; later items are
        refused."""
        with self._cond:
            self._closing = True
            self._close_by = time.monotonic() + timeout
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout + 1.0)  # (a try under way when the time is up ends first)
        lost = self.pending
        if lost:
            log.error("%s: %d %s lost at close: %s", self.name, lost, self.what,
                      self._failure or f"not written within {timeout:g}s")

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException:  # never silently: the next put starts another writer
            log.exception("%s: the writer thread stopped", self.name)
            raise

    def _loop(self) -> None:
        pause = RETRY_PAUSES[0]
        singles = 0  # items still to write one at a time, after a batch failed for them
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                size = 1 if singles else self.max_batch
                resume = time.monotonic() + (0.0 if singles else self.linger)
                while len(self._queue) < size and not self._urgent and not self._closing:
                    left = resume - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)  # for company: fewer, larger transactions
                self._urgent = False
                batch = self._queue[:size]
            try:
                self._write_batch(batch)
            except Exception as exc:  # noqa: BLE001 -- sorted out below
                if isinstance(exc, StoreError) and not exc.permanent:
                    # the store's trouble: the same items again, later
                    if not self._failed(exc, pause):
                        return
                    pause = min(pause * 2, RETRY_PAUSES[1])
                    continue
                if len(batch) > 1:  # for what it holds: its items one at a time
                    singles = len(batch)
                    continue
                self._drop(batch, exc)
            else:
                self.batches += 1
                self.items += len(batch)
            singles = max(0, singles - len(batch))
            pause = RETRY_PAUSES[0]
            with self._cond:
                del self._queue[: len(batch)]
                self._done += len(batch)
                self._failure = None
                self._cond.notify_all()

    def _failed(self, exc: StoreError, pause: float) -> bool:
        """Note a failed try and wait ``pause`` seconds (less when a flush asks); False
        when the writer is to stop (closing, and its time is up)."""
        with self._cond:
            if self._failure is None or self._failures % 100 == 0:
                log.warning("%s: %d %s wait: %s", self.name, len(self._queue), self.what, exc)
            self._failure = exc
            self._failures += 1
            self._cond.notify_all()
            resume = time.monotonic() + pause
            while not self._urgent:
                left = min(resume, self._close_by) - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            if time.monotonic() >= self._close_by:
                return False
            self._urgent = False
        return True

    def _drop(self, items: list[T], exc: BaseException) -> None:
        if isinstance(exc, StoreError):
            log.error("%s: dropped %d %s that the event store refuses: %s", self.name,
                      len(items), self.what, exc)
        else:
            log.error("%s: dropped %d %s after an error", self.name, len(items), self.what,
                      exc_info=exc)
        self.dropped += len(items)
        if self._dropped is not None:
            try:
                self._dropped(items)
            except Exception:  # noqa: BLE001 -- logged; the writer goes on
                log.exception("%s: after dropping %s", self.name, self.what)

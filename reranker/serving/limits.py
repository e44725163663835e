"""Request limits per client and per impression, shared by every process of one event store.

Each process decides at once from its own counters (:class:`RateLimiter`: token buckets of a
client's searches or clicks; :class:`ImpressionCounter`: click requests per impression id),
so a limit never waits on the store. :class:`SharedCounts` makes the counters of all the
processes (the workers of ``reranker serve --workers N``, and the machines sharing a
PostgreSQL store) count together: every ``security.limits_exchange`` seconds a thread adds
the requests its process accepted to counts kept in the event store, reads what every
process added since its last exchange, and applies the others' requests to its own
counters, as if it had served them. A client spread over N workers then gets its rate once
instead of N times; between two exchanges each process decides alone, so a burst sent to
every worker within one interval passes on each (the buckets then stay below zero until
the client has paid back what it spent elsewhere).

The store keeps a count per scope (``search``, ``click``, ``impression``), client (or
impression id) and slot (a fixed span of time: a minute for the rates, ``impression_ttl``
for the impressions), each row marked with the exchange that last changed it, so that a
reader asks only for the rows changed since its last exchange; slots older than the one
before the current are deleted (:meth:`reranker.stores.EventStore.exchange_requests`).

A process's rates do not take in what the other processes counted before its first
exchange (up to two minutes of it, which a token bucket would mostly have forgiven by
then): a restarted worker starts a client's bucket full. Its impression counts do, since
an impression's clicks count until the impression expires. A process exchanges from the
moment its service opens (:meth:`reranker.serving.service.RerankerService.open`), so the workers
started together make their first exchange one interval after they start, whether or not
requests have come.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from reranker.core.errors import RerankerError
from reranker.core.forks import renew_in_child

if TYPE_CHECKING:
    from reranker.stores import Coordination

log = logging.getLogger(__name__)


class RateLimiter:
    """Token buckets per key: ``per_minute`` requests a minute, in bursts of as many. At most
    ``max_keys`` buckets are kept; full buckets are dropped first (a full bucket is the same
    as none)."""

    #: Seconds of the slots :class:`SharedCounts` counts this limiter's requests in.
    slot_seconds = 60.0

    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = 100_000):
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.clock = clock
        self.max_keys = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when)
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Take one request for ``key``: 0 when allowed, else the seconds until it would be."""
        with self._lock:
            now = self.clock()
            tokens = self._tokens(key, now)
            if tokens < 1.0:  # (a bucket below one token is kept already)
                self._buckets[key] = (tokens, now)
                return (1.0 - tokens) / self.rate
            self._put(key, tokens - 1.0, now)
            return 0.0

    def absorb(self, key: str, requests: int, first: bool) -> None:
        """Take ``requests`` that other processes accepted for ``key`` since the last
        exchange (the bucket may go below zero: the client then waits for what it spent
        elsewhere). Those read at a process's ``first`` exchange are not taken: they may be
        a minute old, and a bucket forgives a minute's requests."""
        if first:
            return
        with self._lock:
            now = self.clock()
            self._put(key, self._tokens(key, now) - requests, now)

    def forget(self) -> None:
        """Start anew, with new locks (a forked child's limiter)."""
        self._buckets = {}
        self._lock = threading.Lock()

    def _tokens(self, key: str, now: float) -> float:
        tokens, when = self._buckets.get(key, (self.capacity, now))
        return min(self.capacity, tokens + (now - when) * self.rate)

    def _put(self, key: str, tokens: float, now: float) -> None:
        if len(self._buckets) >= self.max_keys and key not in self._buckets:
            self._prune(now)
        self._buckets[key] = (tokens, now)

    def _prune(self, now: float) -> None:
        full = [k for k, (tokens, when) in self._buckets.items()
                if tokens + (now - when) * self.rate >= self.capacity]
        for key in full:
            del self._buckets[key]
        if len(self._buckets) >= self.max_keys:  # a flood of new clients: forget the oldest
            for key in list(self._buckets)[: len(self._buckets) // 2]:
                del self._buckets[key]


class ImpressionCounter:
    """Click requests per impression id, each kept until its id expires."""

    def __init__(self, limit: int, ttl: float, *, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = 200_000):
        self.limit = limit
        self.ttl = ttl
        self.slot_seconds = ttl  # an impression's clicks fall in two slots at most
        self.clock = clock
        self.max_keys = max_keys
        self._counts: dict[str, tuple[int, float]] = {}  # id -> (count, forget after)
        self._lock = threading.Lock()

    def take(self, impression_id: str) -> float:
        """Count one request: 0 when within the limit, else the seconds until it is
        forgotten (the id has expired by then)."""
        with self._lock:
            now = self.clock()
            count, until = self._counts.get(impression_id, (0, now + self.ttl))
            if count >= self.limit:
                return max(1.0, until - now)
            self._add(impression_id, count + 1, until, now)
            return 0.0

    def absorb(self, impression_id: str, requests: int, first: bool) -> None:
        """Count ``requests`` that other processes accepted for the impression (at a
        process's ``first`` exchange too: an impression's clicks count until it expires)."""
        with self._lock:
            now = self.clock()
            count, until = self._counts.get(impression_id, (0, now + self.ttl))
            self._add(impression_id, count + requests, until, now)

    def forget(self) -> None:
        """Start anew, with new locks (a forked child's counter)."""
        self._counts = {}
        self._lock = threading.Lock()

    def _add(self, impression_id: str, count: int, until: float, now: float) -> None:
        if len(self._counts) >= self.max_keys and impression_id not in self._counts:
            self._counts = {k: v for k, v in self._counts.items() if v[1] > now}
            if len(self._counts) >= self.max_keys:
                for key in list(self._counts)[: len(self._counts) // 2]:
                    del self._counts[key]
        self._counts[impression_id] = (count, until)


class Counter(Protocol):
    """What :class:`SharedCounts` shares: a limiter's slot length and how it takes the
    requests other processes accepted."""

    slot_seconds: float

    def absorb(self, key: str, requests: int, first: bool) -> None: ...

    def forget(self) -> None: ...


class SharedCounts:
    """Exchanges the requests each process accepted, by scope and key, through the event
    store (see the module's documentation), every ``interval`` seconds on a thread of its
    own, started when the process's service opens (:meth:`start`), or else by the first
    request it counts."""

    #: Cells of this process's counts kept while the store fails, at most; beyond them
    #: new requests are not counted for the others (each process still limits them).
    MAX_PENDING = 200_000

    def __init__(self, store: Coordination, counters: dict[str, Counter], interval: float,
                 clock: Callable[[], float] = time.time, counted=None):
        self.store = store
        #: A Prometheus counter labelled ``outcome`` (``ok``, ``failed``) of the exchanges.
        self.counted = counted
        self.counters = counters
        self.interval = interval
        self.clock = clock
        self.exchanges = 0  # exchanges done, for tests and health
        self.failures = 0  # exchanges that failed in a row
        self.enabled = True  # False once the store says it keeps no counts
        self._reset()
        renew_in_child(self._renew)

    def _renew(self) -> None:
        """A forked child: new locks, its own counts (the limiters' too, taken in from the
        others at its exchanges) and no thread, started by its first request."""
        self._reset()
        for counter in self.counters.values():
            counter.forget()

    def _reset(self) -> None:
        self._lock = threading.Lock()  # the counts
        self._exchanging = threading.Lock()  # one exchange at a time
        self._pending: dict[tuple[str, str, int], int] = {}  # own, not yet added
        self._full = False  # MAX_PENDING reached (said once)
        self._known: dict[tuple[str, str, int], int] = {}  # every process's, as last read
        self._since = 0  # the store's mark of the last exchange
        self._first = True
        self._oldest: dict[str, int] = {}  # the oldest slot kept per scope
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def slot(self, scope: str, now: float | None = None) -> int:
        return int((self.clock() if now is None else now) // self.counters[scope].slot_seconds)

    def note(self, scope: str, key: str) -> None:
        """Count one request this process accepted."""
        if not self.enabled:
            return
        with self._lock:
            cell = (scope, key, self.slot(scope))
            if len(self._pending) < self.MAX_PENDING or cell in self._pending:
                self._pending[cell] = self._pending.get(cell, 0) + 1
            elif not self._full:
                self._full = True
                log.warning("request limits: %d counts wait for the event store; newer ones "
                            "are not shared with the other processes", self.MAX_PENDING)
            self._start()

    def start(self) -> None:
        """Start exchanging now, before this process counts its first request: an opened
        service does, so that its first exchange (whose counts of the others it does not
        take) comes before the traffic rather than with it."""
        with self._lock:
            self._start()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="reranker-limits",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.exchange()
            except Exception:  # never silently, and the next interval tries again
                log.exception("request limits: the exchange of counts failed")

    def exchange(self) -> bool:
        """Add this process's requests to the shared counts and take in the others'; False
        when the store failed (the requests are kept for the next exchange, but those of
        slots no longer counted)."""
        with self._exchanging:
            return self._exchange()

    def _exchange(self) -> bool:
        now = self.clock()
        with self._lock:
            added, self._pending = self._pending, {}
            slots = {scope: self.slot(scope, now) for scope in self.counters}
            prune = {scope: slot - 1 for scope, slot in slots.items()
                     if self._oldest.get(scope) != slot - 1}
        try:
            result = self.store.exchange_requests(added, self._since, prune)
        except RerankerError as exc:
            with self._lock:
                for cell, n in added.items():
                    if cell[2] >= slots[cell[0]] - 1:
                        self._pending[cell] = self._pending.get(cell, 0) + n
                self.failures += 1
            if self.counted is not None:
                self.counted.labels("failed").inc()
            if self.failures == 1:
                log.warning("request limits: the event store did not take this process's "
                            "counts (%s); each process limits on its own until it does", exc)
            return False
        if result is None:  # a store that keeps no counts: each process on its own
            self.enabled = False
            self._stop.set()
            return False
        rows, since = result
        with self._lock:
            if self.failures:
                log.info("request limits: counts shared through the event store again")
            self.failures = 0
            self._oldest.update(prune)
            # The store's marks went back (it lost its last commits): every count is read
            # again, and taken as known, not as new requests.
            resync = since < self._since
            if resync:
                self._known = {}
            for scope, key, slot, count in rows:
                cell = (scope, key, slot)
                others = count - self._known.get(cell, 0) - added.get(cell, 0)
                self._known[cell] = count
                counter = self.counters.get(scope)
                if others > 0 and counter is not None and slot >= slots[scope] - 1 \
                        and not resync:
                    counter.absorb(key, others, self._first)
            if prune:
                self._known = {cell: n for cell, n in self._known.items()
                               if cell[0] not in prune or cell[2] >= prune[cell[0]]}
            self._since = since
            self._first = False
            self.exchanges += 1
        if self.counted is not None:
            self.counted.labels("ok").inc()
        return True

    def close(self) -> None:
        """Stop the thread, then share what this process counted since its last exchange
        (unless an exchange is still under way after 10 s: the store is in trouble)."""
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        thread.join(timeout=10)
        if not thread.is_alive():
            self.exchange()


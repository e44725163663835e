"""The interface every event store implements: a few narrow parts and their composition.

An event store keeps the impressions the service logs, the clicks and rewards on them, the
counts the click features and the position-bias estimate are computed from, and what the
processes sharing it coordinate through. The service, the trainer, the experiment reports
and off-policy evaluation use nothing else of it. Its methods fall into four parts, each an
abstract class of its own, with its own conformance checks (:mod:`reranker.stores.conformance`,
run through :mod:`reranker.testing`):

* :class:`ImpressionLog`: impressions, clicks and rewards, closing them, and reading them
  back (the trainer, the experiment reports, off-policy evaluation);
* :class:`ClickCounts`: the raw counts of clicks and position-weighted exposures per query
  and document, and the position-bias estimate: counts, never features (the click features
  are computed from them in :mod:`reranker.features.clicks`);
* :class:`Coordination`: what the processes sharing the store agree on: an experiment's
  state, the exchange of request counts for the limits, the trainer's lock, leadership and
  status, the signing secret;
* :class:`Maintenance`: counting, checking and shrinking the store (stats, writability and
  damage checks, retention, vacuum, disk use).

A store registers a subclass of :class:`EventStore`, the composition of the four, through the
``reranker_register_event_stores`` hook; ``store.type`` selects it by :attr:`EventStore.name`.
A host component is typed against the narrowest part it uses.

What every store must guarantee (the conformance checks test it):

* A write has happened when its method returns: :meth:`ImpressionLog.record_click` and
  :meth:`ImpressionLog.record_reward` are *durable* then (the service answers 202 after
  them), and every process sharing the store sees them.
* Closing numbers impressions with ``closed_seq`` 1, 2, 3, ... without gaps, oldest first,
  and a reader never sees a number before every lower one is visible too: the trainer follows
  them by a cursor and would skip an impression otherwise.
* A closed impression's clicks and reward never change again.
* Retention (:meth:`Maintenance.retain`) removes only impressions that every reader it is
  given has applied: an impression the trainer has yet to learn from is never deleted nor
  compacted.
* Errors of the storage itself (unreachable, locked for too long, disk full) raise
  :class:`reranker.core.errors.StoreError` (503: nothing was written, the client may retry),
  naming the store without secrets; errors of the request raise the errors each method names.
"""

from __future__ import annotations

import abc
import contextlib
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reranker.core.errors import RerankerError, StoreError
from reranker.features.clicks import PositionBias, click_lifts
from reranker.stores.events import ClickResult, Impression, RewardResult, ServedPage

#: Impressions read per batch when pages are streamed (:meth:`ImpressionLog.pages_since`).
PAGE_BATCH = 1000


@dataclass(frozen=True)
class Reader:
    """One reader of the closed impressions, for retention: the arm ids whose impressions it
    learns from (it also reads the mixed lists, ``arm`` None, as
    :meth:`EventStore.closed_since` gives them), and the ``closed_seq`` through which its
    newest saved model has applied them."""

    arms: tuple[str, ...]
    cursor: int


@dataclass(frozen=True)
class Retained:
    """What one :meth:`EventStore.retain` did."""

    deleted: int = 0  # impressions deleted, with their clicks and rewards
    compacted: int = 0  # impressions whose features were dropped
    forgotten: int = 0  # queries whose own click counts were deleted (not searched since)


class ImpressionLog(abc.ABC):
    """Impressions, the clicks and rewards on them, closing them, and reading them back.

    Safe to share between the threads of a process, and between processes (and, for stores
    that allow it, machines) opening the same store.
    """

    #: Identifies this event log (kept in the store, made when it is created); a model's
    #: cursor is only valid for the log it came from.
    store_id: str

    #: Where the store is, for messages: a file, or a server and database without password.
    location: str

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; the object is not used afterwards."""

    # -- writing ----------------------------------------------------------------------------

    @abc.abstractmethod
    def log_impression(self, imp: Impression) -> None:
        """Record a served page, and count its shown documents' exposures (the
        :meth:`ClickCounts.position_bias` weights of the positions they were shown at, into
        the counts :meth:`ClickCounts.click_counts` reads) in the same transaction. The
        write may happen after this returns (the SQL stores queue it: :mod:`.write_behind`),
        but every later call of this object sees the impression as written: a click on it, a
        read, the counts."""

    def flush(self) -> None:
        """Return once every impression this object has logged is written, so that other
        objects and processes sharing the store see it (a store that writes them before
        :meth:`log_impression` returns has nothing to do)."""
        return None

    @property
    def queued_impressions(self) -> int:
        """Impressions this object has logged and not yet written (0 for a store that writes
        them before :meth:`log_impression` returns)."""
        return 0

    def impressions_waiting(self) -> tuple[int, str | None]:
        """Impressions this object has taken and not yet written, and, while they wait
        because writing them fails, the failure (None otherwise); a store that writes at
        once has none."""
        return 0, None

    @abc.abstractmethod
    def record_click(self, impression_id: str, doc_id: str,
                     now: float | None = None) -> ClickResult:
        """Store a click durably, with its click count and, when it fell in a pair the
        learner randomised, the position-bias counts, in one transaction. Unknown impression:
        :class:`~reranker.core.errors.NotFoundError`; a document not shown in it:
        :class:`~reranker.core.errors.UnprocessableError`; a closed impression:
        :class:`~reranker.core.errors.ConflictError`. A repeated click is accepted and counted
        once (``duplicate=True``), also after closing."""

    def record_clicks(self, clicks: Sequence[tuple[str, str, float]]
                      ) -> list[ClickResult | RerankerError]:
        """Store several clicks ``(impression_id, doc_id, time)``, each as
        :meth:`record_click` would, durably when this returns; per click its result, or the
        error of that click alone (unknown impression, not shown, closed). A failure of the
        store raises, and then none of them was written. This default records them one by
        one; the SQL stores write them in one transaction, and their :meth:`record_click`
        lets concurrent clicks share one such transaction (group commit)."""
        outcomes: list[ClickResult | RerankerError] = []
        for impression_id, doc_id, now in clicks:
            try:
                outcomes.append(self.record_click(impression_id, doc_id, now))
            except StoreError:
                raise
            except RerankerError as exc:
                outcomes.append(exc)
        return outcomes

    @abc.abstractmethod
    def record_reward(self, impression_id: str, value: float,
                      now: float | None = None) -> RewardResult:
        """Store the application's reward for a page durably; a later one replaces it while
        the page is open. Unknown impression: ``NotFoundError``; a closed impression:
        ``ConflictError``, unless it is the value already stored."""

    @abc.abstractmethod
    def close_impressions(self, before: float, limit: int | None = None) -> int:
        """Close the open impressions created before ``before`` (oldest first, at most
        ``limit``), numbering them with the next ``closed_seq`` values; return how many."""

    # -- reading ----------------------------------------------------------------------------

    @abc.abstractmethod
    def get_impression(self, impression_id: str) -> Impression:
        """One impression with its clicks (``clicked``) and reward; ``NotFoundError``."""

    @abc.abstractmethod
    def closed_since(self, cursor: int, limit: int,
                     arms: tuple[str, ...] | None = None) -> list[Impression]:
        """Closed impressions with ``closed_seq > cursor`` in order (at most ``limit``),
        with their clicks; with ``arms``, only those one of these arm ids showed alone and
        the mixed lists (``arm`` None)."""

    def closed_since_lean(self, cursor: int, limit: int,
                          arms: tuple[str, ...] | None = None) -> list[Impression]:
        """What :meth:`closed_since` returns, except that an impression without a click or
        a reward may come *bare* (``Impression.bare``): without its candidates and features,
        which a trainer of a learner that learns only from clicks does not read. This
        default reads every impression in full."""
        return self.closed_since(cursor, limit, arms)

    @abc.abstractmethod
    def last_closed_seq(self) -> int:
        """The highest ``closed_seq`` handed out so far (0 before the first)."""

    @abc.abstractmethod
    def pending(self, cursor: int) -> dict[str, Any]:
        """``{"open_impressions", "closed_unapplied", "oldest_unapplied", "oldest_open"}``:
        impressions still open, closed ones after ``cursor``, when the first of those was
        created and when the oldest open one was (None if there is none); cheap enough for a
        health check."""

    @abc.abstractmethod
    def first_page(self, page_key: str, since: float) -> Impression | None:
        """The latest first page (offset 0) logged with ``page_key`` since ``since``, whose
        ranking later pages continue; None when there is none."""

    @abc.abstractmethod
    def experiment_rows(self, name: str, after: int, limit: int
                        ) -> list[tuple[int, str | None, str | None, int, list[int]]]:
        """The closed impressions of experiment ``name`` after ``closed_seq`` ``after``, in
        order, as ``(closed_seq, arm, teams JSON, n_shown, clicked 1-based positions)``."""

    def open_experiment_rows(self, name: str, limit: int
                             ) -> list[tuple[str | None, str | None, int, list[int]]]:
        """The newest ``limit`` impressions of experiment ``name`` still open (their
        feedback window has not closed: clicks may still come), oldest first, as ``(arm,
        teams JSON, n_shown, clicked 1-based positions)``; a store that cannot tell returns
        none (the results then have no provisional part)."""
        return []

    def closed_first_pages(self, name: str, after: int, since: float, limit: int
                           ) -> tuple[int, int, int] | None:
        """The next ``limit`` impressions closed after ``closed_seq`` ``after``, counted: ``(the
        last closed_seq read, first pages (offset 0) among them created at ``since`` or later,
        those of experiment name among these)``; the last closed_seq is ``after`` when none
        is left. A store that cannot tell returns None (the results then leave out the
        traffic share)."""
        return None

    def experiment_names(self) -> list[str]:
        """The names of the experiments whose pages the store holds (a store that cannot
        say: none)."""
        return []

    def pages_since(self, since: float, arms: tuple[str, ...] | None = None
                    ) -> Iterator[ServedPage]:
        """The pages logged at ``since`` or later (``created``), first and later pages, in
        the order they were logged, with their clicks; with ``arms``, only those one of
        these arm ids showed alone. Search analytics reads them
        (:mod:`reranker.evaluation.analytics`): a generator that reads a batch at a time
        and holds no connection between two, so a long window is never in memory at once.

        The default reads the closed impressions through :meth:`closed_since`, the only
        ones it can read by a cursor: pages still in their feedback window are left out
        (the SQL stores give them too, and read neither ids nor features)."""
        for imp in closed_pages(self, since, arms):
            yield ServedPage.of(imp)


class ClickCounts(abc.ABC):
    """The counts the click features and the position-bias estimate are computed from: raw
    counts, never features. :meth:`ImpressionLog.log_impression` and
    :meth:`ImpressionLog.record_click` add to them in the same transaction as what they
    write; :func:`reranker.features.clicks.click_lifts` turns them into the features."""

    @abc.abstractmethod
    def click_counts(self, query: str, doc_ids: list[str]
                     ) -> tuple[np.ndarray, tuple[float, float]]:
        """The click counts behind the click features of candidates ``doc_ids`` for
        ``query``: shape ``(n, 4)``, clicks and position-weighted exposure for the
        normalised query, then for each document over all queries, and the total clicks and
        exposure of the log: every impression and click this object has logged before counts
        (a click never counts before it was made); another process's within
        ``features.click_refresh`` seconds (the SQL stores keep the counts they read:
        :mod:`.count_cache`)."""

    @abc.abstractmethod
    def position_bias(self, max_age: float | None = None) -> PositionBias:
        """The position-bias estimate from the counts logged so far (a cached read at most
        ``max_age`` seconds old is fine)."""


class Coordination(abc.ABC):
    """What the processes sharing a store agree on through it: an experiment's state, the
    request counts of the limits, the trainer's lock, leadership and status, and the secret
    impression ids are signed with. Only the experiment's state is required: each of the
    others has a default for a store that keeps none, which its docstring says (each process
    then goes on alone)."""

    @abc.abstractmethod
    def experiment_state(self, name: str) -> dict[str, Any]:
        """The shared state of experiment ``name``; {} when none was stored."""

    @abc.abstractmethod
    def update_experiment_state(self, name: str, change: Callable[[dict], dict],
                                now: float) -> dict[str, Any]:
        """Replace the state of experiment ``name`` by ``change(state)`` atomically: two
        processes changing it at once each see the other's change. Returns the new state."""

    def exchange_requests(self, added: Mapping[tuple[str, str, int], int], since: int,
                          prune: Mapping[str, int]
                          ) -> tuple[list[tuple[str, str, int, int]], int] | None:
        """Share request counts between the processes of this store
        (:class:`reranker.serving.limits.SharedCounts`): add ``added`` (``{(scope, client, slot):
        requests}``, this process's since its last exchange) to the counts kept, delete
        each ``prune`` scope's slots before the one given, and return every count changed
        since mark ``since``, as ``(scope, client, slot, requests)`` of all processes
        together, with the mark to pass next time. The default returns None: a store that
        keeps no counts, where each process limits on its own."""
        return None

    def trainer_lock(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Hold, until the block ends, the right to train the model called ``name`` from this
        store, against every process on every machine that shares the store; wait for it
        while another holds it. The trainer takes it around each pass (inside it, the model
        folder's file lock), so that two trainers never apply an impression twice.

        The default holds nothing: right for a store that only the processes of one machine
        can open (SQLite), where the model folder's file lock already excludes them."""
        return contextlib.nullcontext()

    def trainer_leadership(self) -> Leadership | None:
        """Try, without waiting, to become *the* trainer of this store: the one process, of
        all those serving from it, whose background trainer runs passes (``reranker serve
        --workers N`` starts a trainer in every worker, and ``reranker train --follow`` may
        run beside them). Returns a held :class:`Leadership`, released when its process dies,
        or None while another process holds it. The trainer tries again every
        ``trainer.interval`` seconds, so another process takes over within that time when
        the leader dies. Exactly-once training does not rest on it (:meth:`trainer_lock`
        and the model's cursor do that): it only keeps the other processes from repeating
        the leader's work.

        The default leads at once, everywhere: right for a store that cannot tell (every
        process then trains in turn, each pass under :meth:`trainer_lock`)."""
        return Leadership()

    def record_trainer(self, status: Mapping[str, Any]) -> None:
        """Keep the status of the trainer that runs for this store (``last_run``,
        ``last_error``, ``cursors``: each arm's applied cursor by arm id, ``interval``), which
        every process serving the store reads (:meth:`trainer_status`): a trainer in another
        process (``reranker train --follow``) is seen by the services' ``/healthz`` and
        ``/metrics``. A store that keeps none does nothing."""
        return None

    def trainer_status(self) -> dict[str, Any] | None:
        """What :meth:`record_trainer` kept last, or None."""
        return None

    def signing_secret(self) -> str:
        """A secret made once for this store and kept in it, the same for every process that
        opens it: the default key that impression ids are signed with
        (:mod:`reranker.serving.trust`) when no key is configured. A store that cannot keep one
        raises a :class:`reranker.core.errors.ConfigError` asking for a configured key."""
        from reranker.core.errors import ConfigError

        raise ConfigError(f"the {self.name} event store keeps no signing secret: set the "
                          f"environment variable that security.signing_keys_env names")


class Maintenance(abc.ABC):
    """Counting, checking and shrinking the store: what the health checks, ``reranker train``
    and ``reranker prune`` call."""

    @abc.abstractmethod
    def stats(self) -> dict[str, Any]:
        """``{"impressions", "open_impressions", "clicks", "closed_seq"}``."""

    @abc.abstractmethod
    def check_writable(self) -> None:
        """Write and commit durably a change that changes nothing; raise
        :class:`~reranker.core.errors.StoreError` when the store cannot take a write (a full or
        read-only disk, a lock held too long, a server gone): the readiness check."""

    def check_damage(self) -> None:
        """Raise :class:`~reranker.core.errors.StoreError` (``damaged``) while the store is known
        to be damaged (its files corrupt or truncated), saying what to run; the health
        checks call it. The default knows of no damage."""
        return None

    def retain(self, before: float, readers: Sequence[Reader],
               keep_experiment: str | None = None) -> Retained:
        """Remove the closed impressions created before ``before`` that every reader in
        ``readers`` has applied (or does not read): delete them, with their clicks and
        rewards, except those of experiment ``keep_experiment``, whose features are dropped
        (``features`` None when read) while the page as shown stays for the experiment's
        report. The click counts of a query that no page has shown or clicked since
        ``before`` are deleted too (a store that counts clicks; a process that kept them
        reads them again after ``store.retention``): so a site of queries searched once
        keeps a store of a bounded size. The counts per document over all queries, the
        total and the position-bias estimate stay as they are. A store that cannot remove
        impressions raises
        :class:`~reranker.core.errors.ConfigError`."""
        from reranker.core.errors import ConfigError

        raise ConfigError(f"the {self.name} event store cannot remove impressions: unset "
                          f"store.retention")

    def vacuum(self) -> None:
        """Reclaim the space of removed impressions at once (SQLite gives it back to the file
        system; a store reuses it for new impressions in any case). The default does
        nothing: right for a store that reclaims space by itself."""
        return None

    def disk_bytes(self) -> int | None:
        """Bytes the store takes on disk (None when it cannot say)."""
        return None


class EventStore(ImpressionLog, ClickCounts, Coordination, Maintenance):
    """An event store: the four parts together, and how to open one. The class a plugin
    registers; its abstract methods are those of the parts.
    """

    #: The value of ``store.type`` that selects this store.
    name: str = ""

    @classmethod
    def missing(cls, config) -> str | None:
        """Why the store the config names is not there yet (naming the key: "store.path:
        FILE does not exist"), or None when it is there or the store cannot tell without
        opening it: a command that only reads the store says so instead of creating an
        empty one."""
        return None

    @classmethod
    @abc.abstractmethod
    def from_config(cls, config) -> EventStore:
        """Open (creating or migrating it when needed) the store a validated
        :class:`reranker.core.config.Config` names in its ``store`` section; errors name the key
        (``store.path``, ``store.dsn``) and never a password."""

    def click_features(self, query: str, doc_ids: list[str], smoothing: float) -> np.ndarray:
        """Deprecated: the click features are computed outside the store, from its counts,
        by :func:`reranker.features.clicks.click_lifts` (``click_lifts(store.click_counts(query,
        doc_ids), smoothing)``, which this returns). Nothing in reranker calls it; it is
        kept for code outside that still does."""
        warnings.warn("EventStore.click_features is deprecated: use reranker.features.clicks."
                      "click_lifts(store.click_counts(query, doc_ids), smoothing)",
                      DeprecationWarning, stacklevel=2)
        return click_lifts(self.click_counts(query, doc_ids), smoothing)


class Leadership:
    """A held trainer leadership (:meth:`Coordination.trainer_leadership`)."""

    def held(self) -> bool:
        """Whether it is still held (a store whose leadership lives on a connection loses
        it with the connection)."""
        return True

    def release(self) -> None:
        """Give it up (harmless twice)."""


def closed_pages(log: ImpressionLog, since: float = 0.0, arms: tuple[str, ...] | None = None
                 ) -> Iterator[Impression]:
    """The closed impressions of ``log`` logged at ``since`` or later, in the order they
    closed, with their clicks; with ``arms``, only those one of these arm ids showed alone
    (not the mixed lists :meth:`ImpressionLog.closed_since` adds). Read :data:`PAGE_BATCH`
    at a time: judgments, UBI exports and analytics read a whole window so, never all of it
    in memory at once."""
    cursor = 0
    while True:
        batch = log.closed_since(cursor, PAGE_BATCH, arms)
        if not batch:
            return
        cursor = batch[-1].closed_seq
        for imp in batch:
            if imp.created >= since and (arms is None or imp.arm in arms):
                yield imp

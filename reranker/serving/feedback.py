"""Taking feedback on served pages: clicks (one, or a batch an application's server forwards)
and rewards, each checked (its fields, the impression's signature and binding, the page's
click limit: :mod:`reranker.serving.trust`) and durable in the event store when answered."""

from __future__ import annotations

import time
from typing import Any

from reranker.core.errors import ConflictError, NotFoundError, RerankerError
from reranker.serving.checks import check_doc_id, check_impression_id, check_reward
from reranker.serving.trust import TrustGuard, rejection
from reranker.stores import ImpressionLog
from reranker.stores.events import ClickResult, RewardResult

#: Seconds after its issue during which a click or reward on an impression the event store
#: does not have waits for it (every :data:`UNWRITTEN_PAUSE` seconds): a worker process
#: writes its impressions after answering (:mod:`reranker.stores.write_behind`), and the
#: click may reach another worker first.
UNWRITTEN_GRACE = 2.0
UNWRITTEN_PAUSE = 0.02


class FeedbackDesk:
    """Records the clicks and rewards of one service's pages."""

    def __init__(self, events: ImpressionLog, trust: TrustGuard, feedback_window: float):
        self.events = events
        self.trust = trust
        #: ``trainer.feedback_window``: named when feedback on a closed page is refused.
        self.feedback_window = feedback_window

    def click(self, impression_id: Any, doc_id: Any, user_id: Any = None,
              session_id: Any = None) -> ClickResult:
        """Record a click on a shown result; durable when this returns. ``user_id`` and
        ``session_id`` are the ones the search gave: a page served to a user or session
        accepts clicks only with them (:mod:`reranker.serving.trust`)."""
        doc_id = self.checked_click(impression_id, doc_id, user_id, session_id)
        with self.trust.counting("click"):
            return self._written(self.events.record_click, impression_id, doc_id)

    def click_many(self, clicks: list[dict[str, Any]]) -> list[ClickResult | RerankerError]:
        """Record a batch of clicks, each a mapping as :meth:`click` takes its arguments
        (``impression_id``, ``doc_id``, ``user_id``, ``session_id``), all durable when this
        returns, in as few commits as the store makes of them (``POST /clicks``: an
        application's server forwarding its users' clicks). Each click is checked as
        :meth:`click` checks it; the outcomes come in the clicks' order, a
        :class:`ClickResult` or the error that refused that click alone. An error of the
        store itself (unavailable, full) refuses the whole batch."""
        outcomes: list[ClickResult | RerankerError | None] = [None] * len(clicks)
        checked: list[tuple[int, str, str]] = []
        for i, item in enumerate(clicks):
            impression_id = item.get("impression_id")
            try:
                doc_id = self.checked_click(impression_id, item.get("doc_id"),
                                            item.get("user_id"), item.get("session_id"))
            except RerankerError as exc:
                outcomes[i] = exc
                continue
            checked.append((i, impression_id, doc_id))
        now = time.time()
        while checked:
            written = self.events.record_clicks([(imp, doc, now) for _, imp, doc in checked])
            waiting = []
            for click, outcome in zip(checked, written, strict=True):
                if isinstance(outcome, NotFoundError) and self.unwritten(click[1]):
                    waiting.append(click)  # see _written
                    continue
                if isinstance(outcome, ConflictError):  # its page was closed and trained on
                    outcome = rejection(self._late(outcome), "replayed")
                    self.trust.count("click", "replayed")
                outcomes[click[0]] = outcome
            if waiting:
                time.sleep(UNWRITTEN_PAUSE)
            checked = waiting
        return outcomes

    def checked_click(self, impression_id: Any, doc_id: Any, user_id: Any,
                      session_id: Any) -> str:
        """A click's fields and trust checks (signature, binding, the page's click limit);
        its ``doc_id`` as a string."""
        check_impression_id(impression_id)
        doc_id = check_doc_id(doc_id)
        with self.trust.counting("click"):
            self.trust.verify(impression_id, user_id, session_id)
            self.trust.limit_impression(impression_id)
        return doc_id

    def reward(self, impression_id: Any, value: Any, user_id: Any = None,
               session_id: Any = None) -> RewardResult:
        """Record the application's reward for a page (a purchase, a satisfaction signal),
        which reward-aware learners learn from; durable when this returns. ``user_id`` and
        ``session_id`` as for :meth:`click`."""
        check_impression_id(impression_id)
        value = check_reward(value)
        with self.trust.counting("reward"):
            self.trust.verify(impression_id, user_id, session_id)
            return self._written(self.events.record_reward, impression_id, value)

    def _written(self, write, impression_id: str, *args):
        """``write(impression_id, *args)`` (a click or a reward): a closed page's refusal is
        counted as ``replayed``; an impression the store does not have yet, issued within
        :data:`UNWRITTEN_GRACE` seconds, is waited for (another process may still hold it in
        its queue of impressions to write: :mod:`reranker.stores.write_behind`)."""
        while True:
            try:
                return write(impression_id, *args)
            except ConflictError as exc:  # its page was closed and trained on
                raise rejection(self._late(exc), "replayed") from None
            except NotFoundError:
                if not self.unwritten(impression_id):
                    raise
            time.sleep(UNWRITTEN_PAUSE)

    def _late(self, exc: ConflictError) -> ConflictError:
        """The store's refusal of feedback on a closed page, with the window it missed."""
        return ConflictError(f"{exc.message} (a page takes clicks and its reward for "
                             f"trainer.feedback_window, {self.feedback_window:g} s, after its "
                             f"search)", field=exc.field)

    def unwritten(self, impression_id: str) -> bool:
        """Whether an impression the store does not have may still be on its way: issued
        within :data:`UNWRITTEN_GRACE` seconds (plus one: the issue time is whole
        seconds)."""
        return time.time() - self.trust.signer.issued(impression_id) <= UNWRITTEN_GRACE + 1

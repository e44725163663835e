"""What one client may teach: the per-client, per-address and per-query bound on the
impressions training learns from (contribution bounding; docs/algorithms.md, "Bounded
influence"). The service logs who each page was served to (:mod:`reranker.serving.trust`);
the trainer asks this budget before it learns from a page."""

from __future__ import annotations

#: Separates the parts of a logged client: its id, and the key of its network address.
CLIENT_PARTS = "\x1f"


class ClientBudget:
    """The per-client and per-address bound on what training learns
    (``security.client_budget``, ``security.address_budget``): of each client's
    impressions with clicks, at most ``budget`` per window of ``window`` seconds (fixed
    windows of the impressions' times) are learned from, and of each network address's at
    most ``address_budget``, whatever ids its requests claimed; the rest are passed over.
    This is contribution bounding (docs/algorithms.md, "Bounded influence"): what one
    source can teach is capped however much traffic it sends.

    A client is who the impression was logged as served to (its ``user_id``: the user, the
    session or a keyed hash of the address, followed by the address's key when the ids are
    the client's word, :meth:`TrustGuard.logged_client
    <reranker.serving.trust.TrustGuard.logged_client>`); impressions of none (in-process
    searches without a user or session) are not bounded. Passing over whole impressions,
    rather than scaling their updates, works the same for every learner: a client's
    impressions beyond its budget change no model, whatever the learner does with one.

    The decisions are made in ``closed_seq`` order and remembered for impressions after the
    saved cursor, so a pass that reads them again (after one that saved no version) decides
    the same way. The counts live in the trainer's process: a trainer that starts anew
    (a restart, another process taking the lead) counts the current window from zero."""

    def __init__(self, budget: int, window: float, address_budget: int = 0,
                 query_budget: int = 0):
        self.budget = budget
        self.address_budget = address_budget
        self.query_budget = query_budget
        self.window = window
        self._counts: dict[str, tuple[int, int]] = {}  # client -> (window number, count)
        self._denied: set[int] = set()  # closed_seq of impressions passed over
        self._through = 0  # the highest closed_seq decided

    def allows(self, client: str | None, closed_seq: int, created: float,
               clicked: bool, query: str | None = None) -> bool:
        """Whether training may learn from this impression (of ``query``, normalised, which
        ``security.query_budget`` bounds whoever sent it)."""
        if not clicked:
            return True
        if client is None and not (self.query_budget and query is not None):
            return True
        if not (self.budget or self.address_budget or self.query_budget):
            return True
        if closed_seq <= self._through:  # decided before: the same answer
            return closed_seq not in self._denied
        self._through = closed_seq
        window = int(created // self.window)
        who, _, address = (client or "").partition(CLIENT_PARTS)
        if not address and who.startswith("address:"):
            address = who
        bounds = [(key, limit) for key, limit in (
            (who, self.budget), (address, self.address_budget),
            (None if query is None else f"query:{query}", self.query_budget)) if key and limit]
        counts = []
        for key, limit in bounds:
            start, count = self._counts.get(key, (window, 0))
            if window > start:
                start, count = window, 0
            if count >= limit:
                self._denied.add(closed_seq)
                return False
            counts.append((key, start, count))
        if len(self._counts) >= 100_000:
            self._counts = {c: v for c, v in self._counts.items() if v[0] >= window}
        for key, start, count in counts:
            self._counts[key] = (start, count + 1)
        return True

    def forget_through(self, cursor: int) -> None:
        """Forget the decisions up to ``cursor``, the saved model's (never read again)."""
        self._denied = {seq for seq in self._denied if seq > cursor}

"""Simulated users for offline replay (docs/algorithms.md, "Simulated users").

A user sees a ranking of one query's candidates and answers with a :class:`Feedback`.
Click-based users click (cascade or position-based click models) and their clicks go
through :func:`reranker.learners.feedback.feedback_from_positions`, the clicks-to-feedback code of
live traffic. The coactive users of Shivaswamy & Joachims answer with an improved ranking
directly; the documents they move to the top count as their clicks.

All arrays a user receives are in the candidate order the learner saw: ``labels`` are the
graded relevance labels, ``utility`` is ``w* . x`` for every candidate, and
``ideal_utility`` is the best depth-5 utility ``U(y*)`` of the query.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import Feedback, feedback_from_positions, positions_in
from reranker.offline.click_models import CascadeClickModel, PositionBasedClickModel, cascade_model

#: Depth of the users' utility, as in the coactive papers' web-search experiments.
USER_DEPTH = 5
_G = FeatureMap(USER_DEPTH, "log2").discounts(USER_DEPTH)


def user_utility(utility: np.ndarray, ranking: np.ndarray) -> float:
    """``U(y) = w* . phi(q, y)`` at depth 5 with log2 discounts."""
    top = ranking[:USER_DEPTH]
    return float(_G[: len(top)] @ utility[top])


class SimulatedUser(ABC):
    """Answers a ranking with feedback."""

    name = ""

    @abstractmethod
    def respond(self, ranking: np.ndarray, n_shown: int, labels: np.ndarray,
                utility: np.ndarray, ideal_utility: float,
                rng: np.random.Generator) -> Feedback:
        """Feedback on ``ranking`` (candidate indices, best first)."""


class ClickingUser(SimulatedUser):
    """Clicks on the shown list following a click model. Random numbers are drawn from the
    generator in blocks (a simulator's hot path), so one generator gives one click stream."""

    BLOCK = 4096

    def __init__(self, model: CascadeClickModel | PositionBasedClickModel):
        self.model = model
        self._uniforms = np.empty((0, 2, 0))
        self._next = 0

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.model.name

    def respond(self, ranking, n_shown, labels, utility, ideal_utility, rng) -> Feedback:
        if self._next == len(self._uniforms) or self._uniforms.shape[2] < n_shown:
            self._uniforms = rng.random((self.BLOCK, 2, max(n_shown, 10)))
            self._next = 0
        u = self._uniforms[self._next]
        self._next += 1
        clicked = self.model.clicks_from_uniforms(labels[ranking[:n_shown]], u[0, :n_shown],
                                                  u[1, :n_shown])
        return feedback_from_positions(ranking, n_shown, clicked.nonzero()[0])


def _moved_to_top(ranking: np.ndarray, top: np.ndarray, n_shown: int) -> Feedback:
    """``ybar``: ``top`` first (in the user's order), then the rest of ``ranking`` in its
    order. The moved documents count as clicks, listed in the order they were shown like
    live clicks."""
    mask = np.zeros(len(ranking), dtype=bool)
    mask[top] = True
    in_ranking = mask[ranking]
    positions = np.flatnonzero(in_ranking)
    improved = np.concatenate([top, ranking[~in_ranking]])
    return Feedback(ranking=ranking, n_shown=n_shown, clicked=ranking[positions],
                    improved=improved, positions=positions)


def _strict_top(ranking: np.ndarray, utility: np.ndarray, alpha: float,
                ideal_utility: float) -> np.ndarray | None:
    """The five documents a strictly alpha-informative user puts on top, or None when the
    ranking is already optimal (Coactive Learning, section 6.1.1: go down the list until
    five results, placed on top in order of utility, make ``ybar`` alpha-informative)."""
    current = user_utility(utility, ranking)
    gap = ideal_utility - current
    if gap <= 1e-12 * max(1.0, abs(ideal_utility)):
        return None
    needed = current + alpha * gap - 1e-12 * max(1.0, abs(ideal_utility))
    k = min(USER_DEPTH, len(ranking))
    heap: list[tuple[float, int]] = []  # the k best (utility, -position) seen so far
    for j, item in enumerate(ranking.tolist()):
        entry = (float(utility[item]), -j)
        if len(heap) < k:
            heapq.heappush(heap, entry)
        elif entry > heap[0]:
            heapq.heapreplace(heap, entry)
        if j + 1 >= k:
            best = sorted(heap, reverse=True)
            if float(_G[:k] @ np.array([u for u, _ in best])) >= needed:
                break
    return ranking[[-p for _, p in best]]


@dataclass
class StrictAlphaInformativeUser(SimulatedUser):
    """Strictly alpha-informative feedback w.r.t. ``w*`` (an idealised user)."""

    alpha: float = 0.5

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"strict_alpha:{self.alpha:g}"

    def respond(self, ranking, n_shown, labels, utility, ideal_utility, rng) -> Feedback:
        top = _strict_top(ranking, utility, self.alpha, ideal_utility)
        if top is None:
            return Feedback(ranking=ranking, n_shown=n_shown)
        return _moved_to_top(ranking, top, n_shown)


@dataclass
class ExpectedAlphaInformativeUser(StrictAlphaInformativeUser):
    """Alpha-informative only in expectation (Coactive Learning, section 6.2.4): the strict
    feedback mixed with ``n_random`` random rankings, each random one with probability
    ``p`` and the strict one with ``1 - n_random * p``, ``p`` chosen so that the expected
    utility gain is exactly ``alpha`` times the gap to the optimum."""

    n_random: int = 5

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"expected_alpha:{self.alpha:g}"

    def respond(self, ranking, n_shown, labels, utility, ideal_utility, rng) -> Feedback:
        strict = super().respond(ranking, n_shown, labels, utility, ideal_utility, rng)
        if not strict.informative:
            return strict
        current = user_utility(utility, ranking)
        gain = user_utility(utility, strict.improved) - current
        randoms = [rng.permutation(len(ranking)) for _ in range(self.n_random)]
        random_gains = [user_utility(utility, r) - current for r in randoms]
        denominator = self.n_random * gain - sum(random_gains)
        target = self.alpha * (ideal_utility - current)
        if denominator > 0:
            p = min(max((gain - target) / denominator, 0.0), 1.0 / self.n_random)
        else:  # the random rankings are no worse on average: any mix is informative enough
            p = 1.0 / (self.n_random + 1)
        pick = rng.random()
        if pick < p * self.n_random:
            return _random_feedback(ranking, randoms[int(pick / p)], n_shown)
        return strict


def _random_feedback(ranking: np.ndarray, improved: np.ndarray, n_shown: int) -> Feedback:
    """A random ranking as feedback; its top five count as the user's clicks."""
    positions = np.sort(positions_in(ranking)[improved[:USER_DEPTH]])
    return Feedback(ranking=ranking, n_shown=n_shown, clicked=ranking[positions],
                    improved=improved, positions=positions)


@dataclass
class NoisyUser(SimulatedUser):
    """Noisy feedback at depth ``k`` (Coactive Learning, section 6.1.1): the user inspects
    the top ``k`` and puts the five with the highest labels on top."""

    depth: int = 10

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"noisy:{self.depth}"

    def respond(self, ranking, n_shown, labels, utility, ideal_utility, rng) -> Feedback:
        inspected = ranking[: self.depth]
        best = inspected[np.argsort(-labels[inspected], kind="stable")[:USER_DEPTH]]
        return _moved_to_top(ranking, best, n_shown)


@dataclass
class ChoosingUser(SimulatedUser):
    """Delage's user: comes for one preferred item, drawn with probability proportional to
    its gain ``2^label - 1`` whatever the ranking, and clicks it wherever it is ranked
    (queries without a relevant document get no click). The metrics then tell how high the
    learner ranked the item users wanted."""

    name: str = "choice"

    def respond(self, ranking, n_shown, labels, utility, ideal_utility, rng) -> Feedback:
        gains = np.exp2(labels) - 1.0
        total = float(gains.sum())
        if total <= 0:
            return feedback_from_positions(ranking, n_shown, np.empty(0, dtype=np.intp))
        item = int(np.searchsorted(np.cumsum(gains), rng.random() * total, side="right"))
        item = min(item, len(labels) - 1)
        position = np.flatnonzero(ranking == item)
        return feedback_from_positions(ranking, n_shown, position)


USER_HELP = ("perfect, navigational, informational (cascade click models; add '-every' for "
             "the reference implementation's stop coin at every examined position, e.g. "
             "informational-every); pbm:ETA (position-based, attractiveness as the perfect "
             "model's clicks); strict_alpha:ALPHA and expected_alpha:ALPHA (coactive users "
             "who know w*); noisy:DEPTH (the five best-labelled of the top DEPTH put on top); "
             "choice (Delage's user: one preferred item drawn by gain, clicked wherever it is "
             "ranked)")


def make_user(spec: str, grades: int) -> SimulatedUser:
    """A user from its name, e.g. ``informational``, ``strict_alpha:0.5``, ``noisy:10``;
    ``grades`` is 2 (labels 0-1), 3 (labels 0-2) or 5 (labels 0-4) for the click models."""
    name, _, arg = spec.partition(":")
    try:
        if name in ("strict_alpha", "expected_alpha"):
            alpha = float(arg) if arg else 0.5
            if not 0 < alpha <= 1:
                raise ValueError(f"alpha must be in (0, 1], got {alpha:g}")
            cls = StrictAlphaInformativeUser if name == "strict_alpha" else \
                ExpectedAlphaInformativeUser
            return cls(alpha=alpha)
        if name == "noisy":
            depth = int(arg) if arg else 10
            if depth < 1:
                raise ValueError(f"depth must be positive, got {depth}")
            return NoisyUser(depth=depth)
        if name == "choice" and not arg:
            return ChoosingUser()
        if name == "pbm":
            eta = float(arg) if arg else 1.0
            attractiveness = cascade_model("perfect", grades).click_probs
            return ClickingUser(PositionBasedClickModel(attractiveness, eta, f"pbm:{eta:g}"))
        base, every = (name[:-6], True) if name.endswith("-every") else (name, False)
        if base in ("perfect", "navigational", "informational") and not arg:
            model = cascade_model(base, grades, stop_every_position=every)
            return ClickingUser(CascadeClickModel(name, model.click_probs, model.stop_probs,
                                                  every))
    except ValueError as exc:
        raise ValueError(f"click model {spec!r}: {exc}") from None
    raise ValueError(f"unknown click model {spec!r}; expected {USER_HELP}")


def users_click_through(service, corpus, searches: int, click_model, rng: np.random.Generator
                        ) -> dict[tuple[str, str], int]:
    """``searches`` searches of ``corpus``'s queries (drawn at random) through ``service`` in
    process, each from a session of its own, clicked by ``click_model`` on the corpus's
    hidden labels; the label of each (normalised query, document) shown."""
    from reranker.features.clicks import query_key

    shown: dict[tuple[str, str], int] = {}
    for t in range(searches):
        query, topic = corpus.queries[rng.integers(len(corpus.queries))]
        page = service.search(query, 10, session_id=f"s{t}")
        ids = [hit["id"] for hit in page["hits"]]
        labels = np.array([corpus.label(topic, doc) for doc in ids], dtype=np.intp)
        for doc, label in zip(ids, labels, strict=True):
            shown[(query_key(query), doc)] = int(label)
        for j in np.flatnonzero(click_model.clicks(labels, rng)):
            service.click(page["impression_id"], ids[j], session_id=f"s{t}")
    return shown

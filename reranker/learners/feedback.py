"""From clicks to feedback (docs/algorithms.md, "From clicks to feedback").

Live traffic and the offline simulator both turn what a user did into a :class:`Feedback`
through the functions here, so every learner is trained by the same code either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reranker.features.clicks.position_bias import PAIR_DEPTH


def improved_ranking(ranking: np.ndarray, clicked: np.ndarray) -> np.ndarray:
    """The coactive improved ranking ``ybar``.

    Coactive Learning, section 3.2: "prepend to the ranking all results that the user
    clicked" -- the clicked candidates in the order they were shown, then the rest of
    ``ranking`` in its original order. ``ranking`` and ``clicked`` hold candidate indices.
    """
    ranking = np.asarray(ranking, dtype=np.intp)
    if len(clicked) == 0:
        return ranking.copy()
    is_clicked = np.zeros(ranking.max() + 1 if len(ranking) else 0, dtype=bool)
    is_clicked[np.asarray(clicked, dtype=np.intp)] = True
    mask = is_clicked[ranking]
    return np.concatenate([ranking[mask], ranking[~mask]])


_NO_CLICKS = np.empty(0, dtype=np.intp)
_NO_CLICKS.setflags(write=False)
_ALL_TRUE = np.ones(1024, dtype=bool)  # copied, never written: a fast np.ones for masks


@dataclass(eq=False, slots=True)
class Feedback:
    """What one impression taught us.

    ``ranking`` is the presented ranking ``y`` (candidate indices, best first, all
    candidates); the user saw its first ``n_shown``. ``clicked`` holds the clicked candidate
    indices in the order they were shown. ``improved`` is the coactive ``ybar``: built from
    the clicks for live traffic, or given directly by a simulated alpha-informative user.
    ``informative`` is False when ``ybar == y`` (no click, or only the top results clicked):
    there is nothing to learn. ``log_prob`` and ``propensities`` are what a stochastic policy
    logged when it ranked, and ``context`` the small per-impression record the learner
    logged with it (for the perceptrons, which pairs they randomised: see
    :mod:`reranker.learners.coactive`). Arrays are integer arrays of candidate indices; treat them
    as
    read-only.
    """

    ranking: np.ndarray
    n_shown: int
    clicked: np.ndarray | None = None
    improved: np.ndarray | None = None
    log_prob: float | None = None
    propensities: np.ndarray | None = None
    informative: bool | None = None
    positions: np.ndarray | None = None  # 0-based positions of ``clicked`` in ``ranking``
    context: dict | None = None  # what the learner logged with the impression
    reward: float | None = None  # the application's reward for the page (POST /reward)
    #: graded feedback on each of the first ``n_shown`` shown results, in shown order, where
    #: there is more than a click to report (a simulated user of the semibandit protocol
    #: reports each shown result's relevance label); None: the clicks are the feedback
    values: np.ndarray | None = None
    #: the normalised query of the page (:func:`reranker.features.clicks.counts.query_key`),
    #: when known: the unit whose agreement the learned weights need
    #: (:mod:`reranker.learners.shrinkage`)
    query: str | None = None
    #: a further feedback of the same impression, learned right after this one (a
    #: specialised page teaches its judgments in both pairings of adjacent positions, one
    #: feedback each: :func:`reranker.learners.specialization.taught_by`); a learner's
    #: ``update`` follows the chain, its ``_update`` sees one feedback at a time
    then: Feedback | None = None

    def __post_init__(self) -> None:
        if self.clicked is None:
            self.clicked = _NO_CLICKS
        if self.improved is None:
            self.improved = improved_ranking(self.ranking, self.clicked)
        if self.informative is None:
            self.informative = not np.array_equal(self.improved, self.ranking)

    def chain(self) -> list[Feedback]:
        """This feedback and those chained after it (``then``), in order, each with this
        one's ``query`` where it has none."""
        parts, part = [], self
        while part is not None:
            if part.query is None:
                part.query = self.query
            parts.append(part)
            part = part.then
        return parts


def feedback_from_positions(ranking: np.ndarray, n_shown: int, positions: np.ndarray, *,
                            log_prob: float | None = None) -> Feedback:
    """Feedback from the clicked *positions* in the ranking (0-based, ascending), the form
    simulated users produce; live clicks come here through :func:`feedback_from_clicks`.

    ``ybar`` is :func:`improved_ranking` of the clicks, built here without looking up
    positions again."""
    n_clicks = len(positions)
    if n_clicks == 0:
        return Feedback(ranking, n_shown, _NO_CLICKS, ranking, log_prob, None, False,
                        positions)
    clicked = ranking[positions]
    # Clicks on exactly the top n_clicks positions leave the ranking as it was.
    if positions[-1] == n_clicks - 1:
        return Feedback(ranking, n_shown, clicked, ranking, log_prob, None, False, positions)
    n = len(ranking)
    mask = _ALL_TRUE[:n].copy() if n <= len(_ALL_TRUE) else np.ones(n, dtype=bool)
    mask[positions] = False
    return Feedback(ranking, n_shown, clicked, np.concatenate([clicked, ranking[mask]]),
                    log_prob, None, True, positions)


def positions_in(ranking: np.ndarray) -> np.ndarray:
    """Each candidate's 0-based position in ``ranking`` (the inverse permutation)."""
    ranking = np.asarray(ranking, dtype=np.intp)
    position = np.empty(len(ranking), dtype=np.intp)
    position[ranking] = np.arange(len(ranking))
    return position


def feedback_from_clicks(ranking: np.ndarray, n_shown: int, clicked: np.ndarray, *,
                         log_prob: float | None = None,
                         propensities: np.ndarray | None = None,
                         context: dict | None = None,
                         reward: float | None = None) -> Feedback:
    """Feedback of an impression from its clicked candidate indices (any order, no repeats),
    as live traffic logs them: located in the ranking, then :func:`feedback_from_positions`."""
    ranking = np.asarray(ranking, dtype=np.intp)
    clicked = np.asarray(clicked, dtype=np.intp)
    positions = np.empty(0, dtype=np.intp)
    if len(clicked):
        positions = np.sort(positions_in(ranking)[clicked])
    feedback = feedback_from_positions(ranking, int(n_shown), positions, log_prob=log_prob)
    feedback.propensities = propensities
    feedback.context = context
    feedback.reward = reward
    return feedback


def item_feedback(feedback: Feedback, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The semibandit feedback of a page (docs/algorithms.md, "Semibandit learners"): the
    first ``k`` shown candidates and each one's own feedback ``y_t(a)``, its graded value
    where the page reports one (:attr:`Feedback.values`), else 1 for a click and 0 for none."""
    shown = np.asarray(feedback.ranking[:k], dtype=np.intp)
    if feedback.values is not None:
        return shown, np.asarray(feedback.values[:k], dtype=np.float64)
    return shown, np.isin(shown, np.asarray(feedback.clicked, dtype=np.intp)).astype(float)


def click_positions(feedback: Feedback) -> np.ndarray:
    """The 0-based positions of the clicks in the presented ranking, ascending."""
    if feedback.positions is not None:
        return np.asarray(feedback.positions, dtype=np.intp)
    if len(feedback.clicked) == 0:
        return _NO_CLICKS
    position = np.empty(len(feedback.ranking), dtype=np.intp)
    position[feedback.ranking] = np.arange(len(feedback.ranking))
    return np.sort(position[np.asarray(feedback.clicked, dtype=np.intp)])


def pair_swapped_ranking(feedback: Feedback, offset: int = 0) -> np.ndarray | None:
    """The improved ranking of a pair-perturbed presentation, or None without information.

    Raman, Joachims, Shivaswamy & Schnabel, *Stable Coactive Learning via Perturbation*
    (ICML 2013; cited in Coactive Learning, section 2), the feedback of the perturbed
    Preference Perceptron for ranking: the shown list is cut into pairs of adjacent
    positions, (1, 2), (3, 4), ... with ``offset`` 0 or (2, 3), (4, 5), ... with ``offset`` 1
    (the random pairing of FairPairs, Radlinski & Joachims 2006, so that every adjacent pair
    can be compared); ``ybar`` is the presented ranking with every pair swapped whose lower
    result was clicked and whose upper result was not. With swap probability 0.5 both
    results of a pair were equally likely to be shown on top, so the position bias of the
    clicks cancels in expectation (smaller probabilities leave part of it)."""
    positions = click_positions(feedback).tolist()  # a few clicks: plain Python is fastest
    clicked = set(positions)
    # a lower position of a pair: offset + 1, offset + 3, ... (0-based), below the page's end
    # (or the depth the pairs stay within, on an experiment's mixed page)
    within = min(feedback.n_shown,
                 int((feedback.context or {}).get(PAIR_DEPTH, feedback.n_shown)))
    upper = [pos - 1 for pos in positions
             if (pos - offset) % 2 == 1 and pos > offset and pos < within
             and pos - 1 not in clicked]
    if not upper:
        return None
    ranking = feedback.ranking
    improved = np.array(ranking, dtype=np.intp)
    for pos in upper:
        improved[pos], improved[pos + 1] = ranking[pos + 1], ranking[pos]
    return improved


def skip_above_pairs(feedback: Feedback) -> list[tuple[int, int]]:
    """Pairwise preferences (skip-above): each clicked candidate is preferred to every
    unclicked one shown above it. Returns ``(preferred, other)`` candidate-index pairs."""
    clicked = set(feedback.clicked.tolist())
    pairs = []
    for pos, item in enumerate(feedback.ranking[: feedback.n_shown].tolist()):
        if item in clicked:
            pairs.extend((item, other) for other in feedback.ranking[:pos].tolist()
                         if other not in clicked)
    return pairs

"""The general model and each query's own evidence, kept apart (docs/algorithms.md, "General
model and query specialisation").

Two kinds of knowledge come out of the clicks. What holds for any query -- which features make
a result worth clicking -- is the *general model*: the learner, over the features that mean
the same for every query (all but ``click_lift:query_doc``), ranking every query, and the only
ranking a query never searched before gets. What holds for one query only -- which of its
documents its users prefer -- is that query's own evidence: its documents' clicks per
position-weighted exposure (the counts behind ``click_lift:query_doc``).

A query's evidence *judges* a pair of its documents when their click rates differ
significantly (:func:`judgment_p_values`: the conditional test of two Poisson rates), and
judges one document against the query's other results when its click rate is significantly
above or below theirs together. Where a query has such a judgment, its page is
*specialised*: the general model's scores, min-max
normalised over the candidates, plus the query's click lift minus one, then randomised
adjacent pairs (:func:`specialised_page`); without one it is the general model's own page.
Four pages without a click judge nothing, so they change nothing.

The general model learns from every page, but never from the order a specialised page gave
the results (that order was chosen by the clicks, and the pairs it puts side by side are
exactly those where the features mislead: learning from them inverts the features). On its
own pages it learns by its own rule; a specialised page with a click teaches it the query's
judgments *at the positions where the general model itself ranks them*: a random pairing of
its own ranking's adjacent positions (both pairings where the evidence gate has loosened),
each pair a judgment covers fed to the learner as a randomised pair whose better result was
clicked (:func:`judgment_feedback`).
So the general model learns from every query what it would learn from its own pages, and a
query's own clicks never explain away what it should learn.

How far the click lift counts against the general model's scores on a specialised page is
the arm's *query weight* (:class:`QueryWeight`), 1 to start with: it doubles or halves only
when the randomised pairs of specialised pages that the doubled or halved weight would order
the other way show, at the confidence, that users prefer that order (:func:`weight_duels`).
How strong a query's evidence must be before its page is specialised is the arm's *evidence
gate* (:class:`EvidenceGate`), ``learner.confidence`` to start with, loosened or tightened
by the same kind of duels (:func:`gate_duels`), each of its other levels tested on the pages
it would rank otherwise.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from reranker.features.clicks import CLICK_FEATURES
from reranker.features.clicks.position_bias import (
    PAIR_OFFSET,
    SWAP_PROBABILITY_KEY,
    SWAPPED,
    randomized_pairs,
)
from reranker.features.extraction import kernels
from reranker.learners.base import RankResult
from reranker.learners.coactive import perturbed_page
from reranker.learners.feedback import Feedback, feedback_from_positions

#: The feature a specialised page adds (minus one) to the general model's normalised scores,
#: and that the general model does not see: a document's clicks for this very query.
QUERY_FEATURE = CLICK_FEATURES[0]
#: Default confidence of a judgment (``learner.confidence``).
CONFIDENCE = 0.95
#: Keys of the impression context: the general model's own top of a specialised page (its
#: argmax, candidate indices) and the judgments on its adjacent pairs, ``[upper position,
#: 1 if the lower result is the better]``, in one pairing of adjacent positions (the
#: uppers' parity), or in both on a page ranked where the evidence gate has loosened.
GENERAL, JUDGED = "general", "judged"
#: The context key that marks a specialised page, holding its strongest judgment.
SPECIALISED = "specialised"
#: Context keys of a specialised page: the query weight it was ranked with, and its
#: randomised pairs that the doubled or halved weight orders the other way, ``[upper
#: position, 0 when that weight puts the upper result first else 1, 1 for the doubled weight
#: or 0 for the halved]`` (:func:`weight_duels`).
WEIGHT, WEIGHT_DUELS = "query_weight", "weight_duels"
#: Context keys of a page that tests the arm's evidence gate: the gate's level it was ranked
#: at, and its randomised pairs that the levels on the other side of the query's first
#: (the strictest that specialises it) order the other way, ``[upper position, 0 when those
#: levels put the upper result first else 1, first]`` (:func:`gate_duels`). (Pages logged
#: when the gate tested only its two neighbours kept theirs, tagged looser or stricter,
#: under ``gate_duels``; they settle nothing now.)
GATE, GATE_DUELS = "evidence_level", "gate_level_duels"


def judgment_p_values(clicks_a: np.ndarray, exposure_a: np.ndarray, clicks_b: np.ndarray,
                      exposure_b: np.ndarray) -> np.ndarray:
    """One-sided p-values that document ``b`` is clicked more per unit of exposure than
    ``a`` (elementwise; 1 where nothing can be said).

    Under the position-based model a document's clicks are a Poisson count with mean
    ``exposure * rate``. Given the ``m = c_a + c_b`` clicks the two got together, ``b``'s
    share is Binomial(``m``, ``e_b / (e_a + e_b)``) when the two rates are equal (the
    conditional test of two Poisson rates, Przyborowski & Wilenski 1940), and smaller when
    ``b``'s rate is the lower: the p-value is ``P(X >= c_b)`` under equal rates. Counts are
    rounded to whole clicks."""
    ca, ea, cb, eb = (np.asarray(v, dtype=np.float64) for v in
                      (clicks_a, exposure_a, clicks_b, exposure_b))
    if not ca.shape == ea.shape == cb.shape == eb.shape:
        ca, ea, cb, eb = np.broadcast_arrays(ca, ea, cb, eb)
    out = np.empty(ca.shape)
    kernels().rate_p_values(ca.ravel(), ea.ravel(), cb.ravel(), eb.ravel(), out.reshape(-1))
    return out


@dataclass(frozen=True)
class Judgment:
    """A candidate that a query's users click significantly more (``above``) or less per
    exposure than the query's other results together, with its clicks and exposure, theirs,
    and the p-value of the test: the evidence that specialises the query's pages."""

    doc: int
    above: bool
    clicks: float
    exposure: float
    rest_clicks: float
    rest_exposure: float
    p_value: float

    def to_dict(self) -> dict:
        return {"doc": self.doc, "clicked": "more" if self.above else "less",
                "clicks": self.clicks, "exposure": round(self.exposure, 3),
                "others_clicks": self.rest_clicks,
                "others_exposure": round(self.rest_exposure, 3), "p_value": self.p_value}


@dataclass(frozen=True)
class QueryEvidence:
    """One query's clicks and position-weighted exposures per candidate, shape ``(n,)``
    each, as the event store counts them for ``click_lift:query_doc``."""

    clicks: np.ndarray
    exposure: np.ndarray

    @classmethod
    def from_counts(cls, counts: np.ndarray) -> QueryEvidence:
        """From the per-candidate counts the click features are made of, ``(n, 4)``: clicks
        and exposure for this query, then over all queries."""
        counts = np.asarray(counts, dtype=np.float64)
        return cls(clicks=counts[:, 0], exposure=counts[:, 1])

    @property
    def any_clicks(self) -> bool:
        return bool(len(self.clicks)) and float(self.clicks.max()) > 0.0

    def strongest(self, confidence: float = CONFIDENCE) -> Judgment | None:
        """The candidate whose click rate the query's clicks judge, at the ``confidence``,
        above or below that of the query's other candidates taken together (clicks against
        position-weighted exposure, :func:`judgment_p_values` either way round), the most
        significant one; None when none is: this query is then not specialised. Pages
        without a click judge nothing, nor does a click or two where many results were
        seen."""
        if not self.any_clicks:
            return None
        p = np.empty((len(self.clicks), 2))  # (a search pays for this whenever its query
        kernels().against_the_rest(self.clicks, self.exposure, p)  # has clicks: compiled)
        best = int(np.argmin(p))
        doc, below = divmod(best, 2)
        if p[doc, below] > 1.0 - confidence:
            return None
        c, e = float(self.clicks[doc]), float(self.exposure[doc])
        return Judgment(doc=doc, above=not below, clicks=c, exposure=e,
                        rest_clicks=float(self.clicks.sum()) - c,
                        rest_exposure=max(float(self.exposure.sum()) - e, 0.0),
                        p_value=float(p[doc, below]))

    def judged_pairs(self, ranking: np.ndarray, n_shown: int, offset: int,
                     confidence: float = CONFIDENCE) -> list[tuple[int, bool]]:
        """The judgments on the adjacent pairs of ``ranking`` in pairing ``offset`` (pairs
        (1, 2), (3, 4), ... for 0; (2, 3), ... for 1) inside its first ``n_shown``:
        ``(upper position, True when the lower result is the better)``."""
        uppers = np.arange(offset, min(int(n_shown), len(ranking)) - 1, 2)
        if not len(uppers) or not self.any_clicks:
            return []
        upper, lower = ranking[uppers], ranking[uppers + 1]
        alpha = 1.0 - confidence
        c, e = self.clicks, self.exposure
        a, b = np.concatenate([upper, lower]), np.concatenate([lower, upper])
        both = np.empty(len(a))
        kernels().rate_p_values(c[a], e[a], c[b], e[b], both)
        both = both <= alpha
        lower_better, upper_better = both[:len(upper)], both[len(upper):]
        return [(int(u), bool(lb)) for u, lb, ub in
                zip(uppers.tolist(), lower_better.tolist(), upper_better.tolist(), strict=True)
                if lb or ub]


def minmax(scores: np.ndarray) -> np.ndarray:
    """``scores`` scaled to [0, 1] over the candidates; all 0 when they are constant."""
    scores = np.asarray(scores, dtype=np.float64)
    if not len(scores):
        return scores.copy()
    low, high = float(scores.min()), float(scores.max())
    if not high > low or not math.isfinite(high - low):
        return np.zeros(len(scores))
    return (scores - low) / (high - low)


def specialised_scores(general_scores: np.ndarray, lift: np.ndarray,
                       weight: float = 1.0) -> np.ndarray:
    """The scores of a specialised page: the general model's, min-max normalised over the
    candidates, plus ``weight`` (the arm's :class:`QueryWeight`) times the query's click lift
    minus one, so that a result this query's users clearly prefer rises past the ones the
    general model scored just above it, by as much as the model's margin (docs/algorithms.md,
    "General model and query specialisation")."""
    return minmax(general_scores) + weight * (np.asarray(lift, dtype=np.float64) - 1.0)


def specialised_ranking(general_scores: np.ndarray, lift: np.ndarray,
                        weight: float = 1.0) -> np.ndarray:
    """The order of a specialised page before its randomised pairs (what an arm contributes
    to an experiment's mixed page for a query whose clicks judge a pair)."""
    return general_ranking(specialised_scores(general_scores, lift, weight))


def general_ranking(scores: np.ndarray) -> np.ndarray:
    """The general model's own order of the candidates: by score, ties in the engine's
    order (the candidates' order)."""
    return (-np.asarray(scores, dtype=np.float64)).argsort(kind="stable")


def judgment_feedback(general_top: list[int] | np.ndarray, n: int, n_shown: int,
                      offset: int, judged: list[tuple[int, bool]] | list[list[int]]
                      ) -> Feedback | None:
    """What a specialised page teaches the general model: its own ranking (``general_top``,
    the first candidates of its argmax, then the rest in the candidates' order) shown with
    the judged pairs randomised, pairing ``offset``, and in each the better result clicked
    -- the feedback of a randomised pair shown in either order with probability 1/2
    (Raman et al. 2013; FairPairs), swapped where the better one was the upper. None
    without a judgment. Learners read it through their rule for randomised pairs."""
    if not judged:
        return None
    top = [int(i) for i in general_top]
    seen = set(top)
    ranking = np.array(top + [i for i in range(n) if i not in seen], dtype=np.intp)
    swapped, clicked = [], []
    for upper, lower_better in judged:
        upper = int(upper)
        if upper + 1 >= len(ranking):
            continue
        if not lower_better:  # shown swapped: the better one, the upper, below
            ranking[upper], ranking[upper + 1] = ranking[upper + 1], ranking[upper]
            swapped.append(upper)
        clicked.append(upper + 1)
    if not clicked:
        return None
    feedback = feedback_from_positions(ranking, n_shown, np.array(sorted(clicked),
                                                                  dtype=np.intp))
    feedback.context = {PAIR_OFFSET: int(offset), SWAPPED: swapped, SWAP_PROBABILITY_KEY: 0.5}
    return feedback


#: The swap probability of a specialised page's randomised pairs: both orders of a pair equally
#: often, so that its clicks compare the two without position bias at every weight.
SWAP = 0.5


def specialise(own: RankResult, lift: np.ndarray, evidence: QueryEvidence, n_shown: int,
               rng: np.random.Generator, confidence: float = CONFIDENCE,
               base: np.ndarray | None = None, weight: float = 1.0, gate: int = 0
               ) -> tuple[RankResult, Judgment | None]:
    """The page of a search: the general model's own (``own``, as its learner ranked it)
    when the query's clicks judge no pair of its candidates; else the specialised page
    (:func:`specialised_scores` of the general model's scores, or of ``base``, the engine's,
    while the model has not taken over from the engine, :mod:`reranker.models.takeover`;
    shown with randomised pairs, the lift counting ``weight`` times), whose context also
    records the general model's own top and the judgments on its adjacent pairs, which are
    what the page will teach it (:func:`judgment_feedback`), and the query weight with the
    pairs that test it (:func:`weight_duels`). The clicks judge at the confidence of the
    arm's evidence gate, level ``gate`` (:class:`EvidenceGate`); a page whose query the
    levels on the other side of its first (:func:`gate_first`) would rank the other way logs
    the pairs that test those levels (:func:`gate_duels`). Returns the page and the
    strongest judgment (None: the general model's page)."""
    gate = min(max(int(gate), 0), gate_levels(confidence))
    judgment = evidence.strongest(gate_confidence(confidence, gate_levels(confidence)))
    first = None if judgment is None else gate_first(judgment.p_value, confidence)
    scores = own.scores if base is None else base
    if first is None or first > gate:
        if first is not None and base is None:  # looser levels would specialise it
            duels = gate_duels(own.scores, specialised_scores(scores, lift, weight),
                               own.ranking, n_shown, own.context, evidence.clicks, first)
            if duels:
                own.context.update({GATE: gate, GATE_DUELS: duels})
        return own, None
    page = perturbed_page(specialised_scores(scores, lift, weight), n_shown, SWAP, rng)
    general = general_ranking(own.scores)
    # one pairing of the general model's adjacent positions, drawn by a fair coin; both
    # where the gate has loosened (docs/algorithms.md, step 4)
    offset = int(rng.random() < 0.5)
    judged = sorted(judgment for pairing in ((0, 1) if gate else (offset,))
                    for judgment in evidence.judged_pairs(general, n_shown, pairing,
                                                          confidence))
    page.context.update({
        SPECIALISED: judgment.to_dict(),
        GENERAL: general[: min(int(n_shown) + 1, len(general))].tolist(),
        JUDGED: [[upper, int(lower)] for upper, lower in judged],
        WEIGHT: weight, WEIGHT_DUELS: weight_duels(page.scores, lift, page.ranking, n_shown,
                                                   page.context, weight), GATE: gate})
    if first:  # the stricter levels below ``first`` would show the general model's order
        page.context[GATE_DUELS] = gate_duels(page.scores, minmax(scores), page.ranking,
                                              n_shown, page.context, evidence.clicks, first)
    return page, judgment


def weight_duels(scores: np.ndarray, lift: np.ndarray, ranking: np.ndarray, n_shown: int,
                 context: dict, weight: float) -> list[list[int]]:
    """The randomised pairs of a specialised page (``ranking``, drawn from ``scores``, what
    :func:`specialised_scores` gives at ``weight``; its pairs in ``context``) that the
    doubled or the halved weight would order the other way: ``[upper position, 0 when that
    weight puts the result shown above first else 1, 1 for the doubled weight or 0 for the
    halved]``. Each pair was shown in either order with probability 1/2, so a click on one
    of its two results and not the other says, free of position bias, which order users
    prefer: a duel between the weight and its double, or its half."""
    lift = np.asarray(lift, dtype=np.float64)
    # at weight f * w a pair's margin is the page's plus (f - 1) w times the lifts'
    return _reordered(scores, [(scores + (factor - 1.0) * weight * lift, doubled)
                               for factor, doubled in ((2.0, 1), (0.5, 0))],
                      ranking, n_shown, context)


def gate_duels(scores: np.ndarray, other: np.ndarray, ranking: np.ndarray, n_shown: int,
               context: dict, clicks: np.ndarray, first: int) -> list[list[int]]:
    """The randomised pairs of a page (``ranking``, drawn from ``scores``) with a result
    this query's users have clicked (``clicks``, per candidate) that ``other``, the page the
    evidence gate's levels on the other side of ``first`` would show, orders the other way:
    ``[upper position, 0 when ``other`` puts the result shown above first else 1, first]``,
    ``first`` the strictest level that specialises the query (:func:`gate_first`; the
    levels from it on show the specialised page, those before it the general model's:
    :class:`EvidenceGate`). Only pairs shown in either order with probability 1/2 duel.
    (The pairs the other levels reorder only because two results without a click were seen
    unequally often say nothing of whether the query's few clicks can be trusted; which
    pairs duel is decided before the page is shown, so each duel stays a fair vote.)"""
    duels = _reordered(scores, [(np.asarray(other, dtype=np.float64), int(first))], ranking,
                       n_shown, context)
    return [duel for duel in duels if clicks[ranking[duel[0]]] > 0
            or clicks[ranking[duel[0] + 1]] > 0]


def _reordered(scores: np.ndarray, others: list[tuple[np.ndarray, int]], ranking: np.ndarray,
               n_shown: int, context: dict) -> list[list[int]]:
    """``[upper position, 0 or 1 as above, tag]`` for each randomised pair of a page and
    each ``(other scores, tag)`` that orders it the other way than ``scores``; none unless
    the pairs were swapped with probability 1/2, which makes a click on one of the two an
    unbiased vote."""
    pairs, p = randomized_pairs(context, n_shown)
    if not pairs or p != SWAP:
        return []
    out = []
    for upper, _swapped in pairs:
        if upper + 1 >= len(ranking):  # (a page asked deeper than there are candidates)
            break
        a, b = int(ranking[upper]), int(ranking[upper + 1])
        now = np.sign(float(scores[a] - scores[b]))
        for other, tag in others:
            then = np.sign(float(other[a] - other[b]))
            if then and then != now:
                out.append([int(upper), 0 if then > 0 else 1, tag])
    return out


def duel_outcomes(context: dict | None, clicked_positions,
                  key: str = WEIGHT_DUELS) -> list[tuple[int, bool]]:
    """The duels a logged page settled (:func:`weight_duels`, or :func:`gate_duels` with
    ``key`` :data:`GATE_DUELS`): ``(tag, won)`` per pair of it with a click on exactly one
    of its two results, ``won`` when that is the result the other weight (or levels) put
    first; ``tag`` 1 for the doubled weight and 0 for the halved (the gate's: the strictest
    level that specialises the query)."""
    clicked = {int(p) for p in clicked_positions}
    out = []
    for upper, favoured, tag in (context or {}).get(key) or ():
        upper_clicked, lower_clicked = upper in clicked, upper + 1 in clicked
        if upper_clicked != lower_clicked:
            out.append((int(tag), upper_clicked == (favoured == 0)))
    return out


#: The query weight is ``2 ** level`` for a level in ``[-LEVELS, LEVELS]``.
LEVELS = 10


def settled(tally: list[int], confidence: float = CONFIDENCE) -> bool:
    """Whether duels won and lost, ``tally``, show at ``confidence`` that users prefer the
    challenger: an anytime-valid one-sided test against 1/2, asked after every duel. Its
    statistic is the likelihood ratio of the duels under a win rate drawn uniformly from
    (1/2, 1) against a rate of 1/2,

        M = 2 * 2**n * B(won + 1, lost + 1) * P(Beta(won + 1, lost + 1) > 1/2),

    a nonnegative martingale of mean at most 1 while users prefer neither side (or the
    holder), so by Ville's inequality it ever reaches ``1 / (1 - confidence)`` with at most
    that chance, however often it is asked (Robbins 1970; Ramdas et al. 2023,
    "Game-theoretic statistics and safe anytime-valid inference")."""
    won, lost = int(tally[0]), int(tally[1])
    if won <= lost:
        return False
    n = won + lost
    # P(Beta(won + 1, lost + 1) > 1/2) = P(Binomial(n + 1, 1/2) <= won)
    above = 1.0 - kernels().binomial_upper_tail(won + 1, n + 1, 0.5)
    log_m = (math.log(2.0) * (n + 1) + math.lgamma(won + 1) + math.lgamma(lost + 1)
             - math.lgamma(n + 2) + math.log(max(above, 1e-300)))
    return log_m >= -math.log(1.0 - confidence)


class DuelledLevel:
    """A level that duels move (:class:`QueryWeight`, :class:`EvidenceGate`): for each
    other level a tally of the duels won and lost since the last move, tested by
    :func:`settled` at :meth:`test_confidence`. A duel counts for the levels
    :meth:`counted_for` names from its tag, nearest the present level first; when a tally
    settles, the level moves to the nearest level whose tally did and every tally starts
    again (the pairs a new level puts side by side are others). ``NAME`` is its key in a
    model file, ``LOW`` and ``HIGH`` the levels a saved one may have."""

    NAME: str
    LOW, HIGH = -LEVELS, LEVELS

    def __init__(self, level: int = 0) -> None:
        self.level = int(level)
        #: duels won and lost by each other level since the last move
        self.duels: dict[int, list[int]] = {}

    def bounds(self, confidence: float) -> tuple[int, int]:
        """The levels it can take at ``confidence``."""
        return self.LOW, self.HIGH

    def counted_for(self, tag: int, low: int, high: int) -> range:
        """The levels within ``low ... high`` a duel tagged ``tag`` counts for, nearest
        first."""
        raise NotImplementedError

    def test_confidence(self, confidence: float, low: int, high: int) -> float:
        """The confidence each level's test runs at."""
        return confidence

    def tally(self, level: int) -> list[int]:
        """The duels ``[won, lost]`` of ``level`` since the last move."""
        return list(self.duels.get(level, (0, 0)))

    def observe(self, outcomes: list[tuple[int, bool]],
                confidence: float = CONFIDENCE) -> bool:
        """Count the duels of one page (:func:`duel_outcomes`: ``(tag, won)``); True when
        the level moved."""
        low, high = self.bounds(confidence)
        at = self.test_confidence(confidence, low, high)
        for tag, won in outcomes:
            to = None
            for level in self.counted_for(int(tag), low, high):
                tally = self.duels.setdefault(level, [0, 0])
                tally[0 if won else 1] += 1
                if to is None and settled(tally, at):
                    to = level
            if to is not None:
                self.level, self.duels = to, {}
                return True  # (the page's other duels tested the old level's pairs)
        return False

    def to_dict(self) -> dict:
        return {"level": self.level,
                "duels": {str(level): list(tally) for level, tally in sorted(self.duels.items())}}

    @classmethod
    def from_dict(cls, data):
        """The saved state; ``ValueError`` naming the field that is not one."""
        state = cls(cls._level(data))
        duels = data.get("duels", {})
        if not isinstance(duels, dict):
            raise ValueError(f"{cls.NAME}.duels must be a mapping of levels to two counts, "
                             f"got {type(duels).__name__}")
        for key, tally in duels.items():
            name = f"{cls.NAME}.duels.{key}"
            if not (isinstance(key, str) and re.fullmatch(r"0|-?[1-9][0-9]?", key)) or \
                    not cls.LOW <= int(key) <= cls.HIGH or int(key) == state.level:
                raise ValueError(f"{name}: the key must be a level from {cls.LOW} to "
                                 f"{cls.HIGH} other than the present one ({state.level})")
            state.duels[int(key)] = _tally(tally, name)
        return state

    @classmethod
    def _from_neighbours(cls, data, above: str, below: str):
        """The state saved with the tallies of the level above and the level below alone,
        under the keys ``above`` and ``below``."""
        state = cls(cls._level(data))
        for key, level in ((above, state.level + 1), (below, state.level - 1)):
            tally = _tally(data.get(key), f"{cls.NAME}.{key}")
            if any(tally) and cls.LOW <= level <= cls.HIGH:
                state.duels[level] = tally
        return state

    @classmethod
    def _level(cls, data) -> int:
        """The saved level of ``data``, checked; ``ValueError`` naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"{cls.NAME} must be a mapping, got {type(data).__name__}")
        level = data.get("level")
        if isinstance(level, bool) or not isinstance(level, int) or \
                not cls.LOW <= level <= cls.HIGH:
            raise ValueError(f"{cls.NAME}.level must be a whole number from {cls.LOW} to "
                             f"{cls.HIGH}, got {level!r}")
        return level


def _tally(tally, name: str) -> list[int]:
    """A saved tally of duels, ``[won, lost]``, checked; ``ValueError`` naming ``name``."""
    if not isinstance(tally, list) or len(tally) != 2 or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in tally):
        raise ValueError(f"{name} must be two counts (won, lost), got {tally!r}")
    return list(tally)


class QueryWeight(DuelledLevel):
    """How far a query's own clicks count against the general model on its specialised
    pages (docs/algorithms.md, "General model and query specialisation"): ``2 ** level``,
    1 to start with. Two tests (:func:`settled`) run on the duels of :func:`weight_duels`,
    one for the doubled weight (the level above: tag 1) and one for the halved (below: tag
    0): a weight that users do not prefer moves with at most ``1 - confidence`` chance. A
    model file keeps the two tallies as ``doubled`` and ``halved`` (read-only views: copies
    of the tallies in ``duels``)."""

    NAME = "query_weight"

    @property
    def weight(self) -> float:
        return 2.0 ** self.level

    @property
    def doubled(self) -> list[int]:
        return self.tally(self.level + 1)

    @property
    def halved(self) -> list[int]:
        return self.tally(self.level - 1)

    def counted_for(self, tag: int, low: int, high: int) -> range:
        level = self.level + (1 if tag else -1)
        return range(level, level + 1) if low <= level <= high else range(0)

    def to_dict(self) -> dict:
        return {"level": self.level, "doubled": self.doubled, "halved": self.halved}

    @classmethod
    def from_dict(cls, data):
        """The saved state; ``ValueError`` naming the field that is not one."""
        return cls._from_neighbours(data, "doubled", "halved")


#: The evidence gate's loosest level judges at 1/2 or more: a judgment is at least more
#: likely than not.
LOOSEST = 0.5


def gate_levels(confidence: float = CONFIDENCE) -> int:
    """How many times the evidence gate can double ``1 - confidence`` and stay at or below
    1 - :data:`LOOSEST` (3 from 0.95: 0.90, 0.80, 0.60)."""
    alpha, levels = 1.0 - float(confidence), 0
    while alpha * 2.0 ** (levels + 1) <= 1.0 - LOOSEST + 1e-12:
        levels += 1
    return levels


def gate_confidence(confidence: float, level: int) -> float:
    """The confidence at which a query's clicks judge a result at the evidence gate's
    ``level``: ``1 - (1 - confidence) * 2 ** level``, the level taken within
    ``0 ... gate_levels(confidence)``."""
    level = min(max(int(level), 0), gate_levels(confidence))
    return 1.0 - (1.0 - float(confidence)) * 2.0 ** level


def gate_first(p_value: float, confidence: float = CONFIDENCE) -> int | None:
    """The strictest level of the evidence gate whose confidence a judgment of ``p_value``
    meets (the levels from it on specialise the query's page, those before it do not); None
    when not even the loosest does."""
    for level in range(gate_levels(confidence) + 1):
        if p_value <= 1.0 - gate_confidence(confidence, level):
            return level
    return None


class EvidenceGate(DuelledLevel):
    """How strong a query's own evidence must be before its page is specialised
    (docs/algorithms.md, "General model and query specialisation", step 7): its clicks
    judge a result at :func:`gate_confidence` of ``learner.confidence`` and ``level``, 0 to
    start with (the confidence itself). Every other level has a sequential test
    (:func:`settled`) on the duels of :func:`gate_duels`: the randomised pairs of the pages
    whose query that level would rank otherwise than the present one (the general model's
    own pages of queries it would specialise, for a looser level; specialised pages of
    queries it would not, for a stricter one), which it orders the other way. Each test
    runs at ``1 - (1 - confidence) / m`` for the ``m`` other levels, so that together they
    move the gate where users do not prefer with at most ``1 - confidence`` chance per
    move. A learner whose own pages have no pairs swapped with probability 1/2 never gives
    a looser level a duel: its gate stays where it starts."""

    NAME, LOW = "evidence_gate", 0

    def bounds(self, confidence: float) -> tuple[int, int]:
        return 0, gate_levels(confidence)

    def confidence(self, confidence: float = CONFIDENCE) -> float:
        return gate_confidence(confidence, self.level)

    def tallies(self, confidence: float = CONFIDENCE) -> dict[str, list[int]]:
        """The duels since the last move, ``[won, lost]``, by the confidence of the level
        they tested (``"0.9"``, ...)."""
        return {f"{round(gate_confidence(confidence, level), 9):g}": list(tally)
                for level, tally in sorted(self.duels.items())}

    def counted_for(self, tag: int, low: int, high: int) -> range:
        """A duel of a page ranked at the present level (``tag``: ``first``, the strictest
        level that specialises its query) counts for every level on the other side of
        ``first`` than the present one."""
        if tag > self.level:
            return range(max(tag, self.level + 1), high + 1)
        return range(min(tag, self.level) - 1, low - 1, -1)

    def test_confidence(self, confidence: float, low: int, high: int) -> float:
        return 1.0 - (1.0 - float(confidence)) / max(high - low, 1)

    @classmethod
    def from_dict(cls, data):
        """The saved state (or one saved with a tally for the next looser and the next
        stricter level, ``looser`` and ``stricter``); ``ValueError`` naming the field that
        is not one."""
        if isinstance(data, dict) and "duels" not in data and (
                "looser" in data or "stricter" in data):
            return cls._from_neighbours(data, "looser", "stricter")
        return super().from_dict(data)


def specializes(learner_cls, specialize: bool = True) -> bool:
    """Whether a learner's arm keeps its general model and each query's own clicks apart
    (``learner.specialize``): never for a floor (a reference ranking shown as it is), nor
    for a learner that learns only from the pages it drew itself
    (``learns_from_mixed_lists`` false: EELS), which specialised pages would starve of the
    pages it learns from and whose page is not an order of scores to refine."""
    capabilities = learner_cls.capabilities
    return bool(specialize) and not capabilities.floor and capabilities.learns_from_mixed_lists


def general_features(names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The features of the general model among a search's ``names``: all but the query's own
    click lift (:data:`QUERY_FEATURE`)."""
    return tuple(name for name in names if name != QUERY_FEATURE)


def taught_by(context: dict, n: int, n_shown: int) -> Feedback | None:
    """What a logged specialised page teaches the general model: :func:`judgment_feedback`
    of the judgments its context records, one feedback per pairing of adjacent positions
    (the uppers' parity: (1, 2), (3, 4), ... and (2, 3), (4, 5), ...), the second chained
    after the first (``Feedback.then``); None when it records none."""
    judged = [(int(u), bool(lower)) for u, lower in context.get(JUDGED) or []]
    taught = None
    for offset in (1, 0):  # (the second pairing's first, to chain it after the first's)
        pairing = [j for j in judged if j[0] % 2 == offset]
        feedback = judgment_feedback(context[GENERAL], n, n_shown, offset, pairing) \
            if pairing else None
        if feedback is not None:
            feedback.then, taught = taught, feedback
    return taught

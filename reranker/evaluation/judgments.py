"""Relevance judgments from the logged clicks, for the tools that evaluate a ranking against
a judgment list (Elasticsearch's ``_rank_eval``, OpenSearch's Search Relevance Workbench,
Quepid, TREC's ``trec_eval``).

Per normalised query and document, the pages that showed it (at ranks ``k_1, k_2, ...``)
and the clicks it had give its *examination-corrected click rate*

    estimate = clicks / (theta_{k_1} + theta_{k_2} + ...)

where ``theta_k`` is the probability that users examine rank ``k`` relative to rank 1,
estimated from the randomised adjacent pairs the pages were served with and their known
swap probability (:class:`reranker.features.clicks.PositionBias`, the estimate the click
features use). Under the position-based click model (a click is an examination times an
attraction, independently) each page's click on the document has mean ``attraction *
theta_k``, so the estimate is an unbiased inverse-propensity estimate of the attraction:
how often users click the document where they look at it (Joachims, Swaminathan & Schnabel,
"Unbiased Learning-to-Rank with Biased Feedback", WSDM 2017, eq. 4, summed per document).
Its interval is the exact Poisson interval of the clicks (Garwood's) divided by the same
denominator: the clicks are a sum of independent Bernoulli draws, whose spread a Poisson of
the same mean bounds.

COEC (clicks over expected clicks, the Search Relevance Workbench's implicit judgments)
divides the clicks by ``ctr_{k_1} + ctr_{k_2} + ...``, the mean click-through rate at each
rank over all pages. That rate mixes examination with what the engine puts at the rank: the
top ranks hold more relevant results, so their rate overstates how much users look there,
and a document the engine ranks high is judged lower than an equally good one it ranks low.
It is here to compare with (``--estimator coec``). See docs/algorithms.md, "Judgments from
clicks".
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

import numpy as np

from reranker.features.clicks import PositionBias, query_key
from reranker.stores.base import closed_pages
from reranker.stores.events import Impression

ESTIMATORS = ("debiased", "coec")


@dataclass(frozen=True)
class Judgment:
    """One (query, document) judgment. ``estimate`` is clicks per unit of ``expected``
    (the examination weights of the ranks it was shown at, or COEC's expected clicks);
    ``low`` and ``high`` bound it at the chosen confidence."""

    query: str  # normalised (reranker.features.clicks.query_key)
    doc_id: str
    impressions: int  # pages that showed it
    clicks: int
    expected: float
    estimate: float
    low: float
    high: float

    def grade(self, scale: int) -> int:
        """The estimate on a scale of ``scale`` grades (0 to ``scale - 1``): a rate in [0, 1]
        cut in equal parts, 1 and above the top grade."""
        return min(scale - 1, max(0, int(self.estimate * scale)))

    def to_dict(self) -> dict:
        return asdict(self)


class ClickTally:
    """Per (normalised query, document): how often it was shown at each rank and clicked;
    and per rank, pages and clicks over all (COEC's rates)."""

    def __init__(self) -> None:
        self.shown: dict[tuple[str, str], dict[int, int]] = defaultdict(
            lambda: defaultdict(int))
        self.clicks: dict[tuple[str, str], int] = defaultdict(int)
        self.rank_shown: dict[int, int] = defaultdict(int)
        self.rank_clicks: dict[int, int] = defaultdict(int)
        self.pages = 0

    def add(self, imp: Impression) -> None:
        """One logged page (a first or a later one; ranks count from the ranking's top)."""
        key = query_key(imp.query)
        clicked = set(imp.clicked or ())
        self.pages += 1
        for i, doc_id in enumerate(imp.shown_ids()):
            rank = imp.offset + i + 1
            cell = (key, doc_id)
            self.shown[cell][rank] += 1
            self.rank_shown[rank] += 1
            if doc_id in clicked:
                self.clicks[cell] += 1
                self.rank_clicks[rank] += 1

    def max_rank(self) -> int:
        return max(self.rank_shown, default=0)


def tally_pages(events, since: float = 0.0, arms: tuple[str, ...] | None = None
                ) -> ClickTally:
    """The closed pages logged at ``since`` or later (optionally of ``arms`` only), counted."""
    tally = ClickTally()
    for imp in closed_pages(events, since, arms):
        tally.add(imp)
    return tally


def poisson_interval(clicks: int, expected: float, confidence: float) -> tuple[float, float]:
    """Garwood's exact interval for a Poisson count ``clicks`` of mean ``rate * expected``,
    as bounds on the rate."""
    from scipy.special import gammaincinv

    if expected <= 0:
        return 0.0, math.inf
    alpha = 1.0 - confidence
    low = 0.0 if clicks == 0 else float(gammaincinv(clicks, alpha / 2)) / expected
    high = float(gammaincinv(clicks + 1, 1.0 - alpha / 2)) / expected
    return low, high


def judgments(tally: ClickTally, bias: PositionBias, *, estimator: str = "debiased",
              min_impressions: int = 10, confidence: float = 0.95) -> Iterator[Judgment]:
    """The judgment of every (query, document) shown on at least ``min_impressions`` pages
    (with COEC, at a rank some page was clicked at), by query and then by estimate, highest
    first."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r} (known: {', '.join(ESTIMATORS)})")
    n = tally.max_rank()
    if estimator == "debiased":
        weights = np.concatenate([[0.0], bias.weights(n)]) if n else np.zeros(1)
    else:  # the mean click-through rate at each rank
        weights = np.zeros(n + 1)
        for rank, shown in tally.rank_shown.items():
            weights[rank] = tally.rank_clicks[rank] / shown
    by_query: dict[str, list[Judgment]] = defaultdict(list)
    for (key, doc_id), ranks in tally.shown.items():
        shown = sum(ranks.values())
        if shown < min_impressions:
            continue
        expected = float(sum(count * weights[rank] for rank, count in ranks.items()))
        if expected <= 0:  # (COEC: shown only at ranks no page was clicked at: no evidence)
            continue
        clicks = tally.clicks.get((key, doc_id), 0)
        low, high = poisson_interval(clicks, expected, confidence)
        estimate = clicks / expected
        by_query[key].append(Judgment(key, doc_id, shown, clicks, expected, estimate,
                                      low, high))
    for key in sorted(by_query):
        yield from sorted(by_query[key], key=lambda j: (-j.estimate, j.doc_id))


def kendall_tau_by_query(found: Iterable[Judgment], truth: dict[tuple[str, str], float]
                         ) -> float:
    """The mean over queries of Kendall's tau-b between the judgments' estimates and
    ``truth`` (by (normalised query, document)), over the documents both have; queries with
    fewer than two such documents, or no variation on one side, are left out."""
    from scipy.stats import kendalltau

    estimates: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for judgment in found:
        cell = (judgment.query, judgment.doc_id)
        if cell in truth:
            estimates[judgment.query].append((judgment.estimate, truth[cell]))
    taus = []
    for pairs in estimates.values():
        ours, theirs = zip(*pairs, strict=True) if len(pairs) > 1 else ((), ())
        if len(set(ours)) > 1 and len(set(theirs)) > 1:
            taus.append(kendalltau(ours, theirs).statistic)
    return float(np.mean(taus)) if taus else math.nan

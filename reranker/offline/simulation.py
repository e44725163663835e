"""Offline simulation: replay labelled learning-to-rank data through any registered learner
with simulated users, and measure how it learns (docs/algorithms.md,
"Simulated users").

The learners are built by the same :class:`reranker.models.model.ModelFactory` as the service's,
rank with the same joint feature map, and learn from :class:`reranker.learners.feedback.Feedback`
built by the same clicks-to-feedback code. Features follow the conventions of the online
learning-to-rank literature: features constant over the training data are dropped and every
feature is min-max normalised within each query
(:class:`reranker.features.extraction.PerQueryMinMax`).
As in the service, by default the learners start from the engine's order (here the order of
one feature, ``backend_feature``) and see the click features of :mod:`reranker.features.clicks`,
counted from the simulated users' clicks on the training queries, which repeat; the
literature's protocol (all-zero start, no click features) is ``start="zero"`` and
``click_features=False``. The dataset is validated once, up front; the hot loop then calls
the learner interface's unchecked entries (:meth:`~reranker.learners.base.Learner.rank_validated`,
:meth:`~reranker.learners.base.Learner.update_validated`) without re-checking every request.
"""

from __future__ import annotations

import csv
import json
import math
import multiprocessing
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from reranker.core.errors import DataError
from reranker.core.plugins import get_plugin_manager, learner_class
from reranker.experiments.probation import probation_page
from reranker.features.clicks import CLICK_FEATURES, PositionBias, lifts_from_counts
from reranker.features.clicks.position_bias import randomized_pairs
from reranker.features.extraction import PerQueryMinMax, engine_prior
from reranker.learners.base import LinearLearner, RankResult
from reranker.learners.coactive import pair_first_log_probabilities
from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import positions_in
from reranker.learners.specialization import (
    CONFIDENCE,
    GATE_DUELS,
    QUERY_FEATURE,
    EvidenceGate,
    QueryEvidence,
    QueryWeight,
    duel_outcomes,
    general_ranking,
    specialise,
    specializes,
    taught_by,
)
from reranker.models.balance import QueryBalance
from reranker.models.model import ModelFactory
from reranker.models.takeover import Takeover, duels, on_probation
from reranker.offline.letor import RankingData, load_letor, load_many
from reranker.offline.ranking_quality import dcg
from reranker.offline.users import USER_DEPTH, make_user, user_utility

PAGE = 10  # ranking length shown and scored (all documents when a query has fewer)

#: The ranking quality measures, results.csv's columns, in order, with their meaning (also
#: the plots' titles).
QUALITY_MEASURES: dict[str, str] = {
    "utility_regret": "utility regret w*.(phi(y*) - phi(y_t)), depth 5, average over 1..t",
    "dcg_star_regret": "DCG@5(y*) - DCG@5(y_t) from labels, average over 1..t",
    "online_ndcg@10": "NDCG@10 of the shown lists since the previous checkpoint",
    "offline_ndcg@10": "NDCG@10 of the model at t on the test queries",
    "kl_cost": "average KL cost -log P(first = clicked) of the presenting policy (Delage)",
    "kl_cost_of_scores": "average KL cost of the softmax of the learner's scores",
    "relative_click_distance": "average rank of a click / list length",
    "clicked_first_rate": "share of clicked impressions whose first result was clicked",
    "single_click_ndcg": "average log(2) / log(1 + rank of a click)",
}
#: Measures plotted against a logarithmic time axis, as in the papers.
LOG_TIME = {"utility_regret", "dcg_star_regret", "kl_cost", "kl_cost_of_scores",
            "relative_click_distance",
            "clicked_first_rate", "single_click_ndcg", "online_ndcg@10", "offline_ndcg@10"}


@dataclass
class QuerySet:
    """Queries stacked row-wise: query ``i`` is rows ``offsets[i]:offsets[i+1]``."""

    X: np.ndarray  # (rows, m), normalised per query
    labels: np.ndarray  # (rows,) graded relevance
    utility: np.ndarray  # (rows,) w* . x
    offsets: np.ndarray  # (queries + 1,)
    ideal_utility: np.ndarray  # (queries,) U(y*) at depth 5
    ideal_dcg5: np.ndarray  # (queries,) DCG@5 of the label-ideal ranking, DCG* regret's gain
    ideal_dcg10: np.ndarray  # (queries,) DCG@10 of the label-ideal ranking, gain 2^r - 1
    docs: np.ndarray | None = None  # (rows,) document number, shared by train and test

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)


@dataclass
class SimulationData:
    train: QuerySet
    test: QuerySet
    feature_names: list[str]
    w_star: np.ndarray
    grades: int
    sources: dict[str, list[str]]


@dataclass(frozen=True)
class LearnerSpec:
    """A learner to simulate: registered name, parameters, and the label in reports."""

    name: str
    params: dict = field(default_factory=dict)
    label: str = ""

    @property
    def key(self) -> str:
        if self.label:
            return self.label
        if not self.params:
            return self.name
        return f"{self.name}(" + ", ".join(f"{k}={v}" for k, v in sorted(self.params.items())) + ")"


@dataclass(frozen=True)
class Settings:
    impressions: int = 10_000
    runs: int = 5
    seed: int = 0
    click_model: str = "informational"
    depth: int = 10
    discount: str = "log2"
    gain: str = "linear"  # of DCG* regret; NDCG always uses 2^r - 1
    checkpoints: int = 40
    #: "log": the checkpoints log-spaced from the first impression, as the papers plot their
    #: curves; "even": one every ``impressions / checkpoints`` impressions (the reference
    #: implementation's offline evaluation every 10 impressions)
    checkpoint_spacing: str = "log"
    library: str = "fixed"  # or "growing": queries (and their documents) appear over time
    reveal: float = 0.5  # growing library: share of the impressions until all are available
    start: str = "engine"  # or "zero": the learners' first model (the papers' w = 0)
    click_features: bool = True  # add the click features, counted from the users' clicks
    #: keep the general model and each query's own clicks apart (docs/algorithms.md,
    #: "General model and query specialisation"): the learners never see
    #: click_lift:query_doc, a query's judged pairs refine its page and teach the learner at
    #: its own ranking; False: the learners see both click features (earlier versions)
    specialize: bool = True
    confidence: float = CONFIDENCE  # of a judgment, and of the general model's takeover
    #: learned weights shrunk to what the queries agree on (learner.shrink,
    #: reranker.learners.shrinkage) and each query's pages learned from as if the queries
    #: came equally often (learner.query_balance, reranker.models.balance), as the service
    shrink: bool = True
    query_balance: bool = True
    #: an experiment (docs/algorithms.md, "Taking over from the engine, tried"): the general
    #: model's pages serve alone only once duels on queries without clicks of their own show
    #: users prefer it to the engine's order; until then those queries get probation pages, the
    #: two orders interleaved; False: the learner's own pages from the first impression
    takeover: bool = False
    click_smoothing: float = 5.0
    window: int = 200  # impressions per window of online NDCG@10
    backend_feature: str | None = None  # the engine's order; None: the best single feature
    #: a fixed target whose clicks@10 each learner's logged pages estimate off-policy, checked
    #: against its on-policy value (``--evaluate``); None: no check
    evaluate: LearnerSpec | None = None
    #: the reward the simulated application reports per page (``POST /reward`` in the
    #: service): "none", or "dcg", the clicks weighted by position, 1 / log2(rank + 1)
    reward: str = "none"


def prepare(train_paths: list[str], test_path: str, gain: str = "linear") -> SimulationData:
    """Load, drop features constant over the training data, normalise per query, fit w*."""
    train_raw = load_many(train_paths)
    test_raw = load_letor(test_path)
    for raw in (train_raw, test_raw):
        above = np.flatnonzero(raw.labels > 4)
        if above.size:
            raise DataError(f"{raw.where(int(above[0]))}: label {raw.labels[above[0]]} is above "
                            f"4; the simulated users know relevance grades 0 to 4")
    # (a feature absent from the training data is constant there: 0)
    varying = [f for j, f in enumerate(train_raw.feature_ids) if np.ptp(train_raw.X[:, j]) > 0]
    train_raw, test_raw = train_raw.with_features(varying), test_raw.with_features(varying)
    norm = PerQueryMinMax()
    for raw in (train_raw, test_raw):
        for i in range(raw.n_queries):
            lo, hi = raw.offsets[i], raw.offsets[i + 1]
            raw.X[lo:hi] = norm.transform(raw.X[lo:hi])
    # w*: least-squares fit of the labels on the features over the whole dataset (Coactive
    # Learning, section 6.1.1), with an intercept that does not affect any ranking.
    X_all = np.vstack([train_raw.X, test_raw.X])
    y_all = np.concatenate([train_raw.labels, test_raw.labels]).astype(np.float64)
    coef, *_ = np.linalg.lstsq(np.hstack([X_all, np.ones((len(X_all), 1))]), y_all, rcond=None)
    w_star = coef[:-1]
    max_label = int(y_all.max())
    grades = 2 if max_label <= 1 else 3 if max_label <= 2 else 5  # (the users' presets)

    # Documents numbered across both files (rows without a docid comment are their own).
    numbers: dict[str, int] = {}

    def doc_numbers(raw: RankingData) -> np.ndarray:
        ids = raw.doc_ids or [None] * len(raw.labels)
        return np.array([numbers.setdefault(d if d is not None else f"\0{id(raw)}:{i}",
                                            len(numbers)) for i, d in enumerate(ids)],
                        dtype=np.intp)

    def query_set(raw: RankingData) -> QuerySet:
        utility = raw.X @ w_star
        labels = raw.labels.astype(np.intp)
        ideal_u, ideal5, ideal10 = [], [], []
        for i in range(raw.n_queries):
            lo, hi = raw.offsets[i], raw.offsets[i + 1]
            ideal = np.sort(labels[lo:hi])[::-1]
            ideal_u.append(user_utility(utility[lo:hi], np.argsort(-utility[lo:hi])))
            ideal5.append(dcg(ideal, USER_DEPTH, gain))
            ideal10.append(dcg(ideal, PAGE, "exp"))
        return QuerySet(X=raw.X, labels=labels, utility=utility, offsets=raw.offsets,
                        ideal_utility=np.array(ideal_u), ideal_dcg5=np.array(ideal5),
                        ideal_dcg10=np.array(ideal10), docs=doc_numbers(raw))

    return SimulationData(train=query_set(train_raw), test=query_set(test_raw),
                          feature_names=[f"f{f}" for f in varying], w_star=w_star, grades=grades,
                          sources={"train": train_raw.sources, "test": test_raw.sources})


def best_single_feature(data: SimulationData) -> str:
    """The feature whose order gives the best mean NDCG@10 on the training queries: the
    stand-in for a search engine's own ranking (such as BM25) on offline data."""
    train = data.train
    scores = np.zeros(len(data.feature_names))
    for i in range(len(train)):
        if train.ideal_dcg10[i] == 0:
            continue
        lo, hi = train.offsets[i], train.offsets[i + 1]
        order = np.argsort(-train.X[lo:hi], axis=0, kind="stable")[:PAGE]  # (top, features)
        discounts = 1.0 / np.log2(np.arange(2, order.shape[0] + 2))[:, None]
        gains = (np.exp2(train.labels[lo:hi][order]) - 1) * discounts
        scores += gains.sum(axis=0) / train.ideal_dcg10[i]
    return data.feature_names[int(np.argmax(scores))]


def checkpoint_times(impressions: int, count: int, spacing: str = "log") -> np.ndarray:
    """``count`` checkpoints up to ``impressions`` (always including it): log-spaced from 1
    (``spacing="log"``, always including 1), or evenly spaced (``"even"``)."""
    if spacing == "even":
        count = max(1, min(count, impressions))
        points = np.linspace(impressions / count, impressions, num=count)
    elif spacing == "log":
        points = np.geomspace(1, impressions, num=max(2, min(count, impressions)))
    else:
        raise ValueError(f"checkpoint spacing must be 'log' or 'even', got {spacing!r}")
    return np.unique(np.concatenate([np.round(points).astype(int), [impressions]]))


# -- one run -------------------------------------------------------------------------------


class _QualityMeasurements:
    """Per-impression measurements, buffered and reduced with vectorised numpy.

    The hot loop stores only what it must, appended as Python objects (cheaper than a
    numpy write each): the query, where its candidates start in the chunk's arrays, the
    ranking, and, for impressions with clicks, the learner's scores and the clicked
    candidates with their ranks. Labels, utilities and every metric are computed at
    :meth:`flush`, which runs at every chunk end and full buffer.
    """

    BLOCK = 2048
    MAX_CLICKS = PAGE

    def __init__(self, gain: str, width: int, impressions: int = 0, window: int = 200):
        self.exp_gain = gain == "exp"
        B = self.BLOCK
        self.window = window
        n_windows = impressions // window  # full windows only: a short one is noisier
        self.windows = np.zeros(n_windows)  # sums of online NDCG@10 per window
        self.window_sizes = np.zeros(n_windows)
        #: the buffered impressions: their 1-based number, query, first row of the query in
        #: the chunk arrays, shown length and ranking (candidate indices)
        self.impressions: list[tuple[int, int, int, int, np.ndarray]] = []
        self.n = np.ones(B)  # candidates
        self.scores = np.full((B, width), -np.inf)  # the learner's scores, padded with -inf
        #: the impressions with clicks: their index, clicked candidates and positions (in
        #: Python objects: a flush turns them into arrays at once)
        self.clicks: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.policy_cost = np.zeros(B)  # -log P(first = clicked) of the showing policy
        self.totals = dict.fromkeys(self.SUMS, 0.0)  # running sums over flushed impressions
        self.pending: list[tuple[int, int, dict, dict]] = []  # checkpoints awaiting a flush
        self.rows: list[dict] = []  # completed checkpoint rows
        self.last_row = (0, 0.0)  # impression and NDCG sum of the previous row

    def add_clicks(self, i: int, n: int, scores: np.ndarray, items: np.ndarray,
                   positions: np.ndarray, first_log_probs: np.ndarray) -> None:
        """Impression ``i`` got clicks on candidates ``items`` at ``positions``; its learner
        gave every candidate the chance ``exp(first_log_probs)`` of being shown first."""
        if len(items) > self.MAX_CLICKS:
            items, positions = items[:self.MAX_CLICKS], positions[:self.MAX_CLICKS]
        self.policy_cost[i] = -float(first_log_probs[items].sum()) / len(items)
        self.n[i] = n
        self.scores[i, :n] = scores
        self.clicks.append((i, items, positions))

    #: The running sums a checkpoint's row reports, in :meth:`row`'s terms.
    SUMS = ("utility_regret", "dcg_regret", "ndcg", "kl", "kl_scores", "distance", "first",
            "single_ndcg", "clicked", "clicks")

    def mark(self, t: int, head: dict, tail: dict) -> None:
        """A checkpoint after impression ``t`` (the last one added): its row, ``head``, the
        metrics of the impressions up to ``t`` and ``tail``, is completed at the next
        :meth:`flush`, which computes every buffered impression's metrics in one go (a
        checkpoint costs no flush of its own, so offline evaluations can be frequent)."""
        self.pending.append((len(self.impressions), t, head, tail))

    def flush(self, train: QuerySet, labels_chunk: np.ndarray, utility_chunk: np.ndarray) -> None:
        """Reduce the buffered impressions into the running sums, complete the rows of the
        checkpoints among them, and reset the buffer."""
        size = len(self.impressions)
        if size == 0:
            return
        times, queries, bases, ks, rankings = zip(*self.impressions, strict=True)
        q = np.array(queries, dtype=np.intp)
        valid = np.arange(PAGE) < np.array(ks, dtype=np.intp)[:, None]  # inside the shown list
        shown = np.zeros((size, PAGE), dtype=np.intp)
        shown[valid] = np.concatenate([y[:k] for y, k in zip(rankings, ks, strict=True)])
        rows = np.where(valid, np.array(bases, dtype=np.intp)[:, None] + shown, 0)
        labels = np.where(valid, labels_chunk[rows], 0)
        utility = np.where(valid, utility_chunk[rows], 0.0)
        g5 = _DISCOUNTS[:USER_DEPTH]
        per = {"utility_regret": train.ideal_utility[q] - utility[:, :USER_DEPTH] @ g5}
        top5 = labels[:, :USER_DEPTH]
        gains5 = np.exp2(top5) - 1.0 if self.exp_gain else top5
        per["dcg_regret"] = train.ideal_dcg5[q] - gains5 @ g5
        ideal10 = train.ideal_dcg10[q]
        dcg10 = (np.exp2(labels) - 1.0) @ _DISCOUNTS
        ndcg10 = np.divide(dcg10, ideal10, out=np.zeros(size), where=ideal10 > 0)
        per["ndcg"] = ndcg10
        if len(self.windows):
            which = (np.array(times, dtype=np.intp) - 1) // self.window
            full = which < len(self.windows)
            np.add.at(self.windows, which[full], ndcg10[full])
            np.add.at(self.window_sizes, which[full], 1.0)
        per.update(self._click_metrics(size))
        cumulative = {name: self.totals[name] + np.cumsum(values)
                      for name, values in per.items()}
        if self.pending:  # the sums up to each checkpoint, read at once
            names = list(cumulative)
            at = np.array([entry[0] for entry in self.pending])
            upto = np.stack([cumulative[name] for name in names])[:, np.maximum(at - 1, 0)]
            for (at_i, t, head, tail), values in zip(self.pending, upto.T.tolist(), strict=True):
                sums = dict(zip(names, values, strict=True)) if at_i else self.totals
                self.rows.append({**head, **self.row(t, sums), **tail})
        self.pending.clear()
        self.totals = {name: float(c[-1]) for name, c in cumulative.items()}
        self.impressions.clear()

    def _click_metrics(self, size: int) -> dict[str, np.ndarray]:
        """Delage's Table 2 family per buffered impression (0 for those without clicks);
        several clicks in one impression are averaged (each weighted 1 / #clicks)."""
        out = {name: np.zeros(size) for name in ("kl", "kl_scores", "distance", "first",
                                                  "single_ndcg", "clicked", "clicks")}
        if not self.clicks:
            return out
        indices, items, positions = zip(*self.clicks, strict=True)
        rows = np.array(indices, dtype=np.intp)
        counts = np.array(list(map(len, items)), dtype=np.intp)
        mask = np.arange(self.MAX_CLICKS) < counts[:, None]  # (clicked, MAX_CLICKS)
        click_items = np.zeros(mask.shape, dtype=np.intp)
        click_items[mask] = np.concatenate(items)
        ranks = np.zeros(mask.shape)  # 1-based ranks of the clicks; 0 = none
        ranks[mask] = np.concatenate(positions) + 1
        scores = self.scores[rows]
        top = scores.max(axis=1)
        lse = top + np.log(np.exp(scores - top[:, None]).sum(axis=1))
        chosen = np.take_along_axis(scores, click_items, axis=1)
        # KL cost of the softmax of the learner's scores: -log P(first = I) = lse - s_I
        out["kl_scores"][rows] = np.where(mask, lse[:, None] - chosen, 0.0).sum(axis=1) / counts
        # KL cost of the policy that presented the list (Delage, Table 2, column 1), from the
        # probabilities its learner gave the clicked results of being first
        out["kl"][rows] = self.policy_cost[rows]
        safe = np.where(mask, ranks, 1.0)
        out["distance"][rows] = ((np.where(mask, safe, 0.0) / self.n[rows, None]).sum(axis=1)
                                 / counts)
        out["first"][rows] = (mask & (ranks == 1)).any(axis=1)
        out["single_ndcg"][rows] = (np.where(mask, np.log(2) / np.log1p(safe), 0.0).sum(axis=1)
                                    / counts)
        out["clicked"][rows] = 1.0
        out["clicks"][rows] = counts
        self.scores[rows] = -np.inf
        self.clicks.clear()
        return out

    def row(self, t: int, sums: dict[str, float]) -> dict:
        """The metrics after impression ``t`` from the running ``sums`` up to it; online
        NDCG@10 over the impressions since the previous row."""
        clicked = sums["clicked"]
        since = t - self.last_row[0]
        row = {
            "utility_regret": sums["utility_regret"] / t,
            "dcg_star_regret": sums["dcg_regret"] / t,
            "online_ndcg@10": ((sums["ndcg"] - self.last_row[1]) / since if since
                               else math.nan),
            "kl_cost": sums["kl"] / clicked if clicked else math.nan,
            "kl_cost_of_scores": sums["kl_scores"] / clicked if clicked else math.nan,
            "relative_click_distance": sums["distance"] / clicked if clicked else math.nan,
            "clicked_first_rate": sums["first"] / clicked if clicked else math.nan,
            "single_click_ndcg": sums["single_ndcg"] / clicked if clicked else math.nan,
            "clicks": int(round(sums["clicks"])),
        }
        self.last_row = (t, sums["ndcg"])
        return row


_DISCOUNTS = FeatureMap(PAGE, "log2").discounts(PAGE)


def query_stream(n_queries: int, start: int, count: int, settings: Settings,
                 rng: np.random.Generator) -> np.ndarray:
    """The queries of impressions ``start + 1 .. start + count``.

    ``fixed`` library: every query once per epoch, in a fresh random order. ``growing``
    library: queries become available in file order, all of them once ``reveal`` of the
    impressions have passed, and each impression draws uniformly among those available.
    """
    if settings.library == "fixed":
        return rng.permutation(n_queries)[:count]
    t = np.arange(start, start + count)  # 0-based impressions
    horizon = max(1.0, settings.reveal * settings.impressions)
    available = np.minimum(n_queries, 1 + (t * n_queries / horizon).astype(np.intp))
    return (rng.random(count) * available).astype(np.intp)


def with_backend_feature(data: SimulationData, settings: Settings) -> Settings:
    """``settings`` with the engine's stand-in feature chosen (the best single feature on the
    training queries when none is given)."""
    if settings.backend_feature is not None:
        return settings
    return replace(settings, backend_feature=best_single_feature(data))


def simulation_features(data: SimulationData, settings: Settings,
                        spec: LearnerSpec | None = None) -> list[str]:
    """The learners' (``spec``'s) feature names: the data's, then the click features when
    they are on (without the query's own, ``click_lift:query_doc``, where the pages are
    specialised: :func:`reranker.learners.specialization.specializes`)."""
    return list(data.feature_names) + list(_click_columns(settings, spec))


def _click_columns(settings: Settings, spec: LearnerSpec | None = None) -> tuple[str, ...]:
    """The click features among the learners' features (among ``spec``'s)."""
    if not settings.click_features:
        return ()
    specialized = settings.specialize if spec is None else \
        specializes(learner_class(get_plugin_manager(), spec.name), settings.specialize)
    if specialized:
        return tuple(name for name in CLICK_FEATURES if name != QUERY_FEATURE)
    return CLICK_FEATURES


def simulation_factory(data: SimulationData, spec: LearnerSpec,
                       settings: Settings) -> ModelFactory:
    """The factory of one simulated learner: the settings' feature map, the data's features
    (already normalised, so no normalisation), and, with ``start="engine"``, the engine's
    order (``backend_feature``) as its starting ranking."""
    names = simulation_features(data, settings, spec)
    prior = None
    if settings.start == "engine":
        prior = engine_prior(names, with_backend_feature(data, settings).backend_feature)
    return ModelFactory(learner_class(get_plugin_manager(), spec.name), spec.params,
                        FeatureMap(settings.depth, settings.discount), names, "none",
                        prior=prior if prior is not None else np.zeros(len(names)),
                        shrink=settings.shrink)


class _ClickLog:
    """The click features of the simulated impressions (:mod:`reranker.features.clicks`): counts per
    training row (a query and a document) and per document, exposures weighted by the
    position bias estimated from the learner's randomised pairs, as the service's event
    store keeps them, turned into features by the same :func:`lifts_from_counts`. The
    position weights are refreshed every :attr:`REFRESH` impressions (the service rereads
    its position-bias counts every second)."""

    REFRESH = 256

    def __init__(self, data: SimulationData, smoothing: float):
        n_docs = int(max(data.train.docs.max(), data.test.docs.max())) + 1
        self.smoothing = float(smoothing)
        self.query_doc = np.zeros((len(data.train.labels), 2))  # clicks, exposure
        self.doc = np.zeros((n_docs, 2))
        self.total = np.zeros(2)
        self.train_docs = data.train.docs
        self.bias = PositionBias()
        self.since = 0
        self.theta = self.bias.weights(PAGE)

    def features(self, rows: np.ndarray) -> np.ndarray:
        """The click features of the training ``rows``, ``(n, 2)``."""
        counts = np.hstack([self.query_doc[rows], self.doc[self.train_docs[rows]]])
        return lifts_from_counts(counts, self.total[0], self.total[1], self.smoothing)

    def evidence(self, rows: np.ndarray) -> QueryEvidence:
        """The query's own clicks and exposures of the training ``rows``."""
        counts = self.query_doc[rows]
        return QueryEvidence(clicks=counts[:, 0], exposure=counts[:, 1])

    def test_features(self, docs: np.ndarray) -> np.ndarray:
        """Held-out queries were never asked: only their documents' counts are known."""
        counts = np.hstack([np.zeros((len(docs), 2)), self.doc[docs]])
        return lifts_from_counts(counts, self.total[0], self.total[1], self.smoothing)

    def add(self, rows: np.ndarray, shown: np.ndarray, positions: np.ndarray,
            context: dict | None) -> None:
        """An impression of the training ``rows`` (its candidates) showed ``shown``
        (candidate indices) and got clicks at ``positions``."""
        k = min(len(shown), len(self.theta))
        picked = rows[shown[:k]]
        update = np.zeros((k, 2))
        update[:, 1] = self.theta[:k]
        update[positions[positions < k], 0] = 1.0
        self.query_doc[picked] += update  # a query's rows are distinct
        np.add.at(self.doc, self.train_docs[picked], update)
        self.total += update.sum(axis=0)
        if len(positions):
            pairs, p = randomized_pairs(context, len(shown))
            if pairs:
                self.bias.add(PositionBias.pair_counts(pairs, p, positions.tolist()))
        self.since += 1
        if self.since == self.REFRESH:
            self.theta, self.since = self.bias.weights(PAGE), 0


def run_one(data: SimulationData, spec: LearnerSpec, settings: Settings, run: int,
            progress: Callable[[int], None] | None = None) -> tuple[list[dict], dict]:
    """Simulate ``settings.impressions`` impressions of one learner for run ``run``.

    Returns the result rows (one per checkpoint), the online NDCG@10 of every window of
    ``settings.window`` impressions, and timing information. The query stream, the
    candidate orders and the users' randomness depend only on the seed and the run, so
    every learner of a run sees the same queries in the same order.
    """
    if settings.start == "engine":  # the engine's order, chosen once for every factory below
        settings = with_backend_feature(data, settings)
    streams = np.random.SeedSequence([settings.seed, run]).spawn(5)
    stream_rng, user_rng = np.random.default_rng(streams[0]), np.random.default_rng(streams[1])
    learner_rng, test_rng = np.random.default_rng(streams[2]), np.random.default_rng(streams[3])
    learner = simulation_factory(data, spec, settings).new().learner
    # (the features are built finite here, with the model's columns: no check per call)
    rank, learn = learner.rank_validated, learner.update_validated
    first_log_probabilities = learner.first_log_probabilities_validated
    capabilities = learner.capabilities
    if not capabilities.exact_probabilities:  # no KL cost for a policy without probabilities
        def first_log_probabilities(X):
            return np.full(X.shape[0], np.nan)
    respond = make_user(settings.click_model, data.grades).respond
    clicks = _ClickLog(data, settings.click_smoothing) if settings.click_features else None
    reward_weights = _DISCOUNTS if settings.reward == "dcg" else None
    check = None
    if settings.evaluate is not None:  # (its own random numbers: the runs stay as they were)
        from reranker.evaluation.simulated import OffPolicyCheck

        target = simulation_factory(data, settings.evaluate, settings).new().learner
        check = OffPolicyCheck(target, make_user(settings.click_model, data.grades),
                               np.random.default_rng(streams[4]), PAGE)
    train = data.train
    # the candidates' features, with room for the click features after the data's own
    columns = [CLICK_FEATURES.index(name) for name in _click_columns(settings, spec)]
    target_columns = None if settings.evaluate is None else \
        [CLICK_FEATURES.index(name) for name in _click_columns(settings, settings.evaluate)]
    X_rows = train.X if not columns else np.hstack(
        [train.X, np.zeros((len(train.X), len(columns)))])
    specialize = clicks is not None and specializes(type(learner), settings.specialize)
    probation = on_probation(capabilities, settings.takeover)
    takeover, takeover_at = Takeover(), None
    engine_column = None
    if probation:  # the engine's order: the feature that stands in for it
        engine_column = list(data.feature_names).index(
            with_backend_feature(data, settings).backend_feature)
    judged_teach = capabilities.learns_from_mixed_lists
    balance = QueryBalance() if settings.query_balance else None
    query_weight = QueryWeight()  # (as the trainer keeps them per arm)
    gate = EvidenceGate()
    offsets = train.offsets.tolist()
    ideal_utility = train.ideal_utility.tolist()
    n_train = len(train)
    row_query = np.repeat(np.arange(n_train), train.sizes())
    checkpoints = set(checkpoint_times(settings.impressions, settings.checkpoints,
                                       settings.checkpoint_spacing).tolist())
    test_queries = _TestQueries(data.test)
    metrics = _QualityMeasurements(settings.gain, int(train.sizes().max()), settings.impressions,
                       settings.window)
    impressions = metrics.impressions
    add_clicks = metrics.add_clicks
    block = metrics.BLOCK
    rows = metrics.rows
    learner_seconds = 0.0
    clock = time.perf_counter
    started = clock()
    last_reported = 0
    t = 0
    while t < settings.impressions:
        # A chunk of impressions (an epoch for a fixed library): every query's candidates in
        # a fresh random order, so that the ties of an all-zero model break randomly.
        within = np.argsort(row_query + stream_rng.random(len(row_query)))
        labels_chunk, utility_chunk = train.labels[within], train.utility[within]
        chunk = query_stream(n_train, t, min(n_train, settings.impressions - t), settings,
                             stream_rng)
        for qi in chunk.tolist():
            t += 1
            lo, hi = offsets[qi], offsets[qi + 1]
            candidates = within[lo:hi]
            # (a copy of the query's rows per impression costs less than the whole chunk's)
            X = X_rows.take(candidates, axis=0)
            labels, utility = labels_chunk[lo:hi], utility_chunk[lo:hi]
            if clicks is not None:  # counted from earlier impressions only
                lifts = clicks.features(candidates)
                if columns:
                    X[:, -len(columns):] = lifts[:, columns]
            n = hi - lo
            k = PAGE if n > PAGE else n
            t0 = clock()
            result = own = rank(X, k, learner_rng)
            t1 = clock()
            judgment = None
            untrusted = probation and not takeover.trusted
            evidence = clicks.evidence(candidates) \
                if clicks is not None and (specialize or untrusted) else None
            if specialize:  # the query's own clicks refine its page where they judge a pair
                result, judgment = specialise(
                    result, lifts[:, 0], evidence, k, learner_rng, settings.confidence,
                    base=X[:, engine_column] if untrusted else None,
                    weight=query_weight.weight, gate=gate.level)
            engine = None
            if untrusted and judgment is None:  # the engine's order and the model's, mixed
                engine = general_ranking(X[:, engine_column])
                result = probation_page(result, engine, k, learner_rng)
            y = result.ranking
            feedback = respond(y, k, labels, utility, ideal_utility[qi], user_rng)
            feedback.context = result.context
            feedback.propensities = result.propensities  # as the service logs them
            if reward_weights is not None:  # the application's reward for the page
                feedback.reward = float(reward_weights[feedback.positions[
                    feedback.positions < k]].sum()) if feedback.positions is not None else 0.0
            positions = feedback.positions
            if positions is not None and len(positions):  # before the model changes
                first_log_probs = first_log_probabilities(X) if result is own else \
                    pair_first_log_probabilities(result.scores, 0.5)
            if check is not None:
                target_X = X if target_columns == columns else np.hstack(
                    [X[:, :X.shape[1] - len(columns)], lifts[:, target_columns]])
                check.observe(learner, X, y, k, positions, labels, utility, ideal_utility[qi],
                              target_X=target_X, page=None if result is own else result)
            t2 = clock()
            if specialize and positions is not None and len(positions):
                clicked_positions = positions.tolist()
                if judgment is not None:
                    query_weight.observe(duel_outcomes(result.context, clicked_positions),
                                         settings.confidence)
                gate.observe(duel_outcomes(result.context, clicked_positions, GATE_DUELS),
                             settings.confidence)
            query = str(qi)  # (the page's query, as the trainer gives it)
            if balance is not None and not balance.keeps(query, f"{run}:{t}"):
                pass  # a page of a query searched more than the average, passed over
            elif judgment is None:  # the learner's own page
                feedback.query = query
                learn(X, feedback)
            elif judged_teach and positions is not None and len(positions):
                # a specialised page with a click teaches the query's judgments at the
                # learner's own ranking (docs/algorithms.md, "General model and query
                # specialisation")
                taught = taught_by(result.context, n, k)
                if taught is not None:
                    taught.query = query
                    learn(X, taught)  # (each feedback of its chain in turn)
            learner_seconds += (t1 - t0) + (clock() - t2)
            # only a query without clicks of its own tests what carries over to new queries
            if engine is not None and not (evidence is not None and evidence.any_clicks) \
                    and positions is not None and len(positions) and takeover.observe(
                        duels(result.context, k, y, positions.tolist(), own.scores,
                              positions_in(engine)), settings.confidence):
                takeover_at = t
            if clicks is not None:
                clicks.add(candidates, y[:k], positions if positions is not None
                           else np.empty(0, dtype=np.intp), result.context)

            i = len(impressions)
            impressions.append((t, qi, lo, k, y))
            if positions is not None and len(positions):
                add_clicks(i, n, result.scores, feedback.clicked, positions, first_log_probs)
            if t in checkpoints:
                metrics.mark(t, {"learner": spec.key, "run": run, "t": t},
                             {"offline_ndcg@10": offline_ndcg(
                                 data, learner, test_rng, clicks, test_queries, columns,
                                 engine_column if probation and not takeover.trusted
                                 else None),
                              "seconds": round(clock() - started, 4)})
            if len(impressions) == block:
                metrics.flush(train, labels_chunk, utility_chunk)
            if progress is not None and t - last_reported >= 2000:
                progress(t - last_reported)
                last_reported = t
        metrics.flush(train, labels_chunk, utility_chunk)
    if progress is not None:
        progress(settings.impressions - last_reported)
    total = clock() - started
    timing = {"seconds": total, "learner_seconds": learner_seconds, "takeover_at": takeover_at,
              "takeover": takeover.to_dict(),
              "impressions_per_second": settings.impressions / total if total > 0 else math.inf,
              "windows": (metrics.windows / np.maximum(metrics.window_sizes, 1)).tolist()}
    if specialize:
        timing["query_weight"] = query_weight.weight
        timing["evidence_gate"] = gate.confidence(settings.confidence)
    if check is not None:
        timing["off_policy"] = check.result()
    return rows, timing


class _TestQueries:
    """The held-out queries with a relevant document, padded into a few matrices (queries of
    similar sizes together, so that little of them is padding) so that a linear model's
    NDCG@10 over all of them is a matrix product and a few sorts (an offline evaluation
    every few impressions, as the online learning-to-rank literature reports curves, costs
    little)."""

    def __init__(self, test: QuerySet):
        self.queries = [i for i in range(len(test)) if test.ideal_dcg10[i] > 0]
        n = len(test.labels)
        # the negated scores of an evaluation, and +inf after them, where the padding points
        self.negated = np.full(n + 1, np.inf)
        sizes = test.sizes()
        gains = np.append(np.exp2(test.labels.astype(np.float64)) - 1.0, 0.0)
        by_width: dict[int, list[int]] = {}
        for i in self.queries:
            by_width.setdefault(1 << max(3, int(sizes[i] - 1).bit_length()), []).append(i)
        self.groups = []  # (rows, where each query starts in them, gains, ideal DCG@10, discounts)
        for width, members in sorted(by_width.items()):
            rows = np.full((len(members), width), n, dtype=np.intp)
            for j, i in enumerate(members):
                rows[j, : sizes[i]] = np.arange(test.offsets[i], test.offsets[i + 1])
            self.groups.append((rows, np.arange(0, rows.size, width)[:, None], gains[rows].ravel(),
                                test.ideal_dcg10[members], _DISCOUNTS[:min(PAGE, width)].copy()))

    def ndcg(self, scores: np.ndarray) -> float:
        """Mean NDCG@10 of the order of ``scores`` (one per test row; ties in file order).
        (take, dot and the ufunc's reduce do the arithmetic of fancy indexing, @ and sum
        without their per-call costs, which an evaluation every 10 impressions feels.)"""
        if not self.queries:
            return math.nan
        negated = self.negated
        np.negative(scores, out=negated[:-1])
        total = 0.0
        for rows, starts, gains, ideal, discounts in self.groups:
            top = negated.take(rows).argsort(axis=1, kind="stable")[:, :len(discounts)]
            total += float(np.add.reduce(gains.take(top + starts).dot(discounts) / ideal))
        return total / len(self.queries)


def offline_ndcg(data: SimulationData, learner, rng: np.random.Generator,
                 clicks: _ClickLog | None = None, queries: _TestQueries | None = None,
                 columns: list[int] | None = None, engine_column: int | None = None) -> float:
    """Mean NDCG@10 of the current model's argmax ranking (by its scores; ties in the
    file's order) over the test queries that have at least one relevant document. With
    click features, the test queries' own counts are empty (they were never asked);
    ``columns`` are the click features the learner sees (default: both).

    A :class:`reranker.learners.base.LinearLearner` scores a candidate by ``x . weights()``
    alone, so all test queries are scored at once; any other learner's scores come from
    its :meth:`~reranker.learners.base.Learner.rank_validated` on each query's candidates.

    With ``engine_column`` (the general model has not taken over from the engine, whose
    order that feature stands for), each test query's page is a probation page, the two
    orders interleaved (:func:`reranker.experiments.probation.probation_page`), as a new
    query would get it."""
    test = data.test
    queries = queries if queries is not None else _TestQueries(test)
    X = test.X
    if clicks is not None:
        lifts = clicks.test_features(test.docs)
        X = np.hstack([X, lifts if columns is None else lifts[:, columns]])
    if isinstance(learner, LinearLearner) and engine_column is None:
        return queries.ndcg(X @ learner.weights())
    linear = X @ learner.weights() if isinstance(learner, LinearLearner) else None
    scores = np.zeros(len(X))
    for i in queries.queries:
        lo, hi = test.offsets[i], test.offsets[i + 1]
        k = min(PAGE, hi - lo)
        own = RankResult(ranking=np.empty(0, dtype=np.intp), scores=linear[lo:hi]) \
            if linear is not None else learner.rank_validated(X[lo:hi], k, rng)
        if engine_column is not None:
            own = probation_page(own, general_ranking(X[lo:hi, engine_column]), k, rng)
        scores[lo:hi] = own.scores
    return queries.ndcg(scores)


# -- many runs, in parallel ----------------------------------------------------------------

_DATA: SimulationData | None = None
_COUNTER = None


def _init_worker(data: SimulationData, counter) -> None:
    global _DATA, _COUNTER
    _DATA, _COUNTER = data, counter


def _advance(k: int) -> None:
    with _COUNTER.get_lock():
        _COUNTER.value += k


def _task(spec: LearnerSpec, settings: Settings, run: int) -> tuple[list[dict], dict]:
    return run_one(_DATA, spec, settings, run, _advance)


@dataclass
class SimulationResult:
    rows: list[dict]
    timings: dict[str, list[dict]]
    learners: list[str]
    window: int = 200  # impressions per window of online NDCG@10
    floor: str | None = None  # the key of the engine's-order floor, backend_order

    def windows(self, learner: str) -> np.ndarray:
        """Online NDCG@10 per window, shape ``(runs, windows)``."""
        return np.array([timing["windows"] for timing in self.timings[learner]])

    def window_rows(self) -> list[dict]:
        """One row per learner, run and window: ``t`` is the window's last impression."""
        out = []
        for learner in self.learners:
            for run, values in enumerate(self.windows(learner)):
                for j, value in enumerate(values):
                    out.append({"learner": learner, "run": run, "t": (j + 1) * self.window,
                                WINDOW_METRIC: float(value)})
        return out


def simulate(data: SimulationData, specs: list[LearnerSpec], settings: Settings,
             workers: int | None = None,
             progress: Callable[[int], None] | None = None) -> SimulationResult:
    """Every (learner, run) pair, in parallel processes; results ordered by learner, run, t."""
    settings = with_backend_feature(data, settings)
    for spec in specs:  # fail before forking: unknown learner or bad parameter
        simulation_factory(data, spec, settings).new()
    make_user(settings.click_model, data.grades)
    tasks = [(spec, run) for spec in specs for run in range(settings.runs)]
    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    results: dict[tuple[str, int], tuple[list[dict], dict]] = {}
    if workers == 1:
        for spec, run in tasks:
            results[(spec.key, run)] = run_one(data, spec, settings, run, progress)
    else:
        context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        counter = context.Value("q", 0)
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker,
                                 initargs=(data, counter)) as pool:
            futures = {pool.submit(_task, spec, settings, run): (spec.key, run)
                       for spec, run in tasks}
            seen = 0
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                for future in done:
                    results[futures[future]] = future.result()
                if progress is not None:
                    value = counter.value
                    if value > seen:
                        progress(value - seen)
                        seen = value
    rows = [row for spec in specs for run in range(settings.runs)
            for row in results[(spec.key, run)][0]]
    timings = {spec.key: [results[(spec.key, run)][1] for run in range(settings.runs)]
               for spec in specs}
    floor = next((s.key for s in specs if s.name == "backend_order"), None)
    return SimulationResult(rows=rows, timings=timings, learners=[s.key for s in specs],
                            window=settings.window, floor=floor)


# -- reports --------------------------------------------------------------------------------

COLUMNS = ["learner", "run", "t", *QUALITY_MEASURES, "clicks", "seconds"]  # results.csv
WINDOW_METRIC = "window_online_ndcg@10"  # windows.csv: online NDCG@10 of each window


def summarize(result: SimulationResult) -> dict[str, dict[str, Any]]:
    """Per learner: mean and standard error over runs of every metric at the last
    checkpoint, and impressions per second."""
    summary: dict[str, dict[str, Any]] = {}
    for learner in result.learners:
        rows = [r for r in result.rows if r["learner"] == learner]
        last_t = max(r["t"] for r in rows)
        last = [r for r in rows if r["t"] == last_t]
        entry: dict[str, Any] = {"impressions": last_t, "runs": len(last)}
        for metric in [*QUALITY_MEASURES, "clicks"]:
            entry[metric] = _mean_stderr([r[metric] for r in last])
        timings = result.timings[learner]
        entry["impressions_per_second"] = _mean_stderr([t["impressions_per_second"]
                                                        for t in timings])
        entry["learner_time_share"] = _mean_stderr([t["learner_seconds"] / t["seconds"]
                                                    for t in timings if t["seconds"] > 0])
        entry.update(_worst_window(result, learner))
        weights = [t["query_weight"] for t in timings if "query_weight" in t]
        if weights:  # (a learner whose pages its queries' clicks specialise)
            entry["query_weight"] = {"runs": weights,
                                     "geometric_mean": float(np.exp2(np.mean(np.log2(weights))))}
            entry["evidence_gate"] = {"runs": [t["evidence_gate"] for t in timings]}
        checks = [t["off_policy"] for t in timings if "off_policy" in t]
        if checks:
            entry["off_policy"] = _off_policy_summary(checks)
        if any(t.get("takeover", {}).get("wins", 0) + t.get("takeover", {}).get("losses", 0)
               or t.get("takeover_at") is not None for t in timings):
            entry["takeover"] = [{"at": t.get("takeover_at"), **t["takeover"]}
                                 for t in timings]
        summary[learner] = entry
    return summary


def _off_policy_summary(checks: list[dict]) -> dict[str, Any]:
    """Over the runs: the target's true clicks@10, and per estimator its mean estimate and
    in how many runs its 95% interval held the true value (or why there was none)."""
    out: dict[str, Any] = {"target": checks[0]["target"], "runs": len(checks),
                           "true": _mean_stderr([c["true"]["value"] for c in checks
                                                 if "true" in c])}
    refused = [c["refused"] for c in checks if "refused" in c]
    if refused:
        out["refused"] = refused[0]
        return out
    for name in ("IPS", "SNIPS", "DR"):
        found = [(e, c["true"]["value"]) for c in checks for e in c["estimates"]
                 if e["estimator"] == name]
        out[name] = {**_mean_stderr([e["value"] for e, _ in found]),
                     "covered": int(sum(bool(e["low"] <= truth <= e["high"])
                                        for e, truth in found)),
                     "effective_sample_size": _mean_stderr(
                         [e["effective_sample_size"] for e, _ in found])}
    return out


def _worst_window(result: SimulationResult, learner: str) -> dict[str, Any]:
    """The worst window of online NDCG@10 (mean over runs, per window), and the worst gap
    to the engine's-order floor: over the windows, the lowest difference between the
    learner's window and the floor's same window (the runs see the same queries, so the
    difference is paired); its window may be another than the worst window's."""
    windows = result.windows(learner)
    if windows.size == 0:
        return {"worst_window": None, "worst_window_gap": None}
    mean = windows.mean(axis=0)
    worst = int(np.argmin(mean))
    entry: dict[str, Any] = {"worst_window": {"mean": float(mean[worst]),
                                              "t": (worst + 1) * result.window},
                             "worst_window_gap": None}
    if result.floor is not None:
        gaps = windows - result.windows(result.floor)  # (runs, windows)
        mean_gap = gaps.mean(axis=0)
        j = int(np.argmin(mean_gap))
        stderr = float(gaps[:, j].std(ddof=1) / math.sqrt(len(gaps))) if len(gaps) > 1 else 0.0
        entry["worst_window_gap"] = {"mean": float(mean_gap[j]), "stderr": stderr,
                                     "t": (j + 1) * result.window}
    return entry


def _mean_stderr(values: list[float]) -> dict[str, Any]:
    """Mean and standard error; ``"inf"`` when a run is infinite (the KL cost of a
    deterministic policy that missed once), ``None`` when there is no value."""
    arr = np.array([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if arr.size == 0:
        return {"mean": None, "stderr": None}
    if np.isinf(arr).any():
        return {"mean": "inf", "stderr": None}
    stderr = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else 0.0
    return {"mean": float(arr.mean()), "stderr": stderr}


def write_reports(result: SimulationResult, out: Path, meta: dict[str, Any]) -> dict:
    """results.csv, windows.csv, summary.json and one PNG per metric in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    window_rows = result.window_rows()
    for name, columns, rows in (("results.csv", COLUMNS, result.rows),
                                ("windows.csv", ["learner", "run", "t", WINDOW_METRIC],
                                 window_rows)):
        with open(out / name, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v)
                                 for k, v in row.items()})
    summary = summarize(result)
    document = {"settings": meta, "learners": summary}
    (out / "summary.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    from reranker.offline.plotting import learning_curves

    for metric, title in QUALITY_MEASURES.items():
        learning_curves(result.rows, result.learners, metric, title,
                        out / f"{metric.replace('@', '_at_')}.png",
                        log_time=metric in LOG_TIME)
    learning_curves(window_rows, result.learners, WINDOW_METRIC,
                    f"online NDCG@10 of the shown lists per window of {result.window} "
                    f"impressions", out / "window_online_ndcg_at_10.png", log_time=False)
    return document


def settings_dict(settings: Settings) -> dict[str, Any]:
    return asdict(settings)


# -- the simulation plan: a YAML file and command-line options -------------------------------

PLAN_KEYS = {
    "train": "list of LETOR files: the interaction stream",
    "test": "LETOR file of held-out queries for offline NDCG",
    "learners": "list of learner names, or of {name, params, label} mappings",
    "params": "mapping learner name -> parameters (for learners given by name)",
    "click_model": "simulated user (see --click-model)",
    "impressions": "impressions per run",
    "runs": "runs (shuffled query streams) per learner",
    "seed": "seed of run 0; run r uses (seed, r)",
    "out": "output folder",
    "depth": "depth of the learners' joint feature map",
    "discount": "discount of the learners' joint feature map",
    "gain": "gain of DCG* regret: linear (the coactive papers) or exp",
    "backend_feature": "feature that stands in for the backend's order ('best': the best "
                       "single feature on the training data)",
    "checkpoints": "number of log-spaced checkpoints",
    "library": "fixed (every query from the start) or growing (queries and their documents "
               "appear over time, in file order)",
    "reveal": "growing library: share of the impressions after which all queries are "
              "available",
    "workers": "parallel processes (default: one per core)",
    "start": "the learners' first model: engine (the backend feature's order) or zero (w = 0)",
    "click_features": "give the learners the click features (true or false)",
    "specialize": "keep the general model and each query's own clicks apart (true or false)",
    "confidence": "confidence at which a query's clicks judge a result",
    "shrink": "rank with the learned weights shrunk to what the queries agree on (true or "
              "false)",
    "query_balance": "learn from each query's pages as if the queries came equally often "
                     "(true or false)",
    "takeover": "serve the learner's pages alone only once duels show users prefer it to the "
                "engine's order (an experiment; true or false)",
    "window": "impressions per window of online NDCG@10",
    "evaluate": "a learner (name, or mapping with name and params) whose clicks@10 every "
                "learner's logged pages estimate off-policy, checked against its true value",
    "reward": "the reward the simulated application reports per page: none, or dcg (clicks "
              "weighted by 1 / log2(rank + 1)), for learners such as eels",
}


def load_plan(path: str | os.PathLike) -> dict[str, Any]:
    """A simulation plan from YAML (keys: :data:`PLAN_KEYS`); relative file names resolve
    against the plan's folder."""
    import yaml

    from reranker.core.errors import ConfigError

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(f"simulation config {path} does not exist") from None
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"simulation config {path} cannot be read: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"simulation config {path} must hold a mapping")
    unknown = sorted(set(data) - set(PLAN_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(PLAN_KEYS)})")
    base = path.parent

    def resolve(name: Any) -> str:
        if not isinstance(name, str):
            raise ConfigError(f"{path}: file names must be strings, got {name!r}")
        candidate = Path(os.path.expanduser(name))
        return str(candidate if candidate.is_absolute() else base / candidate)

    if "train" in data:
        train = data["train"] if isinstance(data["train"], list) else [data["train"]]
        data["train"] = [resolve(t) for t in train]
    for key in ("test", "out"):
        if key in data:
            data[key] = resolve(data[key])
    return data


def learner_specs(entries: list[Any], params: dict[str, dict], backend_feature: str | None
                  ) -> list[LearnerSpec]:
    """The learners to simulate, with the floors ``random`` and ``backend_order`` added when
    missing (every report compares against them)."""
    from reranker.core.errors import ConfigError

    specs = []
    for entry in entries:
        if isinstance(entry, str):
            specs.append(LearnerSpec(entry, dict(params.get(entry, {}))))
        elif isinstance(entry, dict) and isinstance(entry.get("name"), str):
            extra = sorted(set(entry) - {"name", "params", "label"})
            if extra:
                raise ConfigError(f"learner entry {entry!r}: unknown key {extra[0]!r}")
            specs.append(LearnerSpec(entry["name"], dict(entry.get("params") or {}),
                                     str(entry.get("label") or "")))
        else:
            raise ConfigError(f"learner entry {entry!r} must be a name or a mapping with 'name'")
    names = {s.name for s in specs}
    if "random" not in names:
        specs.append(LearnerSpec("random"))
    if "backend_order" not in names:
        specs.append(LearnerSpec("backend_order",
                                 {"feature": backend_feature} if backend_feature else {}))
    keys = [s.key for s in specs]
    duplicate = next((k for k in keys if keys.count(k) > 1), None)
    if duplicate:
        raise ConfigError(f"learner {duplicate!r} is listed twice; give one a 'label'")
    return specs


def parse_param(text: str) -> tuple[str, str, Any]:
    """``LEARNER.KEY=VALUE`` (VALUE read as a YAML scalar) from the command line."""
    import yaml

    from reranker.core.errors import ConfigError

    target, sep, raw = text.partition("=")
    learner, dot, key = target.partition(".")
    if not sep or not dot or not learner or not key:
        raise ConfigError(f"--param {text!r}: expected LEARNER.KEY=VALUE, e.g. "
                          f"batch_preference_perceptron.batch_size=10")
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--param {text!r}: bad value: {exc}") from None
    return learner, key, value

"""Estimates of a target policy's clicks@K from pages another policy logged, under the
item-position click model: a click depends on the result and its position alone
(docs/algorithms.md, "Off-policy evaluation"; Li et al., *Offline Evaluation of Ranking
Policies with Click Models*, KDD 2018).

For a logged page ``t`` that showed ``y_t`` and got clicks ``c_t(r)``, the weight of
position ``r`` is ``w_t(r) = pi(y_t[r] at r | x_t) / mu(y_t[r] at r | x_t)``, the target's
chance of that result at that position over the logging policy's. Then

* IPS: ``V = mean_t sum_r w_t(r) c_t(r)``;
* SNIPS: per position, ``sum_t w_t(r) c_t(r) / sum_t w_t(r)``, scaled by the share of pages
  that have the position (the weights' mean is 1 where they do);
* DR: ``V = mean_t [sum_r sum_d pi(d at r) chat(d, r) + sum_r w_t(r) (c_t(r) - chat(y_t[r], r))]``
  with ``chat`` a click model fitted on the logs (logistic in the features and the position,
  cross-fitted so that no page is predicted by a model that saw it).

Each comes with a normal confidence interval (the delta method for SNIPS's ratios) and the
effective sample size ``(sum w)^2 / sum w^2`` of the smallest position.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from reranker.core.renamed import renamed

#: The normal quantile of a two-sided 95% interval.
Z95 = 1.959963984540054

#: ``pi(d at r)`` for a page's candidates: ``(n, k)`` from ``(X, k)``.
PositionPolicy = Callable[[np.ndarray, int], np.ndarray]


@dataclass
class LoggedPage:
    """One logged first page: the candidates' features (as the target policy reads them),
    the shown candidate indices in order, their clicks (0/1), the logging policy's chance of
    each shown result at its position, and of each candidate being shown at all (None when
    unknown)."""

    X: np.ndarray
    shown: np.ndarray
    clicks: np.ndarray
    propensities: np.ndarray
    shown_marginals: np.ndarray | None = None
    id: str = ""
    doc_ids: Sequence[str] | None = None  # the candidates' ids, for messages


@dataclass
class Estimate:
    name: str
    value: float
    low: float
    high: float
    ess: float  # effective sample size of the position with the fewest

    def to_dict(self) -> dict:
        return {"estimator": self.name, "value": self.value, "low": self.low,
                "high": self.high, "effective_sample_size": self.ess}


@dataclass
class Evaluation:
    """The estimates, with what they rest on."""

    depth: int
    pages: int
    estimates: list[Estimate]
    logged_value: float  # the logging policy's own clicks@K on these pages
    logged_interval: tuple[float, float]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"metric": f"clicks@{self.depth}", "pages": self.pages,
                "logged": {"value": self.logged_value, "low": self.logged_interval[0],
                           "high": self.logged_interval[1]},
                "estimates": [e.to_dict() for e in self.estimates], "notes": self.notes}


class SupportError(ValueError):
    """The logging policy gave zero probability to what the target would show."""


def mean_estimate(values: np.ndarray, z: float = Z95) -> tuple[float, float, float]:
    """An estimate that is the mean of ``values``, with its normal ``z`` interval (95% by
    default): ``(mean, low, high)``. A single value says nothing of the spread, so its
    interval is unbounded (an estimate must not look certain; compare
    :func:`reranker.experiments.stats.mean_confidence_bounds`, a report's finite bounds)."""
    mean = float(values.mean())
    half = z * float(values.std(ddof=1)) / math.sqrt(len(values)) if len(values) > 1 else math.inf
    return mean, mean - half, mean + half


def _ess(weights: np.ndarray, present: np.ndarray) -> float:
    sizes = []
    for r in range(weights.shape[1]):
        w = weights[present[:, r], r]
        if len(w) and (w * w).sum() > 0:
            sizes.append(float(w.sum() ** 2 / (w * w).sum()))
    return min(sizes) if sizes else 0.0


def check_support(target: list[np.ndarray], pages: Sequence[LoggedPage],
                  tolerance: float = 1e-12) -> None:
    """Raise :class:`SupportError` naming a page where the target would show, with
    positive probability, a result the logging policy could not show (a candidate with
    logged chance 0 of being shown), or where the logging chance of what it showed is 0."""
    bad = []
    for at, page in zip(target, pages, strict=True):
        if np.any(page.propensities <= 0):
            bad.append((page, None, 0.0))
            continue
        if page.shown_marginals is None:
            continue
        shown = at.sum(axis=1)
        never = np.flatnonzero((page.shown_marginals <= tolerance) & (shown > tolerance))
        if len(never):
            bad.append((page, int(never[0]), float(shown[never[0]])))
    if bad:
        page, candidate, chance = bad[0]
        where = f"impression {page.id}: " if page.id else ""
        name = (f"document {page.doc_ids[candidate]!r}" if page.doc_ids is not None
                and candidate is not None else f"candidate {candidate}")
        what = (f"{name}, which the target shows with probability {chance:.3g}, had no "
                f"chance of being shown" if candidate is not None
                else "a shown result had no logged chance of being shown")
        raise SupportError(
            f"the logging policy gave zero probability to what the target would show on "
            f"{len(bad)} of {len(pages)} pages ({where}{what}); an off-policy estimate "
            f"needs logs of a stochastic policy that can show whatever the target shows "
            f"(such as pdgd, noregret_klrank or random, or the perturbed pairs of the "
            f"perceptrons for targets that stay close to them)")


def _click_model(pages: Sequence[LoggedPage], depth: int, folds: int
                 ) -> list[Callable[[np.ndarray], np.ndarray]]:
    """Per page, ``chat(X) -> (n, depth)``: a logistic click model in the features and the
    position, fitted on the other folds' shown results (cross-fitting)."""
    from sklearn.linear_model import LogisticRegression

    fold_of = np.arange(len(pages)) % folds
    models = []
    for f in range(folds):
        rows, positions, labels = [], [], []
        for page, g in zip(pages, fold_of, strict=True):
            if g == f and folds > 1:
                continue
            k = min(depth, len(page.shown))
            rows.append(page.X[page.shown[:k]])
            positions.append(np.arange(k))
            labels.append(page.clicks[:k])
        X = np.vstack(rows) if rows else np.zeros((0, 0))
        y = np.concatenate(labels) if labels else np.zeros(0)
        position = np.concatenate(positions) if positions else np.zeros(0, dtype=np.intp)
        if len(y) == 0 or y.min() == y.max():  # nothing to fit: a constant rate
            rate = float(y.mean()) if len(y) else 0.0
            models.append(lambda Xp, rate=rate: np.full((Xp.shape[0], depth), rate))
            continue
        design = np.hstack([X, np.eye(depth)[position]])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fitted = LogisticRegression(C=1.0, max_iter=1000).fit(design, y)
        coef, intercept = fitted.coef_.ravel(), float(fitted.intercept_[0])
        m = X.shape[1]

        def predict(Xp, coef=coef, intercept=intercept, m=m):
            logits = (Xp @ coef[:m])[:, None] + coef[m:][None, :] + intercept
            return 1.0 / (1.0 + np.exp(-logits))

        models.append(predict)
    return [models[g] for g in fold_of]


def evaluate(target: PositionPolicy, pages: Sequence[LoggedPage], depth: int = 10,
             z: float = Z95, folds: int = 2) -> Evaluation:
    """IPS, SNIPS and DR estimates of the target's clicks@``depth`` on ``pages`` (first
    pages the logging policy showed), after checking that the logs support the target."""
    if not pages:
        raise ValueError("no logged pages with their propensities to evaluate on")
    N = len(pages)
    at = [target(page.X, min(depth, page.X.shape[0])) for page in pages]
    check_support(at, pages)
    weights = np.zeros((N, depth))
    clicks = np.zeros((N, depth))
    present = np.zeros((N, depth), dtype=bool)
    for t, (pi, page) in enumerate(zip(at, pages, strict=True)):
        k = min(depth, len(page.shown), pi.shape[1])
        r = np.arange(k)
        weights[t, :k] = pi[page.shown[:k], r] / page.propensities[:k]
        clicks[t, :k] = page.clicks[:k]
        present[t, :k] = True
    logged = mean_estimate(clicks.sum(axis=1), z)
    estimates = []
    # IPS
    value, low, high = mean_estimate((weights * clicks).sum(axis=1), z)
    ess = _ess(weights, present)
    estimates.append(Estimate("IPS", value, low, high, ess))
    # SNIPS: per position a ratio of means, scaled by the share of pages with the position
    share = present.mean(axis=0)
    A = (weights * clicks).mean(axis=0)
    B = weights.mean(axis=0)
    safe = np.where(B > 0, B, 1.0)
    ratio = np.where(B > 0, A / safe, 0.0)
    snips = float((share * ratio).sum())
    influence = ((weights * clicks - ratio * weights) / safe * share).sum(axis=1)
    half = z * float(influence.std(ddof=1)) / math.sqrt(N) if N > 1 else math.inf
    estimates.append(Estimate("SNIPS", snips, snips - half, snips + half, ess))
    # DR, with a cross-fitted click model
    chat = _click_model(pages, depth, folds)
    terms = np.zeros(N)
    for t, (pi, page) in enumerate(zip(at, pages, strict=True)):
        k = pi.shape[1]
        predicted = chat[t](page.X)[:, :k]
        shown = min(k, len(page.shown))
        at_shown = predicted[page.shown[:shown], np.arange(shown)]
        terms[t] = float((pi * predicted).sum()) + float(
            (weights[t, :shown] * (clicks[t, :shown] - at_shown)).sum())
    value, low, high = mean_estimate(terms, z)
    estimates.append(Estimate("DR", value, low, high, ess))
    notes = []
    if ess < 100:
        notes.append(f"effective sample size {ess:.0f}: the target differs so much from the "
                     f"logging policy that few pages inform the estimate; the intervals are "
                     f"unreliable")
    return Evaluation(depth, N, estimates, logged[0], (logged[1], logged[2]), notes)


__getattr__ = renamed(__name__, {"mean_interval": "mean_estimate"}, globals())

"""Logged first pages, read from the event store as an off-policy estimate needs them: each
page's features as the target model reads them, what it showed and what was clicked, and
the logging policy's chance of each shown result at its position."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from reranker.evaluation.estimators import LoggedPage
from reranker.features.extraction import feature_columns
from reranker.models.model import RankingModel
from reranker.stores import ImpressionLog
from reranker.stores.events import SHOWN_PROPENSITIES


@dataclass
class LoggedPages:
    pages: list[LoggedPage]
    #: pages passed over, by reason
    skipped: Counter = field(default_factory=Counter)


def pages_from_log(events: ImpressionLog, model: RankingModel, batch: int = 2000, *,
                   since: float | None = None, logged_by: str | None = None) -> LoggedPages:
    """Every closed first page the target ``model`` can read (its features among the
    logged ones), with the
    logging policy's position propensities: logged by a stochastic policy, or 1 for a
    deterministic one (``log_prob`` 0). Pages of mixed lists, later pages, pages logged
    with other features and pages compacted by retention are counted in ``skipped`` (those
    retention deleted are not there to count), and so are pages served before ``since`` (a
    Unix time) or by another learner than ``logged_by``: a log whose policy changed (a
    deterministic learner, then a stochastic one) is evaluated on the part that can tell."""
    out = LoggedPages([])
    cursor = 0
    names = tuple(model.feature_names)
    while True:
        chunk = events.closed_since(cursor, batch)
        if not chunk:
            return out
        for imp in chunk:
            cursor = imp.closed_seq
            if since is not None and imp.created < since:
                out.skipped["pages served before --since"] += 1
                continue
            if logged_by is not None and imp.learner != logged_by:
                out.skipped["pages served by another learner than --logged-by"] += 1
                continue
            k = min(imp.n_shown, len(imp.doc_ids))
            if imp.offset:
                out.skipped["later pages (not randomised)"] += 1
                continue
            if not imp.learned:  # sorted by a field, or ordered by a query rule
                out.skipped["pages sorted by a field or ordered by a query rule"] += 1
                continue
            if k == 0:
                out.skipped["pages without results"] += 1
                continue
            columns = feature_columns(imp.feature_names, names)
            if columns is None:
                out.skipped["pages logged with other features"] += 1
                continue
            if imp.features is None:
                out.skipped["pages whose features retention dropped (store.retention)"] += 1
                continue
            shown = np.asarray(imp.ranking[:k], dtype=np.intp)
            logged = (imp.context or {}).get(SHOWN_PROPENSITIES)
            if logged is not None and len(logged) >= k:
                propensities = np.asarray(logged[:k], dtype=np.float64)
                marginals = imp.propensities
            elif imp.log_prob == 0.0:  # a deterministic policy showed exactly this
                propensities = np.ones(k)
                marginals = np.zeros(len(imp.doc_ids))
                marginals[shown] = 1.0
            else:
                out.skipped["pages without position propensities (mixed lists, or "
                            "policies that cannot say them)"] += 1
                continue
            where = {doc: r for r, doc in enumerate(imp.doc_ids[i] for i in shown)}
            clicks = np.zeros(k)
            for doc in imp.clicked or []:
                if doc in where:
                    clicks[where[doc]] = 1.0
            out.pages.append(LoggedPage(
                X=model.normalize(imp.features[:, columns]),
                shown=shown, clicks=clicks,
                propensities=propensities,
                shown_marginals=None if marginals is None else np.asarray(marginals),
                id=imp.id, doc_ids=imp.doc_ids))
        if len(chunk) < batch:
            return out

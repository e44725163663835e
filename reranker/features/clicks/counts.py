"""Click features from counts of clicks and position-weighted exposures.

Each time a page is shown, every shown document gains an *exposure* of ``theta_k``, the
examination probability of the position ``k`` it was shown at (:class:`PositionBias`), and
each click adds one *click*. Under the position-based model ``clicks / exposure`` is an
unbiased estimate of how attractive users find the document (the inverse-propensity
estimate of Joachims, Swaminathan & Schnabel 2017, summed over impressions). Smoothed toward
the overall rate ``mu`` with the weight of ``smoothing`` exposures, and divided by it,

    click_lift = (clicks + smoothing * mu) / (exposure + smoothing) / mu

a document never shown has lift 1, one shown often and never clicked falls toward 0, and one
clicked twice as often as the average result rises toward 2, in proportion to the evidence.
A lift means the same on a site whose results are clicked 5% of the time and on one where
they are clicked 50%: a model's weight on it, and the starting ranking's, carry over. Two
features: ``click_lift:query_doc`` counts per normalised query and document,
``click_lift:doc`` per document over the *other* queries. Leaving the query itself out makes
the second mean the same for a query with clicks as for a new one (the document's
popularity elsewhere); otherwise it would copy the first on the queries a model learns
from, and the model would trust it on new queries for what it only says about old ones.
They are rates already, so normalisation leaves them as they are
(:func:`reranker.features.extraction.raw_columns`). See docs/algorithms.md, "Click features".
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

#: Names of the click features, in column order.
CLICK_FEATURES = ("click_lift:query_doc", "click_lift:doc")

_WORD = re.compile(r"\w+")


def query_key(query: str) -> str:
    """The normalised form under which a query's clicks are counted: Unicode NFKC,
    case-folded, its words joined by single spaces (punctuation and spacing dropped)."""
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", query).casefold()))


def click_rates(clicks: np.ndarray, exposure: np.ndarray, mean: float,
                smoothing: float) -> np.ndarray:
    """``(clicks + smoothing * mean) / (exposure + smoothing)``, elementwise."""
    return (np.asarray(clicks, dtype=np.float64) + smoothing * mean) / \
        (np.asarray(exposure, dtype=np.float64) + smoothing)


def overall_rate(clicks: float, exposure: float) -> float:
    """``mu``: clicks per unit of exposure over the whole log, with one pseudo-click in two
    exposures so that an empty log gives 1/2."""
    return (clicks + 1.0) / (exposure + 2.0)


def lifts_from_counts(counts: np.ndarray, total_clicks: float, total_exposure: float,
                      smoothing: float) -> np.ndarray:
    """Click features from per-candidate counts ``(n, 4)``: clicks and exposure per (query,
    document), then per document over all queries (this query's own are taken out here);
    returns the lifts ``(n, 2)`` in :data:`CLICK_FEATURES` order.

    The lifts are rounded to float32's precision (about seven significant digits, more than
    a smoothed click rate carries): a logged impression then keeps each in four bytes,
    exactly as it was served (:mod:`reranker.stores.encoding`)."""
    mean = overall_rate(total_clicks, total_exposure)
    out = np.empty((counts.shape[0], 2))
    out[:, 0] = click_rates(counts[:, 0], counts[:, 1], mean, smoothing)
    other = np.maximum(counts[:, 2:] - counts[:, :2], 0.0)  # rounding never goes below 0
    out[:, 1] = click_rates(other[:, 0], other[:, 1], mean, smoothing)
    return (out / mean).astype(np.float32).astype(np.float64)


def click_lifts(counted: tuple[np.ndarray, tuple[float, float]], smoothing: float) -> np.ndarray:
    """The click features of a page's candidates, ``(n, 2)``, from what an event store's
    ``click_counts(query, doc_ids)`` returns (its counts ``(n, 4)`` and the log's total clicks
    and exposure). The store keeps counts only: turning them into features, and the
    smoothing that takes, is this module's (the offline simulator shares it)."""
    counts, (total_clicks, total_exposure) = counted
    return lifts_from_counts(counts, total_clicks, total_exposure, smoothing)

"""Click features from counts of clicks and position-weighted exposures.

Each time a page is shown, every shown document gains an *exposure* of ``theta_k``, the
examination probability of the position ``k`` it was shown at (:class:`PositionBias`), and
each click adds one *click*. Under the position-based model ``clicks / exposure`` is an
unbiased estimate of how attractive users find the document (the inverse-propensity
estimate of Joachims, Swaminathan & Schnabel 2017, summed over impressions). Smoothed toward
the overall rate ``mu`` with the weight of ``smoothing`` exposures,

    click_rate = (clicks + smoothing * mu) / (exposure + smoothing)

a document never shown gets ``mu``, one shown often and never clicked falls below it, and
one clicked wherever it was shown rises above it, in proportion to the evidence. Two
features: ``click_rate:query_doc`` counts per normalised query and document,
``click_rate:doc`` per document over all queries. They are rates already, so normalisation
leaves them as they are (:meth:`reranker.features.FeatureSpec.raw_columns`). See
docs/algorithms.md, "Click features".
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

#: Names of the click features, in column order.
CLICK_FEATURES = ("click_rate:query_doc", "click_rate:doc")

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


def rates_from_counts(counts: np.ndarray, total_clicks: float, total_exposure: float,
                      smoothing: float) -> np.ndarray:
    """Click features from per-candidate counts ``(n, 4)``: clicks and exposure per (query,
    document), then per document; returns ``(n, 2)`` in :data:`CLICK_FEATURES` order."""
    mean = overall_rate(total_clicks, total_exposure)
    out = np.empty((counts.shape[0], 2))
    out[:, 0] = click_rates(counts[:, 0], counts[:, 1], mean, smoothing)
    out[:, 1] = click_rates(counts[:, 2], counts[:, 3], mean, smoothing)
    return out

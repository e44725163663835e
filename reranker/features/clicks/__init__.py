"""What the click log itself says: position bias and click features.

Clicks are evidence about a document only once corrected for where it was shown: users
examine the top of a page far more than its bottom. :class:`PositionBias` estimates how
much, from the pairs a perturbing learner randomised (interventions, so no click model has
to be assumed); :func:`lifts_from_counts` (:func:`click_lifts` for an event store's counts)
turns clicks and position-weighted exposures into the click features
``click_lift:query_doc`` and ``click_lift:doc`` that every learner sees like any other
feature. The event store keeps the counts for the service, updated in the same transaction
as the impression or click they come from, and returns counts, never features; the offline
simulator keeps them in memory with the same arithmetic. See docs/algorithms.md, "Click features".
"""

from reranker.features.clicks.counts import (
           CLICK_FEATURES,
           click_lifts,
           click_rates,
           lifts_from_counts,
           overall_rate,
           query_key,
)
from reranker.features.clicks.position_bias import PositionBias

__all__ = ["CLICK_FEATURES", "PositionBias", "click_lifts", "click_rates", "lifts_from_counts",
           "overall_rate", "query_key"]

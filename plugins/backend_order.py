"""Backend order: the search engine's own ranking, as a floor."""

from __future__ import annotations

import numpy as np

from reranker import hookimpl
from reranker.learners import Capabilities, Learner, Param, RankResult
from reranker.learners.feedback import Feedback


class BackendOrder(Learner):
    """Keeps the candidates in the order the backend returned them, or sorts them by one
    named feature (for offline data, a strong single feature such as BM25 stands in for the
    backend); learns nothing."""

    name = "backend_order"
    capabilities = Capabilities(floor=True)
    description = ("Backend order (a floor): the backend's own ranking, or the order of one "
                   "named feature; never learns.")
    params = (Param("feature", str, "", "Feature to sort by, descending; empty keeps the "
                    "candidates' order."),)

    def _initialize(self, n_features: int) -> None:
        self.column_ = -1
        if self.feature:
            names = self.feature_names_in_
            if names is None or self.feature not in names:
                raise ValueError(f"learner 'backend_order' parameter 'feature': no feature "
                                 f"named {self.feature!r} (features: "
                                 f"{', '.join(names) if names else 'unnamed'})")
            self.column_ = names.index(self.feature)

    def _rank(self, X: np.ndarray, n_shown: int, rng) -> RankResult:
        n = X.shape[0]
        if self.column_ < 0:
            scores = -np.arange(n, dtype=np.float64)
            return RankResult(ranking=np.arange(n), scores=scores)
        scores = X[:, self.column_].astype(np.float64)
        return RankResult(ranking=np.argsort(-scores, kind="stable"), scores=scores)

    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        return False


@hookimpl
def reranker_register_learners():
    return [BackendOrder]

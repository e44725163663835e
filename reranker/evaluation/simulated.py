"""The off-policy estimate checked against the truth in the simulator (``reranker simulate
--evaluate TARGET``): every page a simulated learner shows is logged with its policy's
chance of each shown result at its position; at the end of the run the target's clicks@10
is estimated from those logs and compared with its true on-policy value, sampled on the same
queries by showing the target's own ranking to the same kind of user."""

from __future__ import annotations

from typing import Any

import numpy as np

from reranker.evaluation.estimators import LoggedPage, SupportError, evaluate, mean_estimate


class OffPolicyCheck:
    """Collects one run's logged pages and the target's on-policy clicks on the same
    queries. ``target`` is a learner with a fixed model (it never learns here); ``user`` a
    simulated user (:func:`reranker.offline.users.make_user`) drawing its own random numbers."""

    def __init__(self, target, user, rng: np.random.Generator, depth: int):
        self.target, self.user, self.rng, self.depth = target, user, rng, depth
        self.pages: list[LoggedPage] = []
        self.true_clicks: list[float] = []
        self.unsupported: str | None = None
        self.specialised = 0

    def observe(self, logging, X: np.ndarray, ranking: np.ndarray, k: int,
                positions: np.ndarray | None, labels: np.ndarray, utility: np.ndarray,
                ideal_utility: float, *, target_X: np.ndarray | None = None,
                page=None) -> None:
        """A page the logging learner showed (before it learns from it), and one on-policy
        page of the target for the same query. ``X`` are the logging learner's features,
        ``target_X`` the target's where they differ (a learner whose model leaves the
        query's own click lift out, or keeps it); ``page`` the page's own chances (its
        ``shown_propensities`` and ``propensities``) where it was not the learner's own (a
        specialised page)."""
        target_X = X if target_X is None else target_X
        clicks = np.zeros(k)
        if positions is not None and len(positions):
            clicks[positions[positions < k]] = 1.0
        shown = np.asarray(ranking[:k], dtype=np.intp)
        if page is not None:
            self.specialised += 1
            propensities, marginals = page.shown_propensities, page.propensities
        else:
            at = logging.position_marginals(X, k)
            if at is None:
                self.unsupported = (f"learner {logging.name!r} cannot say where it places "
                                    f"each result, so its pages cannot be used")
                return
            propensities, marginals = at[shown, np.arange(k)], at.sum(axis=1)
        self.pages.append(LoggedPage(X=target_X.copy(), shown=shown, clicks=clicks,
                                     propensities=propensities, shown_marginals=marginals))
        mine = self.target.rank_validated(target_X, k, self.rng).ranking
        feedback = self.user.respond(mine, k, labels, utility, ideal_utility, self.rng)
        self.true_clicks.append(float(len(feedback.clicked)))

    def result(self) -> dict[str, Any]:
        """The estimates with their intervals, the true value with its interval, or why
        there is no estimate."""
        truth = np.asarray(self.true_clicks)
        out: dict[str, Any] = {"target": self.target.name, "pages": len(self.pages)}
        if len(truth):
            value, low, _ = mean_estimate(truth)
            out["true"] = {"value": value, "half_width": value - low}
        if self.unsupported or not self.pages:
            out["refused"] = self.unsupported or "no pages"
            return out
        try:
            result = evaluate(lambda X, k: self.target.position_marginals(X, k), self.pages,
                              self.depth)
        except SupportError as exc:
            out["refused"] = str(exc)
            if self.specialised:  # where the missing chances most likely come from
                out["refused"] += (
                    f"; {self.specialised} of the {len(self.pages)} logged pages were "
                    f"specialised by their query's clicks, whose randomised pairs move a "
                    f"result by one place at most (--no-specialize logs the learner's own "
                    f"pages)")
            return out
        out["estimates"] = [e.to_dict() for e in result.estimates]
        return out

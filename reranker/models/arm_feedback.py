"""What an arm learns from a logged impression: its model's columns of the logged features
and the feedback its clicks give (docs/algorithms.md, "Comparing learners").

An arm learns from:

* the impressions it showed alone (``Impression.arm`` is its id);
* mixed lists (interleaving, multileaving) it took part in, when its learner's feedback
  rule is defined on a list another policy showed (``learns_from_mixed_lists`` of its
  :class:`reranker.learners.capabilities.Capabilities`): it learns from the page as
  shown, with every click, and the adjacent pairs the experiment randomised on it
  (:func:`reranker.experiments.interleaving.perturb_pairs`), which compare two results
  without position bias whichever arm contributed them;
* nothing else: never the pages of another learner, nor of itself with other settings, nor
  later pages (``from`` > 0), whose order nobody randomised, nor pages whose order a field
  or a query rule decided (``Impression.learned``).
"""

from __future__ import annotations

import numpy as np

from reranker.features.clicks.position_bias import (
    PAIR_DEPTH,
    PAIR_OFFSET,
    SWAP_PROBABILITY_KEY,
    SWAPPED,
)
from reranker.features.extraction import feature_columns
from reranker.learners.feedback import Feedback, feedback_from_clicks
from reranker.learners.specialization import SPECIALISED, taught_by
from reranker.models.arm_identity import ArmIdentity
from reranker.models.model import ModelFactory
from reranker.stores.events import Impression


class ArmFeedback:
    """Turns the impressions of the arm ``identity`` names (its id and aliases) into the
    training data of its model, whose features and learner ``factory`` gives."""

    def __init__(self, identity: ArmIdentity, factory: ModelFactory):
        self.identity = identity
        self.factory = factory
        self._columns: dict[tuple[str, ...], np.ndarray | None] = {}

    def columns(self, names: tuple[str, ...] | list[str]) -> np.ndarray | None:
        """Where the model's features are among ``names`` (the features a search builds and
        an impression logs, of which the model may leave some out: the query's own click
        lift), or None when one of them is missing."""
        names = tuple(names)
        if names not in self._columns:
            self._columns[names] = feature_columns(names, self.factory.feature_names)
        return self._columns[names]

    def takes(self, imp: Impression) -> bool:
        """Whether this arm may learn from ``imp`` at all: a first page in a learner's own
        order, that it showed alone or took part in as a mixed list it learns from."""
        if imp.offset:  # a later page: not randomised, its clicks would teach position bias
            return False
        if not imp.learned:  # sorted by a field, or ordered by a query rule: the site's order
            return False
        names = self.identity.names()
        if imp.arm in names:
            return True
        logged = (imp.context or {}).get("arms", {})
        return imp.arm is None and any(entry.get("id") in names for entry in logged.values()) \
            and self.factory.learner_cls.capabilities.learns_from_mixed_lists

    def learns_only_from_clicks(self) -> bool:
        """Whether a page without a click or a reward changes nothing for this arm: its
        learner learns preferences, which such a page leaves as they were (the conformance
        suite checks it), and its normalisation keeps no running statistics."""
        from reranker.features.extraction import make_normalizer

        capabilities = self.factory.learner_cls.capabilities
        return not capabilities.per_item_feedback \
            and not make_normalizer(self.factory.normalization).fits

    def feedback(self, imp: Impression) -> tuple[np.ndarray, Feedback] | None:
        """The features and feedback this arm learns from in ``imp``, or None when the
        impression is not one it may learn from (module docstring). The features are the
        model's columns of the logged ones (all of them when the model lacks one: the
        trainer then names the difference)."""
        if not self.takes(imp):
            return None
        index = {doc_id: i for i, doc_id in enumerate(imp.doc_ids)}
        clicked = np.array([index[d] for d in imp.clicked or [] if d in index], dtype=np.intp)
        X = imp.features
        if X is not None:
            columns = self.columns(imp.feature_names)
            if columns is not None and len(columns) != X.shape[1]:
                X = X[:, columns]
        if imp.arm in self.identity.names():
            if SPECIALISED in (imp.context or {}):
                # a specialised page teaches the query's judgments at the model's own
                # ranking, once it has a click (docs/algorithms.md, "General model and
                # query specialisation"); otherwise nothing (an empty feedback)
                taught = None
                if len(clicked) and self.factory.learner_cls.capabilities.learns_from_mixed_lists:
                    taught = taught_by(imp.context, len(imp.doc_ids), imp.n_shown)
                return X, taught or Feedback(ranking=imp.ranking, n_shown=imp.n_shown)
            return X, feedback_from_clicks(
                imp.ranking, imp.n_shown, clicked, log_prob=imp.log_prob,
                propensities=imp.propensities, context=imp.context, reward=imp.reward)
        # A mixed list it took part in: the page as shown, with every click, and the pairs
        # the experiment randomised on it (the arms' own perturbations are not what was
        # shown), as if the arm had shown it.
        context = {key: imp.context[key]
                   for key in (PAIR_OFFSET, SWAPPED, SWAP_PROBABILITY_KEY, PAIR_DEPTH)
                   if key in imp.context}
        return X, feedback_from_clicks(imp.ranking, imp.n_shown, clicked, context=context)

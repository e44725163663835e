"""Regression oracles and the learners built on them (docs/algorithms.md, "Semibandit
learners").

Krishnamurthy, Agarwal & Dudik (*Contextual Semibandits via Supervised Learning Oracles*, NIPS
2016) reach their policy class through an oracle (AMO): a weighted least-squares regressor
``f`` fitted to per-item targets (appendix C, Eq. 7), whose policy ranks the items by ``f``
and gives the best one the position of largest weight. Two classes are offered:

- ``linear``: ridge regression, ``f(x) = theta . x``;
- ``trees``: gradient-boosted regression trees, fitted by LightGBM (the paper's GB2 and GB5
  classes, 50 trees of depth 2 or 5; an optional extra, ``reranker[trees]``).

A policy is kept as one flat float array (:meth:`Oracle.fit` returns it, :meth:`Oracle.scores`
evaluates it), so that it saves with the learner's model as plain numbers: a tree ensemble is
stored as its nodes, never as a pickled object.

:class:`OracleLearner` is the base of the learners that call an oracle on their history
(``epsilon_greedy``, ``vcee``): the known position weights, the pages it keeps, the
importance-weighted fit of the empirically best policy (the "leader") at doubling epochs.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from reranker.learners.base import Learner, Param, argmax_ranking
from reranker.learners.capabilities import Capabilities
from reranker.learners.feedback import Feedback, item_feedback

ORACLES = ("linear", "trees")
POSITION_WEIGHTS = ("dcg", "uniform")


def position_weights(kind: str, length: int) -> np.ndarray:
    """The known weights ``w`` of a page's positions, best first (the reward of a page is
    ``sum_l w_l y(a_l)``): ``dcg`` ``1 / log2(l + 1)``, or ``uniform`` (a sum of the shown
    results' feedback, the paper's experiments). Both are non-increasing, so a policy puts its
    best-scored result first."""
    if kind == "uniform":
        return np.ones(length)
    return 1.0 / np.log2(np.arange(length) + 2.0)


class Oracle:
    """A class of regressors: :meth:`fit` finds one by weighted least squares, and returns it
    as a flat array that :meth:`scores` evaluates."""

    def fit(self, X: np.ndarray, y: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """The regressor minimising ``sum_i weight_i (f(X_i) - y_i)^2`` over the class
        (``X``: ``(n, d)``; ``y``, ``weight``: ``(n,)``)."""
        raise NotImplementedError

    def scores(self, policy: np.ndarray, X: np.ndarray) -> np.ndarray:
        """``f(X)`` of the regressor ``policy`` for ``X`` of shape ``(n, d)``."""
        raise NotImplementedError

    def empty(self, n_features: int) -> np.ndarray:
        """The policy before any data: every item scores zero."""
        raise NotImplementedError


class LinearOracle(Oracle):
    """Ridge regression (``lambda |theta|^2`` added to the weighted squared loss)."""

    def __init__(self, ridge: float):
        self.ridge = ridge

    def fit(self, X: np.ndarray, y: np.ndarray, weight: np.ndarray) -> np.ndarray:
        Xw = X * weight[:, None]
        return np.linalg.solve(Xw.T @ X + self.ridge * np.eye(X.shape[1]), Xw.T @ y)

    def scores(self, policy: np.ndarray, X: np.ndarray) -> np.ndarray:
        return X @ policy

    def empty(self, n_features: int) -> np.ndarray:
        return np.zeros(n_features)


class TreeOracle(Oracle):
    """Gradient-boosted regression trees (LightGBM; the paper's GB2 and GB5 classes were 50
    trees of depth 2 or 5). LightGBM fits them much faster than an exact split search, which
    matters because VCEE calls its oracle several times per epoch. A fitted ensemble is
    stored as ``[n_trees, depth, n_nodes]`` followed by its nodes' feature, threshold, left
    child, right child and value (children numbered across the whole ensemble, -1 for a
    leaf) and the trees' roots; :meth:`scores` walks all trees at once."""

    HEADER = 3

    def __init__(self, n_trees: int, depth: int, seed: int = 0):
        self.n_trees, self.depth, self.seed = n_trees, depth, seed

    def fit(self, X: np.ndarray, y: np.ndarray, weight: np.ndarray) -> np.ndarray:
        try:
            import lightgbm
        except ImportError as exc:  # an optional extra
            raise RuntimeError("the trees oracle needs LightGBM: pip install "
                               "'reranker[trees]'") from exc
        model = lightgbm.LGBMRegressor(
            n_estimators=self.n_trees, max_depth=self.depth, num_leaves=2 ** self.depth,
            random_state=self.seed, n_jobs=1, deterministic=True, verbose=-1)
        model.fit(X, y, sample_weight=weight)
        nodes: list[tuple[int, float, int, int, float]] = []
        roots = []
        for tree in model.booster_.dump_model()["tree_info"]:
            roots.append(len(nodes))
            stack = [(tree["tree_structure"], len(nodes))]
            nodes.append((0, 0.0, -1, -1, 0.0))
            while stack:  # number the nodes depth first; children after their parent
                node, index = stack.pop()
                if "leaf_value" in node or "split_feature" not in node:
                    nodes[index] = (0, 0.0, -1, -1, float(node.get("leaf_value", 0.0)))
                    continue
                if node.get("decision_type", "<=") != "<=":
                    raise RuntimeError(f"unexpected split {node['decision_type']!r}")
                left, right = len(nodes), len(nodes) + 1
                nodes.extend([(0, 0.0, -1, -1, 0.0)] * 2)
                nodes[index] = (int(node["split_feature"]), float(node["threshold"]), left,
                                right, 0.0)
                stack.extend([(node["left_child"], left), (node["right_child"], right)])
        table = np.array(nodes, dtype=np.float64).reshape(-1, 5)
        header = [len(roots), self.depth, len(nodes)]
        return np.concatenate([header, *table.T, roots]).astype(np.float64)

    def scores(self, policy: np.ndarray, X: np.ndarray) -> np.ndarray:
        n_trees, depth, n_nodes = int(policy[0]), int(policy[1]), int(policy[2])
        if n_trees == 0:
            return np.zeros(X.shape[0])
        parts = policy[self.HEADER:]
        feature = parts[:n_nodes].astype(np.intp)
        threshold = parts[n_nodes:2 * n_nodes]
        left = parts[2 * n_nodes:3 * n_nodes].astype(np.intp)
        right = parts[3 * n_nodes:4 * n_nodes].astype(np.intp)
        value = parts[4 * n_nodes:5 * n_nodes]
        roots = parts[5 * n_nodes:5 * n_nodes + n_trees].astype(np.intp)
        rows = np.arange(X.shape[0])[:, None]
        node = np.broadcast_to(roots, (X.shape[0], n_trees)).copy()
        for _ in range(depth):
            inner = left[node] >= 0
            go_left = X[rows, feature[node]] <= threshold[node]
            node = np.where(inner, np.where(go_left, left[node], right[node]), node)
        return value[node].sum(axis=1)

    def empty(self, n_features: int) -> np.ndarray:
        return np.zeros(self.HEADER)


def oracle_params(ridge: float = 1.0) -> tuple[Param, ...]:
    """The parameters that choose a learner's oracle class."""
    return (
        Param("oracle", str, "linear", "the regression class of the policies: linear (ridge) "
              "or trees (gradient-boosted regression trees)", choices=ORACLES),
        Param("ridge", float, ridge, "lambda of the linear oracle's ridge regression",
              minimum=0.0, exclusive_minimum=True),
        Param("trees", int, 50, "trees of the trees oracle", minimum=1),
        Param("tree_depth", int, 2, "depth of the trees oracle's trees", minimum=1),
        Param("history", int, 500, "pages kept for the oracle (the newest; 0 keeps all): "
              "the trees oracle and VCEE's optimisation problem fit on them", minimum=0),
    )


class OracleLearner(Learner):
    """A learner that finds policies with a regression oracle over the pages it has seen.

    Each shown result's feedback ``y`` (:func:`reranker.learners.feedback.item_feedback`) is kept
    with
    ``q``, its logged chance of being shown, and the page's features; at doubling epochs the
    leader, the empirically best policy, is refitted: the oracle regresses only onto the shown
    results, target ``y`` and weight ``1 / q`` (Krishnamurthy et al., appendix C). The linear
    leader uses every page seen (running sums); the trees leader the ``history`` newest."""

    capabilities = Capabilities(per_item_feedback=True, variable_length_state=(
        "theta_", "pages_X_", "pages_y_", "pages_q_", "pages_sizes_"))

    #: True when the learner needs its pages even with the linear oracle
    keeps_pages: ClassVar[bool] = False

    def _oracle(self) -> Oracle:
        if self.oracle == "trees":
            return TreeOracle(self.trees, self.tree_depth)
        return LinearOracle(self.ridge)

    def _initialize(self, n_features: int) -> None:
        self.A_ = self.ridge * np.eye(n_features)  # lambda I + sum (1/q) x x^T
        self.b_ = np.zeros(n_features)  # sum (1/q) y x
        self.theta_ = self._oracle().empty(n_features)  # the leader
        # the kept pages: every candidate's features, its feedback (0 if not shown) and its
        # logged chance of being shown (negative if not shown), and each page's size
        self.pages_X_ = np.zeros((0, n_features))
        self.pages_y_ = np.zeros(0)
        self.pages_q_ = np.zeros(0)
        self.pages_sizes_ = np.zeros(0, dtype=np.int64)
        self.rounds_ = 0
        self.next_fit_ = 1  # epochs double: refit after 1, 2, 4, ... rounds

    def _state_defaults(self) -> dict:
        n = getattr(self, "n_features_in_", 0)
        return {"pages_X_": np.zeros((0, n)), "pages_y_": np.zeros(0),
                "pages_q_": np.zeros(0), "pages_sizes_": np.zeros(0, dtype=np.int64)}

    def _keeps_pages(self) -> bool:
        return self.keeps_pages or self.oracle != "linear"

    def _leader_scores(self, X: np.ndarray) -> np.ndarray:
        return self._oracle().scores(self.theta_, X)

    def _learn_page(self, X: np.ndarray, feedback: Feedback, k: int) -> tuple[np.ndarray,
                                                                             np.ndarray]:
        """Keep the page's feedback; return the shown candidates and their chances ``q``."""
        shown, y = item_feedback(feedback, k)
        logged = feedback.propensities  # the chances when the page was ranked
        if logged is None or len(logged) != X.shape[0]:  # not logged: the current policy's
            logged = self.marginals(X, k)
        q = np.maximum(np.asarray(logged, dtype=np.float64)[shown], 1e-12)
        Xs = X[shown]
        self.A_ = self.A_ + (Xs / q[:, None]).T @ Xs
        self.b_ = self.b_ + (y / q) @ Xs
        if self._keeps_pages():
            self._keep(X, shown, y, q)
        self.rounds_ += 1
        return shown, q

    def _keep(self, X: np.ndarray, shown: np.ndarray, y: np.ndarray, q: np.ndarray) -> None:
        rows, add = len(self.pages_y_), X.shape[0]
        sizes = self.pages_sizes_
        if self.history and len(sizes) >= 2 * self.history:  # amortised: drop the oldest
            cut = int(sizes[: len(sizes) - self.history + 1].sum())
            sizes = sizes[len(sizes) - self.history + 1:]
            self.pages_X_, self.pages_y_ = self.pages_X_[cut:], self.pages_y_[cut:]
            self.pages_q_ = self.pages_q_[cut:]
            rows -= cut
        # the pages live in buffers with room to grow (appending one page must not copy all
        # of them); the state arrays are views of their filled part
        buffers = getattr(self, "_buffers", None)
        if buffers is None or self.pages_X_.base is not buffers[0] \
                or self.pages_X_.ctypes.data != buffers[0].ctypes.data \
                or rows + add > len(buffers[1]):
            capacity = max(2 * (rows + add), 256)
            buffers = (np.zeros((capacity, X.shape[1])), np.zeros(capacity),
                       np.zeros(capacity))
            buffers[0][:rows], buffers[1][:rows] = self.pages_X_, self.pages_y_
            buffers[2][:rows] = self.pages_q_
            self._buffers = buffers
        end = rows + add
        buffers[0][rows:end] = X
        buffers[1][rows:end] = 0.0
        buffers[1][rows + shown] = y
        buffers[2][rows:end] = -1.0  # not shown
        buffers[2][rows + shown] = q
        self.pages_X_, self.pages_y_, self.pages_q_ = (
            buffers[0][:end], buffers[1][:end], buffers[2][:end])
        self.pages_sizes_ = np.append(sizes, add)

    def _kept_pages(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The ``history`` newest pages: features, feedback, chances, sizes."""
        sizes = self.pages_sizes_
        if self.history and len(sizes) > self.history:
            cut = int(sizes[: len(sizes) - self.history].sum())
            sizes = sizes[len(sizes) - self.history:]
            return self.pages_X_[cut:], self.pages_y_[cut:], self.pages_q_[cut:], sizes
        return self.pages_X_, self.pages_y_, self.pages_q_, sizes

    def _epoch_due(self) -> bool:
        if self.rounds_ < self.next_fit_:
            return False
        self.next_fit_ *= 2
        return True

    def _fit_leader(self) -> None:
        """The empirically best policy: appendix C's regression onto the shown results."""
        if self.oracle == "linear":
            self.theta_ = np.linalg.solve(self.A_, self.b_)
            return
        X, y, q, _ = self._kept_pages()
        shown = q > 0
        if shown.any():
            self.theta_ = self._oracle().fit(X[shown], y[shown], 1.0 / q[shown])


def page_lists(scores: np.ndarray, sizes: np.ndarray, length: int) -> np.ndarray:
    """Each result's position on its page's list (``-1`` if not on it) when every page, a run
    of ``sizes`` rows of ``scores``, shows its ``length`` best-scored results."""
    page = np.repeat(np.arange(len(sizes)), sizes)
    order = np.lexsort((-scores, page))  # by page, then best first (ties: first row first)
    starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
    position = np.empty(len(scores), dtype=np.intp)
    position[order] = np.arange(len(scores)) - starts
    position[position >= length] = -1
    return position


def top_list(scores: np.ndarray, k: int) -> np.ndarray:
    """The policy's ranking of one page: best-scored first (positions have non-increasing
    weights, so the best result takes the first)."""
    return argmax_ranking(scores)[:k]


def smoothing(c: float, n_candidates: float, rounds: int) -> float:
    """VCEE's ``mu_t = c / sqrt(K t)``, at most 1/2 (docs/algorithms.md, "VCEE")."""
    return min(0.5, c / math.sqrt(max(n_candidates, 1.0) * max(rounds, 1)))

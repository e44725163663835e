"""Per-hit features and their normalisation.

Every backend answers a search with a :class:`reranker.backends.Candidates`: the hits'
overall scores, one score per searched field, and the numeric document fields named in
config. :class:`FeatureSpec` turns that, and the click features the event store counts
(:mod:`reranker.features.clicks`), into the raw feature matrix, with the same feature names
whichever
backend served, so a model knows exactly what its weights mean.

Normalisation (docs/algorithms.md, "The joint feature map") is part of the model: learners
assume bounded features, and a model is only valid with the normalisation it was trained
with.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from reranker.features.clicks import CLICK_FEATURES

#: The engine's own score, which carries its order: the feature the starting ranking
#: follows (:func:`engine_prior`).
ENGINE_SCORE = "backend_score"

if TYPE_CHECKING:  # pragma: no cover
    from reranker.backends import Candidates
    from reranker.core.config import Config


@dataclass(frozen=True)
class FeatureSpec:
    """Which features a request yields, in order."""

    fields: tuple[str, ...]
    numeric_fields: tuple[str, ...] = ()
    missing_value: float = 0.0
    #: Names of the per-hit query scores, one per column of ``Candidates.field_scores``;
    #: empty means one ``field_score:<field>`` per searched field.
    query_features: tuple[str, ...] = ()
    #: Whether the click features (:data:`reranker.features.clicks.CLICK_FEATURES`) come last.
    click_features: bool = False

    #: Largest magnitude of a raw feature value; larger ones are clipped.
    LIMIT = 1e12

    @classmethod
    def from_config(cls, config: Config) -> FeatureSpec:
        backend = config.backend
        if backend.ltr_featureset:
            query_features = tuple(f"ltr:{name}" for name in backend.ltr_features)
        elif backend.feature_queries:
            query_features = tuple(f"query_score:{name}" for name in backend.feature_queries)
        else:
            query_features = tuple(f"field_score:{f}" for f in backend.fields)
        return cls(fields=tuple(backend.fields),
                   numeric_fields=tuple(config.features.numeric_fields),
                   missing_value=float(config.features.missing_value),
                   query_features=query_features,
                   click_features=bool(config.features.click_features))

    @functools.cached_property
    def query_names(self) -> tuple[str, ...]:
        return self.query_features or tuple(f"field_score:{f}" for f in self.fields)

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        """Feature names, in column order: the same whichever backend serves, so that a
        model is refused where its features would mean something else."""
        return ((ENGINE_SCORE,) + self.query_names
                + tuple(f"field_value:{f}" for f in self.numeric_fields)
                + (CLICK_FEATURES if self.click_features else ()))

    def build(self, candidates: Candidates, clicks: np.ndarray | None = None) -> np.ndarray:
        """Raw feature matrix, shape ``(n, m)``, from a backend's candidates and, when the
        click features are on, their click features ``clicks`` (shape ``(n, 2)``).

        Columns: the backend's overall score (:func:`engine_scores`), each field's score,
        each numeric field (missing or non-finite values replaced by ``missing_value``), then
        the click features. There is no feature of the engine's rank: the score carries the
        engine's order, and a rank feature learns from clicks what the click lifts have
        already moved (docs/algorithms.md, "Safe start"). Values are clipped to +-``LIMIT`` so
        that no normalisation can overflow. The result is finite (a NaN score or click
        feature is a ``ValueError``), which lets the ranking skip checking it again.
        """
        n = len(candidates.ids)
        nf, nn = len(self.query_names), len(self.numeric_fields)
        scores = _floats(candidates.scores, (n,), "scores")
        field_scores = _floats(candidates.field_scores, (n, nf), "field_scores")
        numeric = _floats(candidates.numeric, (n, nn), "numeric") if nn else _NONE
        if self.click_features:
            if clicks is None:
                raise ValueError("the click features are on but no click counts were given")
            clicks = _floats(clicks, (n, len(CLICK_FEATURES)), "click features")
        else:
            clicks = _NONE
        width = 1 + nf + nn + clicks.shape[1]
        if width != len(self.names):  # the compiled code checks no bounds
            raise ValueError(f"{width} feature columns for {len(self.names)} feature names")
        # Column-major: the normalisation works on whole columns, which are then contiguous.
        X = np.empty((n, width), order="F")
        if not kernels().raw_features(scores, field_scores, numeric, clicks,
                                       self.missing_value, self.LIMIT, X):
            raise ValueError("features contain NaN values (a score the backend answered, or "
                             "a click feature, is not a number)")
        return X


_NONE = np.empty((0, 0))


def _floats(values: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
    """``values`` as float64 of ``shape`` (with no copy when they are already)."""
    array = np.asarray(values, dtype=np.float64)
    if array.shape != shape:
        if array.size == 0 and 0 in shape:
            return np.empty(shape)
        raise ValueError(f"the candidates' {what} have shape {array.shape}, expected {shape}")
    return array


_KERNELS = None


def kernels():
    """:mod:`reranker.features.kernels`, imported on first use (numba's import is not free)."""
    global _KERNELS
    if _KERNELS is None:
        from reranker.features import kernels as module
        _KERNELS = module
    return _KERNELS


def engine_scores(scores: np.ndarray) -> np.ndarray:
    """The ``backend_score`` column: the engine's scores when its hits come in the order of
    their scores, as a search by relevance answers them; otherwise (the engine sorted on
    another key, or the application passed scores out of order) scores falling with the
    rank, ``n - rank``, so that the column always carries the engine's order, which the
    starting ranking follows (:func:`engine_prior`). A rise smaller than a millionth of the
    largest score is rounding (an engine that sums float32 scores), not another order."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1:
        raise ValueError(f"the scores must be one per hit, got shape {scores.shape}")
    out = np.empty(len(scores))
    kernels().engine_column(scores, out)
    return out


def feature_columns(names: tuple[str, ...] | list[str],
                    wanted: tuple[str, ...] | list[str]) -> np.ndarray | None:
    """Where the features ``wanted`` (a model's) are among ``names`` (what a search builds
    or an impression logs, of which a model may leave some out: the query's own click lift),
    or None when one of them is missing."""
    where = {name: i for i, name in enumerate(names)}
    if any(name not in where for name in wanted):
        return None
    return np.array([where[name] for name in wanted], dtype=np.intp)


def raw_columns(names: tuple[str, ...] | list[str]) -> np.ndarray:
    """Columns that normalisation leaves as they are: the click features, which are lifts
    on a common scale already, and whose differences between documents are the evidence
    (min-max over a page would blow one stray click up to the full range)."""
    return np.array([j for j, name in enumerate(names) if name in CLICK_FEATURES],
                    dtype=np.intp)


def engine_prior(names: tuple[str, ...] | list[str],
                 engine_feature: str = ENGINE_SCORE) -> np.ndarray | None:
    """The starting ranking as a weight vector (docs/algorithms.md, "Safe start"): weight 1
    on the engine's own score (min-max normalised over the candidates by default), and 1
    on ``click_lift:query_doc``, so that a document users clearly prefer for a query rises
    past the ones the engine scored just above it, by as much as the engine's margin. None
    when the engine's feature is not among ``names``."""
    names = list(names)
    if engine_feature not in names:
        return None
    prior = np.zeros(len(names))
    prior[names.index(engine_feature)] = 1.0
    if CLICK_FEATURES[0] in names:
        prior[names.index(CLICK_FEATURES[0])] = 1.0
    return prior


class Normalizer:
    """Scales raw features before ranking. Subclasses are stateless or keep running
    statistics that the trainer updates (:meth:`partial_fit`) and the model saves."""

    method = "none"
    #: Whether it keeps running statistics (:meth:`partial_fit` changes it).
    fits = False

    def transform(self, X: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
        """The scaled features, as a new array when anything is scaled (``X`` itself is
        never written); the columns where the boolean mask ``keep`` is true are left as
        they are."""
        out = self._scale(X)
        if keep is not None and out is not X and keep.any():
            out[:, keep] = X[:, keep]
        return out

    def _scale(self, X: np.ndarray) -> np.ndarray:
        return X

    def partial_fit(self, X: np.ndarray) -> None:
        """Update running statistics with one request's raw features."""

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any], n_features: int) -> None:
        if state:
            raise ValueError(f"normalisation {self.method!r} keeps no state, got {sorted(state)}")


class PerQueryMinMax(Normalizer):
    """Min-max over the candidates of each request (the LETOR convention); a feature that is
    constant over the candidates becomes 0."""

    method = "per_query_minmax"

    def transform(self, X: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"features must be a 2-D array, got shape {X.shape}")
        if keep is None:
            keep = np.zeros(X.shape[1], dtype=np.bool_)
        elif keep.shape != (X.shape[1],) or keep.dtype != np.bool_:
            raise ValueError(f"{X.shape[1]} features but a mask of {keep.shape} {keep.dtype}")
        out = np.empty(X.shape, order="F")  # the kernel walks the columns
        kernels().per_query_minmax(X, keep, out)
        return out


class ZScore(Normalizer):
    """Standardise with running global means and variances (Welford's algorithm), updated
    by the trainer from the raw features of the impressions it learns from."""

    method = "zscore"
    fits = True

    def __init__(self) -> None:
        self.count = 0
        self.mean: np.ndarray | None = None
        self.m2: np.ndarray | None = None

    def _scale(self, X: np.ndarray) -> np.ndarray:
        if self.count < 2 or self.mean is None:
            return X - X.mean(axis=0)  # no statistics yet: centre per request
        std = np.sqrt(self.m2 / (self.count - 1))
        return (X - self.mean) / np.where(std > 0, std, 1.0)

    def partial_fit(self, X: np.ndarray) -> None:
        # Chan et al.'s parallel form of Welford's update, one request's rows at a time.
        n_b = X.shape[0]
        if n_b == 0:
            return
        mean_b = X.mean(axis=0)
        m2_b = ((X - mean_b) ** 2).sum(axis=0)
        if self.mean is None:
            self.count, self.mean, self.m2 = n_b, mean_b, m2_b
            return
        n_a = self.count
        total = n_a + n_b
        delta = mean_b - self.mean
        self.mean = self.mean + delta * (n_b / total)
        self.m2 = self.m2 + m2_b + delta ** 2 * (n_a * n_b / total)
        self.count = total

    def get_state(self) -> dict[str, Any]:
        if self.mean is None:
            return {"count": 0}
        return {"count": self.count, "mean": self.mean.tolist(), "m2": self.m2.tolist()}

    def set_state(self, state: dict[str, Any], n_features: int) -> None:
        count = state.get("count", 0)
        if not isinstance(count, int) or count < 0:
            raise ValueError(f"zscore state 'count' must be a non-negative integer, got {count!r}")
        if count == 0:
            self.count, self.mean, self.m2 = 0, None, None
            return
        mean = np.asarray(state.get("mean"), dtype=np.float64)
        m2 = np.asarray(state.get("m2"), dtype=np.float64)
        if mean.shape != (n_features,) or m2.shape != (n_features,):
            raise ValueError(f"zscore state has {mean.shape} means and {m2.shape} sums of "
                             f"squares for {n_features} features")
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(m2)) and np.all(m2 >= 0)):
            raise ValueError("zscore state is not finite and non-negative")
        self.count, self.mean, self.m2 = count, mean, m2


NORMALIZERS = {cls.method: cls for cls in (PerQueryMinMax, ZScore, Normalizer)}


def make_normalizer(method: str) -> Normalizer:
    try:
        return NORMALIZERS[method]()
    except KeyError:
        raise ValueError(f"unknown normalisation {method!r} (known: "
                         f"{', '.join(NORMALIZERS)})") from None

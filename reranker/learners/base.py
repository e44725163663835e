"""The interface every learner plugin implements.

A learner ranks the candidates of one request and learns from the feedback on what it
showed. It follows scikit-learn's conventions: the constructor only stores parameters,
:meth:`Learner.validate_params` checks them (called once at start-up and on first use), and
learned state lives in attributes whose names end in ``_``. :meth:`get_state` and
:meth:`set_state` move that state in and out as plain arrays and numbers, which is all the
model store saves.

Shapes: ``X`` is ``(n, m)`` -- ``n`` candidates, ``m`` features, already normalised;
rankings are arrays of candidate indices, best first, holding every candidate once.
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from reranker.learners import shrinkage
from reranker.learners.capabilities import NAMES, Capabilities
from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import Feedback

#: Names of the presentation policies of the built-in learners: ``"argmax"`` (sorted by
#: score), ``"plackett_luce"`` (sampled item by item with probabilities ``softmax(scores)``),
#: ``"uniform"`` (a uniformly random permutation) and ``"perturbed_pairs"`` (the argmax with
#: adjacent pairs swapped at random, see :mod:`reranker.learners.coactive`). The name is descriptive
#: only: what a policy's probabilities are, only its learner says
#: (:meth:`Learner.log_probability`, :meth:`Learner.first_log_probabilities`,
#: :meth:`Learner.marginals`), so a new policy needs no change anywhere else.
POLICIES = ("argmax", "plackett_luce", "uniform", "perturbed_pairs")


@dataclass(frozen=True)
class Param:
    """A parameter a learner declares: name, type, default and documentation."""

    name: str
    type: type
    default: Any
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple | None = None
    exclusive_minimum: bool = False

    def check(self, value: Any, owner: str) -> Any:
        """Return ``value`` converted to the declared type, or raise ``ValueError``."""
        where = f"{owner} parameter {self.name!r}"
        if self.type is float:
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise ValueError(f"{where} must be a number, got {value!r}")
            value = float(value)
            if not np.isfinite(value):
                raise ValueError(f"{where} must be finite, got {value!r}")
        elif self.type is int:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"{where} must be an integer, got {value!r}")
            value = int(value)
        elif not isinstance(value, self.type):
            raise ValueError(f"{where} must be of type {self.type.__name__}, got {value!r}")
        if self.minimum is not None:
            if value < self.minimum or (self.exclusive_minimum and value == self.minimum):
                bound = "greater than" if self.exclusive_minimum else "at least"
                raise ValueError(f"{where} must be {bound} {self.minimum:g}, got {value!r}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"{where} must be at most {self.maximum:g}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{where} must be one of {', '.join(map(str, self.choices))}, "
                             f"got {value!r}")
        return value

    def describe(self) -> str:
        bounds = []
        if self.minimum is not None:
            bounds.append(f"{'>' if self.exclusive_minimum else '>='} {self.minimum:g}")
        if self.maximum is not None:
            bounds.append(f"<= {self.maximum:g}")
        if self.choices:
            bounds.append("one of " + ", ".join(map(str, self.choices)))
        extra = f" ({'; '.join(bounds)})" if bounds else ""
        return f"{self.name}: {self.type.__name__} = {self.default!r}{extra}. {self.doc}"


#: The compiled permutation check (:func:`reranker.features.kernels.first_misplaced`), imported by
#: the
#: first ranking: commands that never rank do not import numba.
_first_misplaced = None


@dataclass(eq=False, slots=True)
class RankResult:
    """A ranking of all candidates and what produced it.

    ``scores`` are the per-candidate scores the ranking is sorted or sampled from.
    A stochastic learner also reports ``log_prob``, the log-probability of the shown top
    ``n_shown`` under its policy, and ``propensities``, the per-candidate marginal
    probability of being shown (:meth:`Learner.rank` fills them in from
    :meth:`Learner.marginals` when ``_rank`` leaves them out). ``context`` is a small
    JSON-able record the learner wants back with the feedback on this impression (for the
    perceptrons, which pairs they randomised); it is logged with the impression.
    """

    ranking: np.ndarray
    scores: np.ndarray
    log_prob: float | None = None
    propensities: np.ndarray | None = None
    context: dict | None = None
    #: The probability that each shown result was shown at its position (position ``r`` of
    #: the first ``n_shown``), filled in by :meth:`Learner.rank` from
    #: :meth:`Learner.position_marginals` for stochastic learners whose ``_rank`` leaves it
    #: out.
    shown_propensities: np.ndarray | None = None


class _CapabilitiesAttribute:
    """``capabilities`` of a learner class (the object it declares) and of a learner (its
    :meth:`Learner.current_capabilities`, which are the declared ones unless the class says
    that one depends on a parameter or on the learned state)."""

    def __get__(self, learner: Learner | None, cls: type[Learner]) -> Capabilities:
        if learner is None or not cls._capabilities_vary:
            return cls._declared_capabilities
        return learner.current_capabilities()


class _DeprecatedFlag:
    """The reading of a capability by its old class-variable name (``learner.stochastic``),
    kept for one release for plugins written against it."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, learner: Learner | None, cls: type[Learner]) -> Any:
        warnings.warn(f"Learner.{self.name} is deprecated; read "
                      f"learner.capabilities.{self.name} instead", DeprecationWarning,
                      stacklevel=2)
        return getattr((learner if learner is not None else cls).capabilities, self.name)


class Learner(ABC):
    """Base class of learner plugins.

    Subclasses set :attr:`name`, :attr:`description` and :attr:`params`, declare their
    :attr:`capabilities`, and implement :meth:`_initialize`, :meth:`_rank` and
    :meth:`_update`. Learned attributes end in ``_``.
    """

    #: Name used in YAML (``learner.name``) and on the command line.
    name: ClassVar[str] = ""
    #: One line shown by ``reranker learners``.
    description: ClassVar[str] = ""
    #: The parameters the learner accepts, with defaults.
    params: ClassVar[tuple[Param, ...]] = ()
    #: What the learner can do (:class:`~reranker.learners.capabilities.Capabilities`),
    #: declared in the class body as ``capabilities = Capabilities(...)``, or from the
    #: parent's with ``dataclasses.replace(Parent.capabilities, ...)``. Read on a class, it
    #: is the declared object; on a learner, :meth:`current_capabilities`.
    capabilities: ClassVar[Capabilities] = _CapabilitiesAttribute()  # type: ignore[assignment]
    _declared_capabilities: ClassVar[Capabilities] = Capabilities()
    #: Whether ``capabilities`` of a learner is worked out per learner (a class that
    #: overrides :meth:`current_capabilities`, or sets an old flag as a property).
    _capabilities_vary: ClassVar[bool] = False
    #: The old flags a class defines as properties (their values are its learners').
    _flag_properties: ClassVar[tuple[str, ...]] = ()
    #: Whether the class was registered by one of the project's own plugins
    #: (:data:`reranker.core.plugins.DEFAULT_PLUGINS`), which the conformance suite checks in
    #: the project's tests, so that :meth:`rank` does not check its results on every search
    #: as it does a plugin's (:meth:`_checked`). Set by the plugin manager, never inherited.
    _shipped: ClassVar[bool] = False

    stochastic = _DeprecatedFlag("stochastic")
    policy = _DeprecatedFlag("policy")
    exact_probabilities = _DeprecatedFlag("exact_probabilities")
    supports_growth = _DeprecatedFlag("supports_growth")
    per_item_feedback = _DeprecatedFlag("per_item_feedback")
    learns_from_mixed_lists = _DeprecatedFlag("learns_from_mixed_lists")
    floor = _DeprecatedFlag("floor")
    variable_length_state = _DeprecatedFlag("variable_length_state")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._shipped = False
        own = cls.__dict__.get("capabilities")
        if own is not None and not isinstance(own, Capabilities | _CapabilitiesAttribute):
            raise TypeError(f"{cls.__qualname__}.capabilities must be a Capabilities (a "
                            f"learner whose capabilities depend on its parameters overrides "
                            f"current_capabilities()), got {own!r}")
        if not isinstance(own, Capabilities):  # the first declaration along the MRO
            own = next(klass.__dict__["_declared_capabilities"] for klass in cls.__mro__[1:]
                       if "_declared_capabilities" in klass.__dict__)
        old, properties = _old_flags(cls)
        cls._flag_properties = tuple(dict.fromkeys(cls._flag_properties + properties))
        cls._capabilities_vary = bool(cls._flag_properties) or \
            cls.current_capabilities is not Learner.current_capabilities
        cls._declare(replace(own, **old) if old else own)

    @classmethod
    def _declare(cls, capabilities: Capabilities) -> None:
        """Make ``capabilities`` the class's declared ones. Where no learner's can differ,
        ``capabilities`` is the object itself, read as a plain attribute on every search;
        otherwise the attribute that asks :meth:`current_capabilities`. (Set on the class
        itself, so that a mixin's attribute of that name cannot hide it.)"""
        cls._declared_capabilities = capabilities
        cls.capabilities = capabilities if not cls._capabilities_vary \
            else _CapabilitiesAttribute()  # type: ignore[assignment]

    def current_capabilities(self) -> Capabilities:
        """What this learner can do with its parameters and learned state, which
        ``learner.capabilities`` reads: the class's declared :attr:`capabilities`. A learner
        one of whose facts depends on a parameter (a chance of exploring that may be 0) or on
        its learned state overrides it, returning
        ``super().current_capabilities().with_(stochastic=...)``."""
        declared = type(self)._declared_capabilities
        if not self._flag_properties:
            return declared
        return declared.with_(**{name: getattr(self, name) for name in self._flag_properties})

    def __init__(self, feature_map: FeatureMap | None = None, **params: Any):
        known = {p.name for p in self.params}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"learner {self.name!r} has no parameter {unknown[0]!r} "
                             f"(known: {', '.join(sorted(known)) or 'none'})")
        self.feature_map = feature_map if feature_map is not None else FeatureMap()
        for p in self.params:
            setattr(self, p.name, params.get(p.name, p.default))
        self._validated = False

    # -- parameters ---------------------------------------------------------------------

    def get_params(self) -> dict[str, Any]:
        """The learner's parameters (not its learned state)."""
        return {p.name: getattr(self, p.name) for p in self.params}

    def validate_params(self) -> None:
        """Check every parameter; raise ``ValueError`` naming the first bad one."""
        for p in self.params:
            setattr(self, p.name, p.check(getattr(self, p.name), f"learner {self.name!r}"))
        self._validated = True

    # -- learned state --------------------------------------------------------------------

    @property
    def initialized(self) -> bool:
        return hasattr(self, "n_features_in_")

    def initialize(self, n_features: int, feature_names: list[str] | None = None,
                   prior: np.ndarray | None = None) -> None:
        """Create the initial model for ``n_features`` features (``w_1`` of the papers).
        ``feature_names`` (when known) are kept in ``feature_names_in_``. ``prior`` is a
        weight vector that ranks like the search engine (see :class:`LinearLearner`);
        learners that cannot start from one ignore it."""
        if not self._validated:
            self.validate_params()
        if feature_names is not None and len(feature_names) != n_features:
            raise ValueError(f"{len(feature_names)} feature names for {n_features} features")
        if prior is not None and np.shape(prior) != (n_features,):
            raise ValueError(f"prior has shape {np.shape(prior)}, expected ({n_features},)")
        self.n_features_in_ = int(n_features)
        self.feature_names_in_ = list(feature_names) if feature_names is not None else None
        self._initialize(self.n_features_in_)
        self._start_from(prior)

    def _start_from(self, prior: np.ndarray | None) -> None:  # noqa: B027 -- optional
        """Take the engine-like starting ranking ``prior`` into the initial state (learners
        that support one)."""

    def get_state(self) -> dict[str, Any]:
        """Learned state: every attribute ending in ``_`` (arrays and numbers)."""
        if not self.initialized:
            raise ValueError(f"learner {self.name!r} has no learned state yet")
        state = {}
        for key, value in vars(self).items():
            if key.endswith("_") and not key.startswith("_"):
                state[key] = value.copy() if isinstance(value, np.ndarray) else value
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore learned state saved by :meth:`get_state`; raise ``ValueError`` if it does
        not fit this learner."""
        if not self._validated:
            self.validate_params()
        if "n_features_in_" not in state:
            raise ValueError(f"state of learner {self.name!r} lacks 'n_features_in_'")
        template = type(self)(feature_map=self.feature_map, **self.get_params())
        template.initialize(int(state["n_features_in_"]), state.get("feature_names_in_"))
        expected = template.get_state()
        state = {**{k: v for k, v in template._state_defaults().items() if k in expected},
                 **state}
        growing = self.capabilities.variable_length_state
        missing = sorted(set(expected) - set(state))
        extra = sorted(set(state) - set(expected))
        if missing or extra:
            raise ValueError(f"state of learner {self.name!r} does not fit: missing "
                             f"{missing or 'nothing'}, unexpected {extra or 'nothing'}"
                             + (" (a learner that gained learned state gives models saved "
                                "before it their value in _state_defaults())" if missing
                                else ""))
        restored = {}
        for key, ref in expected.items():
            value = state[key]
            if isinstance(ref, np.ndarray):
                arr = np.array(value, dtype=ref.dtype)
                if arr.size == 0 and ref.ndim > 1 and key in growing:
                    # an empty array of rows is an empty list in a model file
                    arr = arr.reshape((0, *ref.shape[1:]))
                if key in growing and arr.ndim == ref.ndim \
                        and arr.shape[1:] == ref.shape[1:]:
                    pass  # any length
                elif arr.shape != ref.shape:
                    raise ValueError(f"state {key!r} of learner {self.name!r} has shape "
                                     f"{arr.shape}, expected {ref.shape}")
                if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
                    raise ValueError(f"state {key!r} of learner {self.name!r} is not finite")
                restored[key] = arr
            elif isinstance(ref, list):
                restored[key] = list(value)
            else:
                restored[key] = type(ref)(value) if ref is not None else value
        for key, value in restored.items():
            setattr(self, key, value)

    def _state_defaults(self) -> dict[str, Any]:
        """Values of learned state that models saved by earlier versions of the learner may
        lack (none by default): such a model loads with these."""
        return {}

    # -- ranking and learning -------------------------------------------------------------

    def check_features(self, X: np.ndarray) -> np.ndarray:
        """Validate a feature matrix, initialising or growing the model as needed."""
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"features must be a 2-D array (candidates x features), got "
                             f"shape {X.shape}")
        if X.dtype.kind not in "fiu":
            raise ValueError(f"features must be numeric, got dtype {X.dtype}")
        if not np.all(np.isfinite(X)):
            raise ValueError("features contain NaN or infinite values")
        if not self.initialized:
            self.initialize(X.shape[1])
        elif X.shape[1] != self.n_features_in_:
            grows = self.capabilities.supports_growth
            if X.shape[1] > self.n_features_in_ and grows:
                self.grow(X.shape[1])
            else:
                raise ValueError(
                    f"learner {self.name!r} was trained on {self.n_features_in_} features but "
                    f"got {X.shape[1]}" + ("" if grows else
                                          "; it does not support a changing feature set"))
        return X

    def rank(self, X: np.ndarray, n_shown: int | None = None,
             rng: np.random.Generator | None = None, *, check: bool = True) -> RankResult:
        """Rank all ``n`` candidates; ``n_shown`` is how many the user will see. A stochastic
        learner samples with ``rng`` (when None, one generator seeded from fresh entropy, made
        once per process).

        ``check=False`` is for callers that built ``X`` themselves as a 2-D float array of
        finite values (the service, from :meth:`reranker.features.extraction.FeatureSpec.build`):
        the
        scan for NaN and infinities is skipped; a feature count other than the model's still
        goes through the full check (which grows the model or raises)."""
        if check or not self.initialized or X.shape[1] != self.n_features_in_:
            X = self.check_features(X)
        n_shown = X.shape[0] if n_shown is None else max(0, min(int(n_shown), X.shape[0]))
        capabilities = self.capabilities
        if rng is None and capabilities.stochastic:
            rng = _fallback_rng()
        result = self._rank(X, n_shown, rng)
        if not self._shipped:  # (the built-in learners' results are checked by their tests)
            result = self._checked(result, X.shape[0], n_shown)
        if capabilities.stochastic and capabilities.exact_probabilities:
            self._log_chances(X, n_shown, result)
            result.propensities = self._checked_array(result.propensities, "propensities",
                                                      X.shape[0])
        return result

    def _checked(self, result: RankResult, n: int, n_shown: int) -> RankResult:
        """``_rank``'s result as served and logged: the ranking a permutation of the ``n``
        candidates, one score per candidate, one chance per candidate and per shown position
        (array-likes become arrays); else a ``ValueError`` naming the learner, which the
        service answers with the backend's order (a page that listed a result twice, or one
        that does not exist, would be served and its clicks trained on)."""
        global _first_misplaced
        if _first_misplaced is None:  # (numba's import waits for the first ranking)
            from reranker.features.kernels import first_misplaced as _first_misplaced
        if type(result) is not RankResult and not isinstance(result, RankResult):
            raise ValueError(f"learner {self.name!r}: _rank returned {type(result).__name__}, "
                             f"not a RankResult")
        ranking = result.ranking
        if type(ranking) is not np.ndarray or ranking.dtype != np.intp:
            ranking = np.asarray(ranking)
            if ranking.dtype.kind not in "iu":
                raise ValueError(f"learner {self.name!r}: the ranking must hold the {n} "
                                 f"candidates' indices as integers, got {ranking.dtype}")
            ranking = ranking.astype(np.intp)
        if ranking.shape != (n,):
            raise ValueError(f"learner {self.name!r}: the ranking must hold the {n} "
                             f"candidates' indices, got shape {ranking.shape}")
        position = _first_misplaced(ranking, n)
        if position >= 0:
            raise ValueError(f"learner {self.name!r}: the ranking is not a permutation of the "
                             f"{n} candidates: position {position} holds "
                             f"{int(ranking[position])}, out of range or seen before")
        result.ranking = ranking
        result.scores = self._checked_array(result.scores, "scores", n)
        result.propensities = self._checked_array(result.propensities, "propensities", n)
        shown = result.shown_propensities
        if shown is not None:
            if type(shown) is not np.ndarray or shown.dtype != np.float64:
                shown = np.asarray(shown, dtype=np.float64)
            if shown.ndim != 1 or shown.shape[0] > n_shown:
                raise ValueError(f"learner {self.name!r}: shown_propensities must hold at "
                                 f"most one chance per shown position ({n_shown}), got shape "
                                 f"{shown.shape}")
            result.shown_propensities = shown
        return result

    def _checked_array(self, values: Any, what: str, n: int) -> np.ndarray | None:
        if values is None:
            return None
        if type(values) is not np.ndarray or values.dtype != np.float64:
            values = np.asarray(values, dtype=np.float64)
        if values.shape != (n,):
            raise ValueError(f"learner {self.name!r}: {what} must hold one number per "
                             f"candidate ({n}), got shape {values.shape}")
        return values

    def _log_chances(self, X: np.ndarray, n_shown: int, result: RankResult) -> None:
        """Fill in what a stochastic policy's impression logs and ``_rank`` left out: the
        shown list's probability (:meth:`log_probability`), each candidate's chance of being
        shown and each shown result's chance at its position (from
        :meth:`position_marginals`, or :meth:`marginals`). :meth:`rank_validated` (the offline
        simulator's) does without them."""
        if result.log_prob is None:
            result.log_prob = self.log_probability(X, result.ranking[:n_shown])
        if result.shown_propensities is None:
            at = self.position_marginals(X, n_shown)
            if at is not None:
                k = at.shape[1]
                result.shown_propensities = at[result.ranking[:k], np.arange(k)]
                if result.propensities is None:
                    result.propensities = np.clip(at.sum(axis=1), 0.0, 1.0)
        if result.propensities is None:
            result.propensities = self.marginals(X, n_shown)

    def update(self, X: np.ndarray, feedback: Feedback) -> bool:
        """Learn from the feedback on one impression (each feedback of its chain,
        :meth:`Feedback.chain`, in turn); return True if the model changed."""
        X = self.check_features(X)
        n = X.shape[0]
        for part in feedback.chain():
            if len(part.ranking) != n or len(part.improved) != n:
                raise ValueError(f"feedback ranks {len(part.ranking)} candidates but the "
                                 f"features describe {n}")
        return self.update_validated(X, feedback)

    def _learn(self, X: np.ndarray, feedback: Feedback) -> bool:
        """:meth:`_update` on validated input, with whatever bookkeeping the base class
        keeps around it (:meth:`update` and :meth:`update_validated` call it)."""
        return self._update(X, feedback)

    # -- the same on input the caller has validated, for tight loops ----------------------

    def rank_validated(self, X: np.ndarray, n_shown: int,
                       rng: np.random.Generator | None) -> RankResult:
        """The learner's own ranking of features the caller has validated: a 2-D array of
        finite numbers with the model's feature count (:meth:`check_features` returns one),
        and ``0 <= n_shown <= len(X)``; ``rng`` must be set for a stochastic learner. It
        does none of :meth:`rank`'s work around the ranking: no check of the input or of the
        result, and a stochastic policy's probabilities stay as its ranking rule gives them
        (what :meth:`rank` adds for the impression's log, from :meth:`log_probability` and
        the marginals, costs more than the ranking). It draws the same random numbers as
        :meth:`rank`. For loops over data checked once (the offline simulator)."""
        return self._rank(X, n_shown, rng)

    def update_validated(self, X: np.ndarray, feedback: Feedback) -> bool:
        """:meth:`update` on features the caller has validated (as for
        :meth:`rank_validated`) and a feedback on all of their candidates, unchecked: each
        feedback of its chain in turn (:meth:`_update` sees one at a time)."""
        changed = False
        for part in feedback.chain():
            changed = bool(self._learn(X, part)) or changed
        return changed

    def first_log_probabilities_validated(self, X: np.ndarray) -> np.ndarray:
        """:meth:`first_log_probabilities` of features the caller has validated (as for
        :meth:`rank_validated`), unchecked."""
        return self._first_log_probabilities(X)

    @abstractmethod
    def _initialize(self, n_features: int) -> None:
        """Set the initial learned state."""

    @abstractmethod
    def _rank(self, X: np.ndarray, n_shown: int,
              rng: np.random.Generator | None) -> RankResult:
        """Rank validated features (``rng`` is set for stochastic learners)."""

    @abstractmethod
    def _update(self, X: np.ndarray, feedback: Feedback) -> bool:
        """Apply one feedback; return True if the learned state changed."""

    def grow(self, n_features: int, feature_names: list[str] | None = None,
             prior: np.ndarray | None = None) -> None:
        """Extend the model to ``n_features`` features, the new ones appended after the old
        (a new feature in the config, or a growing item library). Learners without
        ``capabilities.supports_growth`` refuse with a ``ValueError``."""
        if not self.capabilities.supports_growth:
            raise ValueError(f"learner {self.name!r} does not support a growing feature set "
                             f"(it was trained on {self.n_features_in_} features, now "
                             f"{n_features}); start a new model for it")
        old = self.n_features_in_
        if n_features < old:
            raise ValueError(f"learner {self.name!r} cannot shrink from {old} to {n_features} "
                             f"features")
        self._grow(n_features)
        self._grow_prior(old, n_features, prior)
        self.n_features_in_ = int(n_features)
        if feature_names is not None:
            self.feature_names_in_ = list(feature_names)
        elif self.feature_names_in_ is not None:
            self.feature_names_in_ = self.feature_names_in_ + [
                f"feature_{i}" for i in range(old, n_features)]

    def _grow(self, n_features: int) -> None:
        """Extend the learned state for new trailing features (learners with growth)."""
        raise NotImplementedError

    def carry_over(self, old: Learner, source: Sequence[int]) -> None:
        """Take ``old``'s learned state onto this learner's features (a configuration that
        changed its feature set, docs/algorithms.md, "Models across feature sets"). ``self``
        is freshly initialised for the new features; ``source[i]`` is the column of ``old``
        that new feature ``i`` was, or -1 for a feature ``old`` never had, which keeps its
        initial state (a zero weight, as :meth:`grow` gives it). A dropped feature's weight
        is dropped with it.

        The default copies every learned array along the axes as long as ``old``'s feature
        count, and every learned number, which is right for state kept per feature (weight
        vectors, per-feature statistics, feature-by-feature matrices); a learner whose state
        has another shape overrides it. Learners without ``capabilities.supports_growth``
        refuse with a ``ValueError``."""
        if not self.capabilities.supports_growth or not isinstance(old, type(self)):
            raise ValueError(f"learner {old.name!r} cannot carry its learned state onto "
                             f"another feature set")
        source = np.asarray(source, dtype=np.intp)
        n_old, n_new = old.n_features_in_, self.n_features_in_
        if source.shape != (n_new,) or np.any(source >= n_old) or np.any(source < -1):
            raise ValueError(f"source must give, for each of the {n_new} features, a column "
                             f"of the old {n_old} or -1")
        kept = np.flatnonzero(source >= 0)
        fresh = self.get_state()
        for key, value in old.get_state().items():
            if key in ("n_features_in_", "feature_names_in_") or key not in fresh:
                continue
            if not isinstance(value, np.ndarray):
                setattr(self, key, value)
                continue
            axes = {axis for axis, size in enumerate(value.shape) if size == n_old}
            target = fresh[key].copy()
            if not axes and target.shape == value.shape:
                target = value.copy()
            elif all((target.shape[a] == n_new) if a in axes else
                     (target.shape[a] == value.shape[a]) for a in range(value.ndim)):
                into = np.ix_(*[kept if a in axes else np.arange(value.shape[a])
                                for a in range(value.ndim)])
                out_of = np.ix_(*[source[kept] if a in axes else np.arange(value.shape[a])
                                  for a in range(value.ndim)])
                target[into] = value[out_of]
            setattr(self, key, target)

    def _grow_prior(self, old: int, n_features: int,  # noqa: B027 -- optional
                    prior: np.ndarray | None) -> None:
        """Extend the starting ranking for new trailing features (learners with one)."""

    # -- the probabilities of the policy (the one place that knows them) -------------------

    def log_probability(self, X: np.ndarray, top: np.ndarray) -> float:
        """Log-probability that the learner presents ``top`` (candidate indices) as the first
        ``len(top)`` results for these features, with its current model (``n_shown`` =
        ``len(top)``). A deterministic learner: 0 for its own top, ``-inf`` for any other;
        stochastic learners override it."""
        if self.capabilities.stochastic:
            raise NotImplementedError(f"learner {self.name!r} is stochastic and does not say "
                                      f"the probability of its rankings")
        X = self.check_features(X)
        top = np.asarray(top, dtype=np.intp)
        shown = self._rank(X, len(top), None).ranking[: len(top)]
        return 0.0 if np.array_equal(shown, top) else -math.inf

    def first_log_probabilities(self, X: np.ndarray) -> np.ndarray:
        """``log P(candidate i is shown first)`` for every candidate (the KL cost of
        Delage's evaluation reads it)."""
        return self._first_log_probabilities(self.check_features(X))

    def _first_log_probabilities(self, X: np.ndarray) -> np.ndarray:
        """:meth:`first_log_probabilities` of validated features; by default from
        :meth:`log_probability` of every one-result list (learners override it with a closed
        form)."""
        if not self.capabilities.stochastic:  # all the mass on its own first
            out = np.full(X.shape[0], -math.inf)
            if X.shape[0]:
                out[self._rank(X, 1, None).ranking[0]] = 0.0
            return out
        return np.array([self.log_probability(X, np.array([i])) for i in range(X.shape[0])])

    def marginals(self, X: np.ndarray, n_shown: int) -> np.ndarray | None:
        """The probability of each candidate to be among the first ``n_shown`` (its
        propensity of being shown), or None where the learner cannot say it exactly. A
        deterministic learner: 1 for its top ``n_shown``, 0 for the rest."""
        if self.capabilities.stochastic:
            return None
        X = self.check_features(X)
        out = np.zeros(X.shape[0])
        out[self._rank(X, n_shown, None).ranking[:n_shown]] = 1.0
        return out

    def position_marginals(self, X: np.ndarray, n_shown: int) -> np.ndarray | None:
        """``P[i, r]``: the probability that candidate ``i`` is shown at position ``r``
        (``r < n_shown``), the propensity an off-policy estimate of a per-position click
        metric divides by; None where the learner cannot say it exactly. A deterministic
        learner: 1 where its ranking puts each of its top ``n_shown``."""
        if self.capabilities.stochastic:
            return None
        X = self.check_features(X)
        k = min(int(n_shown), X.shape[0])
        out = np.zeros((X.shape[0], k))
        out[self._rank(X, k, None).ranking[:k], np.arange(k)] = 1.0
        return out

    @classmethod
    def describe(cls) -> str:
        return cls.description


def _old_flags(cls: type[Learner]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The capabilities ``cls`` still sets as class variables (in its body, or through a mixin
    that is not a learner), as the plugins written before :attr:`Learner.capabilities` did:
    their values, and the names of those it sets as properties. Both are deprecated, with a
    warning that says what to write instead."""
    values: dict[str, Any] = {}
    properties: list[str] = []
    parents = [klass for klass in cls.__mro__[1:] if issubclass(klass, Learner)]
    for name in NAMES:
        owner = next(klass for klass in cls.__mro__ if name in klass.__dict__)
        if owner is not cls and any(owner in parent.__mro__ for parent in parents):
            continue  # the base class's reading, or a parent that was told already
        value = owner.__dict__[name]
        if hasattr(value, "__get__"):
            properties.append(name)
        else:
            values[name] = value
    if values:
        changes = ", ".join(f"{key}={value!r}" for key, value in values.items())
        warnings.warn(f"learner class {cls.__qualname__} sets {', '.join(values)} as class "
                      f"variables, which are deprecated: declare capabilities = "
                      f"dataclasses.replace({parents[0].__name__}.capabilities, {changes}) "
                      f"(reranker.learners.capabilities) instead", DeprecationWarning,
                      stacklevel=4)
    if properties:
        warnings.warn(f"learner class {cls.__qualname__} defines {', '.join(properties)} as "
                      f"properties, which are deprecated: override current_capabilities() to "
                      f"return super().current_capabilities().with_("
                      f"{', '.join(f'{name}=...' for name in properties)}) instead",
                      DeprecationWarning, stacklevel=4)
    return values, tuple(properties)


def prior_steps_param(default: float) -> Param:
    """The ``prior_steps`` parameter of a :class:`LinearLearner`, with its default."""
    return Param(
        "prior_steps", float, default,
        "how much the starting ranking (the search engine's order, corrected by the click "
        "features) weighs, in average learning steps of this learner: the learned weights "
        "overrule it only once they agree over about this many updates, so learning never "
        "starts by ranking worse than the engine; 0 starts from w = 0 as in the papers",
        minimum=0.0)


PRIOR_STEPS = prior_steps_param(1000.0)


class LinearLearner(Learner):
    """A learner that scores candidates with a weight vector, ``scores = X @ weights()``,
    and presents them sorted by score (``argmax_y w . phi(q, y)``); subclasses keep their
    learned weights in ``w_`` or override :meth:`learned_weights`.

    **Starting from the search engine** (docs/algorithms.md, "Safe start"). The weights
    used for ranking are the learned weights plus a fixed starting ranking, ``prior_``
    (:func:`reranker.features.extraction.engine_prior`: weight on the engine's own score and on the
    query's click lift; a saved model keeps the one it was created with, a model carried
    onto another feature set takes that set's),
    scaled to ``prior_steps`` times the learner's average step:
    ``weights() = learned_weights() + prior_steps * s * prior_`` with
    ``s = (1 + sum of step norms) / (1 + steps)``, a step being the change of the learned
    weights per informative feedback (a batch learner's held-back feedbacks count as steps of
    0). The first search is ranked in the engine's order, and the learned weights take over
    only where many of their updates agree, as a prior does for a Bayesian learner
    (BubbleRank, Li et al. 2019, keeps the same promise by starting from the production
    ranker and changing it only on evidence). Being a multiple of the learner's own step size
    makes it independent of the number and scale of the features. The papers' learners are
    ``prior_steps: 0``.
    """

    params: tuple[Param, ...] = (PRIOR_STEPS,)
    #: A subclass whose ``params`` leave ``prior_steps`` out starts from zero weights.
    prior_steps: float = 0.0
    #: Rank with each learned weight shrunk to the share the queries that taught it agree
    #: on (:mod:`reranker.learners.shrinkage`; ``learner.shrink``, set by the model
    #: factory). Only with a starting ranking (a nonzero ``prior_``): the weights shrink
    #: towards it.
    shrink: bool = True
    #: Whether the learned weights are the sum of the updates' changes, so that each query's
    #: share of them can be kept (False for a learner that refits its weights on every pair
    #: it holds, such as the ranking SVM: it is never shrunk).
    sums_updates: ClassVar[bool] = True
    _factors: tuple[tuple[int, int], np.ndarray] | None = None

    def learned_weights(self) -> np.ndarray:
        """The weights the learner has learned (``w_t`` of the papers)."""
        return self.w_

    def weights(self) -> np.ndarray:
        """The weights it ranks with: learned (shrunk, see :attr:`shrink`), plus the starting
        ranking."""
        learned = self.learned_weights()
        if self.prior_steps == 0:
            return learned
        if self.shrinks():
            learned = learned * self.shrink_factors()
        # prior_weight(), inlined: this runs on every search (a prior of zeros adds zeros)
        return learned + (self.prior_steps * (1.0 + self.step_sum_) / (1.0 + self.steps_)
                          ) * self.prior_

    def shrinks(self) -> bool:
        """Whether it ranks with its learned weights shrunk (:attr:`shrink`): with a
        starting ranking to shrink towards, learned weights that sum their updates, and a
        sketch that holds every change since the start."""
        return bool(self.shrink and self.prior_steps != 0 and self.sums_updates
                    and self.sketched_ and self.prior_.any())

    def weight_parts(self, names: Sequence[str]) -> dict[str, dict[str, float]]:
        """Per feature name: the ``learned`` weight, the queries' ``agreement`` on it (the
        shrink factor, 1 when not shrinking), the starting ranking's weight (``start``) and
        the ``total`` it ranks with, ``learned * agreement + start``."""
        learned, start, total = self.learned_weights(), self.start_weights(), self.weights()
        factors = self.shrink_factors() if self.shrinks() else np.ones_like(learned)
        return {name: {"learned": float(a), "agreement": float(f), "start": float(b),
                       "total": float(c)}
                for name, a, f, b, c in zip(names, learned, factors, start, total,
                                            strict=True)}

    def start_weights(self) -> np.ndarray:
        """The starting ranking's part of :meth:`weights`."""
        if self.prior_steps == 0:
            return np.zeros_like(self.prior_)
        return self.prior_weight() * self.prior_

    def shrink_factors(self) -> np.ndarray:
        """Per feature, the share of its learned weight the queries agree on
        (:func:`reranker.learners.shrinkage.shrink_factors`), kept until the next update."""
        key = (self.steps_, id(self.query_squares_))
        if self._factors is None or self._factors[0] != key:
            self._factors = (key, shrinkage.shrink_factors(
                self.learned_weights(), self.query_squares_,
                shrinkage.query_count(self.query_seen_)))
        return self._factors[1]

    def query_count(self) -> float:
        """How many distinct queries have taught the learned weights (estimated)."""
        return shrinkage.query_count(self.query_seen_)

    def prior_weight(self) -> float:
        """The starting ranking's current scale: ``prior_steps`` average steps."""
        return self.prior_steps * (1.0 + self.step_sum_) / (1.0 + self.steps_)

    def _start_from(self, prior: np.ndarray | None) -> None:
        n = self.n_features_in_
        self.prior_ = np.zeros(n) if prior is None or self.prior_steps == 0 \
            else np.asarray(prior, dtype=np.float64).copy()
        self.step_sum_ = 0.0  # sum of the norms of the learned weights' changes
        self.steps_ = 0  # informative feedbacks
        # each query's changes of the learned weights, sketched (reranker.learners.shrinkage)
        self.query_rows_, self.query_squares_, self.query_seen_ = shrinkage.new_sketch(n)
        self.sketched_ = 1  # the sketch holds every change since the start

    def carry_over(self, old: Learner, source: Sequence[int]) -> None:
        """As :meth:`Learner.carry_over`, but the new feature set's own starting ranking,
        when it was given one, stands: it is fixed, not learned (the engine's score and the
        click lift on the new features), where ``old``'s, mapped over, could lose the
        engine's part with a dropped feature (the engine's rank of earlier versions)."""
        prior = self.prior_.copy()
        super().carry_over(old, source)
        if prior.any():
            self.prior_ = prior
        # the sketch's rows are per query, its columns per feature (the default mapping
        # would take a row count equal to the old feature count for features)
        source = np.asarray(source, dtype=np.intp)
        kept = np.flatnonzero(source >= 0)
        self.query_rows_, self.query_squares_, _ = shrinkage.new_sketch(self.n_features_in_)
        self.query_rows_[:, kept] = old.query_rows_[:, source[kept]]
        self.query_squares_[kept] = old.query_squares_[source[kept]]
        self.query_seen_ = old.query_seen_.copy()

    def _state_defaults(self) -> dict[str, Any]:
        # A model saved before starting rankings existed started from w = 0; one saved
        # before the sketch keeps its learned weights unshrunk (sketched_ 0).
        n = getattr(self, "n_features_in_", 0)
        rows, squares, seen = shrinkage.new_sketch(n)
        return {"prior_": np.zeros(n), "step_sum_": 0.0, "steps_": 0, "query_rows_": rows,
                "query_squares_": squares, "query_seen_": seen, "sketched_": 0}

    def _grow_prior(self, old: int, n_features: int, prior: np.ndarray | None) -> None:
        extra = np.zeros(n_features - old)
        if prior is not None and self.prior_.any():
            extra = np.asarray(prior, dtype=np.float64)[old:n_features].copy()
        self.prior_ = np.concatenate([self.prior_, extra])
        self.query_rows_ = np.hstack([self.query_rows_,
                                      np.zeros((shrinkage.ROWS, n_features - old))])
        self.query_squares_ = np.concatenate([self.query_squares_, np.zeros(n_features - old)])

    def _learn(self, X: np.ndarray, feedback: Feedback) -> bool:
        if self.prior_steps == 0 or type(self).weights is not LinearLearner.weights:
            # No starting ranking to scale, or a subclass with its own weights() (the
            # interface before the starting ranking) that ranks without it: no steps to count.
            return self._update(X, feedback)
        before = self.learned_weights().copy()
        changed = self._update(X, feedback)
        if changed:  # a step per informative feedback, even one a batch holds back
            change = self.learned_weights() - before
            self.step_sum_ += float(np.linalg.norm(change))
            if self.sketched_ and self.sums_updates and change.any():
                # a feedback without its query counts as a query of its own
                shrinkage.add_change(self.query_rows_, self.query_squares_, self.query_seen_,
                           feedback.query if feedback.query is not None
                           else f"\x00{self.steps_}", change)
            self.steps_ += 1
        return changed

    def _rank(self, X: np.ndarray, n_shown: int,
              rng: np.random.Generator | None) -> RankResult:
        scores = X @ self.weights()
        return RankResult(ranking=argmax_ranking(scores), scores=scores)


def learning_rate_params(rate: float, decay: float) -> tuple[Param, Param]:
    """The ``learning_rate`` and ``learning_rate_decay`` of a :class:`GradientStepLearner`."""
    return (Param("learning_rate", float, rate, "eta, the step size", minimum=0.0,
                  exclusive_minimum=True),
            Param("learning_rate_decay", float, decay, "the learning rate is multiplied by "
                  "it after every step (the reference experiments' 0.9999977)", minimum=0.0,
                  maximum=1.0, exclusive_minimum=True))


class GradientStepLearner(LinearLearner):
    """A linear learner that moves ``w`` by ``eta * direction`` per step, ``eta`` starting at
    ``learning_rate`` and multiplied by ``learning_rate_decay`` after each step (PDGD and
    DBGD, as their reference implementation runs them). It starts from ``w = 0``."""

    capabilities = replace(LinearLearner.capabilities, supports_growth=True)
    learning_rate: float = 0.1
    learning_rate_decay: float = 1.0

    def _initialize(self, n_features: int) -> None:
        self.w_ = np.zeros(n_features)
        self.eta_ = float(self.learning_rate)
        self.n_updates_ = 0

    def _grow(self, n_features: int) -> None:
        self.w_ = np.concatenate([self.w_, np.zeros(n_features - len(self.w_))])

    def _step(self, direction: np.ndarray) -> None:
        self.w_ = self.w_ + self.eta_ * direction
        self.eta_ *= self.learning_rate_decay
        self.n_updates_ += 1


_FALLBACK_RNG: list[np.random.Generator] = []


def _fallback_rng() -> np.random.Generator:
    """A generator with fresh entropy, made once: making one per call costs more than a
    ranking."""
    if not _FALLBACK_RNG:
        _FALLBACK_RNG.append(np.random.default_rng())
    return _FALLBACK_RNG[0]


def argmax_ranking(scores: np.ndarray) -> np.ndarray:
    """``argmax_y w . phi(q, y)``: candidates sorted by score, best first
    (docs/algorithms.md, "The joint feature map"). Ties keep the backend's order, so an
    all-zero model ranks like the backend."""
    return (-scores).argsort(kind="stable")

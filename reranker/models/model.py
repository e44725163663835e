"""A ranking model: a learner with the feature set and normalisation it was trained with.

The model, not the learner, is what is saved and served: a learner's weights only mean
something together with the feature names, their normalisation and the joint feature map.
It also records how far the trainer has applied the impression log (``cursor``), so that
saving a model and advancing the cursor are one atomic step.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reranker.core.errors import ConfigError, ModelLoadError
from reranker.features.extraction import (
    FeatureSpec,
    Normalizer,
    engine_prior,
    make_normalizer,
    raw_columns,
)
from reranker.learners.base import Learner, RankResult
from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import Feedback
from reranker.learners.specialization import EvidenceGate, QueryWeight
from reranker.models.balance import QueryBalance

FORMAT = "reranker-model"
FORMAT_VERSION = 1


@dataclass
class TrainingProgress:
    """How much of which impression log a model has learned from."""

    cursor: int = 0  # highest ``closed_seq`` applied
    impressions: int = 0  # impressions applied
    clicks: int = 0  # clicks in those impressions
    updates: int = 0  # impressions that changed the model
    skipped: int = 0  # impressions passed over (other feature set, or a failed update)
    store_id: str | None = None  # the event store the cursor refers to

    COUNTERS = ("cursor", "impressions", "clicks", "updates", "skipped")

    def to_dict(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in self.COUNTERS}, "store_id": self.store_id}


@dataclass
class RankingModel:
    """A learner plus everything needed to interpret its features."""

    learner: Learner
    normalizer: Normalizer
    feature_names: tuple[str, ...]
    version: int = 0
    progress: TrainingProgress = field(default_factory=TrainingProgress)
    #: How this version came to be when not by training (``reranker models rollback`` and
    #: ``restart``): ``{"rollback_of": the version whose weights it took, "cursor_of": the
    #: version whose training cursor}``, or ``{"restart_after": the newest version then}``;
    #: None for a trained version (the trainer saves its next one without it).
    origin: dict[str, int] | None = None
    #: Which pages the trainer learns from so that the queries weigh alike
    #: (:mod:`reranker.models.balance`; ``learner.query_balance``).
    balance: QueryBalance = field(default_factory=QueryBalance)
    #: How far a query's own clicks count on its specialised pages, learned from their duels
    #: (:class:`reranker.learners.specialization.QueryWeight`).
    query_weight: QueryWeight = field(default_factory=QueryWeight)
    #: How strong a query's own evidence must be to specialise its pages, learned from
    #: duels (:class:`reranker.learners.specialization.EvidenceGate`).
    evidence_gate: EvidenceGate = field(default_factory=EvidenceGate)

    def __post_init__(self) -> None:
        # The columns normalisation leaves raw (the click features), as a mask.
        self._keep = np.zeros(len(self.feature_names), dtype=np.bool_)
        self._keep[raw_columns(self.feature_names)] = True

    @property
    def learner_name(self) -> str:
        return self.learner.name

    def normalize(self, X_raw: np.ndarray) -> np.ndarray:
        """This model's normalisation of raw features; the click features stay raw."""
        return self.normalizer.transform(X_raw, self._keep)

    def rank(self, X_raw: np.ndarray, n_shown: int,
             rng: np.random.Generator | None = None, *, check: bool = True) -> RankResult:
        """Rank raw features (normalised with this model's normalisation). ``check=False``:
        ``X_raw`` is finite, as :meth:`reranker.features.extraction.FeatureSpec.build` makes it, and
        the learner skips scanning it again (:meth:`reranker.learners.base.Learner.rank`)."""
        return self.learner.rank(self.normalize(X_raw), n_shown, rng, check=check)

    def learn(self, X_raw: np.ndarray, feedback: Feedback) -> bool:
        """Update normalisation statistics and the learner from one impression (each
        feedback of its chain in turn: :meth:`reranker.learners.base.Learner.update`). Raises
        ``ValueError`` (and may leave the model half updated: see :meth:`snapshot`) when the
        update produces non-finite state."""
        self.normalizer.partial_fit(X_raw)
        changed = self.learner.update(self.normalize(X_raw), feedback)
        for key, value in vars(self.learner).items():  # the learned state, without copies
            if key.endswith("_") and isinstance(value, np.ndarray) and value.dtype.kind == "f" \
                    and not np.all(np.isfinite(value)):
                raise ValueError(f"the update made learner state {key!r} non-finite")
        return changed

    def snapshot(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Copies of the learned and normalisation state, for :meth:`restore`."""
        return self.learner.get_state(), self.normalizer.get_state()

    def restore(self, snapshot: tuple[dict[str, Any], dict[str, Any]]) -> None:
        self.learner.set_state(snapshot[0])
        self.normalizer.set_state(snapshot[1], len(self.feature_names))

    # -- serialisation ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        state = state_for_file(self.learner)
        payload = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "version": self.version,
            "learner": {"name": self.learner.name, "params": self.learner.get_params()},
            "feature_map": self.learner.feature_map.to_dict(),
            "features": {"names": list(self.feature_names),
                         "normalization": {"method": self.normalizer.method,
                                           "state": self.normalizer.get_state()}},
            "training": self.progress.to_dict(),
            "state": state,
            "query_balance": self.balance.to_dict(),
            "query_weight": self.query_weight.to_dict(),
            "evidence_gate": self.evidence_gate.to_dict(),
        }
        if self.origin:
            payload["origin"] = dict(self.origin)
        try:
            payload["checksum"] = checksum(payload)
        except (TypeError, ValueError):  # name what a model file cannot hold
            for key, value in state.items():
                check_saveable(self.learner.name, key, value)
            raise
        return payload


#: What a learner's learned state may hold, as a model file keeps it (JSON).
SAVEABLE = ("numbers, strings, booleans, None, numpy arrays of numbers, and lists or dicts "
            "of numbers and strings (no NaN or infinity)")


def state_for_file(learner: Learner) -> dict[str, Any]:
    """The learner's learned state as a model file holds it: numpy arrays as lists, numpy
    scalars as numbers (:data:`SAVEABLE`)."""
    return {k: (v.tolist() if isinstance(v, np.ndarray) else _scalar(v))
            for k, v in learner.get_state().items()}


def check_saveable(learner_name: str, key: str, value: Any) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"learner {learner_name!r}: its learned state {key!r} cannot be "
                         f"saved in a model file ({exc}); learned state holds "
                         f"{SAVEABLE}") from None


def _scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value


def checksum(payload: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of everything but the checksum itself."""
    body = {k: v for k, v in payload.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


class ModelFactory:
    """Builds fresh models and checks saved ones against the configured learner, features,
    normalisation and feature map."""

    def __init__(self, learner_cls: type[Learner], params: dict[str, Any],
                 feature_map: FeatureMap, feature_names: list[str], normalization: str,
                 prior: np.ndarray | None = None, shrink: bool = True):
        self.learner_cls = learner_cls
        #: ``learner.shrink``: linear learners rank with their learned weights shrunk to
        #: what the queries agree on (:mod:`reranker.learners.shrinkage`)
        self.shrink = shrink
        self.params = dict(params)
        self.feature_map = feature_map
        self.feature_names = tuple(feature_names)
        self.normalization = normalization
        #: The starting ranking (docs/algorithms.md, "Safe start"), or None.
        self.prior = engine_prior(self.feature_names) if prior is None else prior
        learner = self.new_learner()
        learner.validate_params()  # a bad parameter fails at start-up
        #: The learner's parameters with the defaults filled in: a saved model must match.
        self.effective_params = learner.get_params()

    @classmethod
    def from_config(cls, config, pm) -> ModelFactory:
        """The factory of the configured learner, features, normalisation and feature map;
        an unknown learner or a bad parameter is a :class:`ConfigError` naming it."""
        from reranker.core.plugins import learner_class

        learner_cls = learner_class(pm, config.learner.name)
        try:
            return cls(learner_cls, dict(config.learner.params),
                       FeatureMap(config.learner.depth, config.learner.discount),
                       FeatureSpec.from_config(config).names, config.features.normalization,
                       shrink=config.learner.shrink)
        except ValueError as exc:
            where = f"{config.source}: " if config.source else ""
            raise ConfigError(f"{where}learner.params: {exc}") from exc

    def new_learner(self) -> Learner:
        learner = self.learner_cls(feature_map=self.feature_map, **self.params)
        if hasattr(learner, "shrink"):
            learner.shrink = self.shrink
        return learner

    def new(self) -> RankingModel:
        """Version 0: the learner's initial model (``w_1`` of the papers)."""
        learner = self.new_learner()
        learner.initialize(len(self.feature_names), list(self.feature_names), self.prior)
        return RankingModel(learner=learner, normalizer=make_normalizer(self.normalization),
                            feature_names=self.feature_names)

    def carry_over(self, old: RankingModel) -> RankingModel:
        """A new model of this factory's features that starts from ``old``'s learned state on
        the features both have (docs/algorithms.md, "Models across feature sets"); the
        features ``old`` lacks start as a new model's do. Raise ``ValueError`` saying why
        when it cannot."""
        if old.learner_name != self.learner_cls.name:
            raise ValueError(f"it was trained by learner {old.learner_name!r}")
        if self.normalization == "zscore":
            raise ValueError("zscore normalisation keeps statistics per feature, which the "
                             "new features lack")
        model = self.new()
        source = [old.feature_names.index(name) if name in old.feature_names else -1
                  for name in self.feature_names]
        if all(index < 0 for index in source):
            raise ValueError("the two feature sets share no feature")
        model.learner.carry_over(old.learner, source)
        return model

    def from_dict(self, data: Any, source: str) -> RankingModel:
        """Rebuild a saved model; raise :class:`ModelLoadError` naming ``source`` and the
        problem when it is corrupt or does not fit the configuration."""
        def fail(problem: str) -> ModelLoadError:
            return ModelLoadError(f"model {source} is refused: {problem}")

        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise fail(f"not a {FORMAT} file")
        if data.get("format_version") != FORMAT_VERSION:
            raise fail(f"format version {data.get('format_version')!r} is not "
                       f"{FORMAT_VERSION}")
        try:
            if data.get("checksum") != checksum(data):
                raise fail("checksum mismatch (the file is corrupt or was edited)")
            return self._rebuild(data, fail)
        except ModelLoadError:
            raise
        except Exception as exc:  # any malformed structure is a refused model, never a crash
            raise fail(f"malformed content ({type(exc).__name__}: {exc})") from None

    def _rebuild(self, data: dict, fail) -> RankingModel:
        try:
            learner_name = data["learner"]["name"]
            names = tuple(data["features"]["names"])
            norm = data["features"]["normalization"]
            fmap = data["feature_map"]
            training = data["training"]
            version = data["version"]
            state = data["state"]
        except (KeyError, TypeError) as exc:
            raise fail(f"missing entry {exc}") from None
        if learner_name != self.learner_cls.name:
            raise fail(f"it was trained by learner {learner_name!r}, the config asks for "
                       f"{self.learner_cls.name!r}")
        saved_params = data["learner"].get("params") or {}
        differ = sorted(k for k, v in saved_params.items()
                        if k in self.effective_params and v != self.effective_params[k])
        if differ:  # (a parameter the saved model lacks is one added since: its default)
            raise fail(f"it was trained with learner parameter {differ[0]} = "
                       f"{saved_params[differ[0]]!r}, the config asks for "
                       f"{self.effective_params[differ[0]]!r}")
        if not isinstance(norm, dict) or not isinstance(state, dict) \
                or not isinstance(training, dict):
            raise fail("sections 'features.normalization', 'state' and 'training' must be "
                       "objects")
        grows = False
        if names != self.feature_names:
            appended = (len(names) < len(self.feature_names)
                        and self.feature_names[: len(names)] == names)
            if not appended:
                raise fail(f"it was trained on other features than the config gives "
                           f"({feature_change(names, self.feature_names)})")
            if not self.learner_cls.capabilities.supports_growth:
                raise fail(f"the config adds features {list(self.feature_names[len(names):])} "
                           f"and learner {self.learner_cls.name!r} does not support new "
                           f"features; start a new model for it")
            if self.normalization == "zscore":
                raise fail("the config adds features, and zscore normalisation keeps "
                           "statistics per feature that the new ones lack; use "
                           "per_query_minmax or start a new model")
            grows = True
        if norm.get("method") != self.normalization:
            raise fail(f"it was trained with normalisation {norm.get('method')!r}, the config "
                       f"asks for {self.normalization!r}")
        if fmap != self.feature_map.to_dict():
            raise fail(f"it was trained with feature map {fmap}, the config asks for "
                       f"{self.feature_map.to_dict()}")
        learner = self.new_learner()
        normalizer = make_normalizer(self.normalization)
        try:
            learner.set_state(state)
            normalizer.set_state(norm.get("state") or {}, len(names))
            if grows:  # new features start with zero weight (Delage, section 4)
                learner.grow(len(self.feature_names), list(self.feature_names), self.prior)
            progress = TrainingProgress(**{k: int(training.get(k, 0))
                                           for k in TrainingProgress.COUNTERS},
                                        store_id=training.get("store_id"))
            version = int(version)
            # (a model saved before the balance starts counting now)
            balance = QueryBalance.from_dict(data["query_balance"]) \
                if "query_balance" in data else QueryBalance()
            query_weight = QueryWeight.from_dict(data["query_weight"]) \
                if "query_weight" in data else QueryWeight()
            evidence_gate = EvidenceGate.from_dict(data["evidence_gate"]) \
                if "evidence_gate" in data else EvidenceGate()
        except (ValueError, TypeError, KeyError) as exc:
            raise fail(str(exc)) from None
        origin = data.get("origin")
        if origin is not None and (not isinstance(origin, dict) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                for k, v in origin.items())):
            raise fail(f"section 'origin' must map names to version numbers, got {origin!r}")
        return RankingModel(learner=learner, normalizer=normalizer,
                            feature_names=self.feature_names, version=version, progress=progress,
                            origin=origin, balance=balance, query_weight=query_weight,
                            evidence_gate=evidence_gate)


def feature_change(old: tuple[str, ...] | list[str], new: tuple[str, ...] | list[str]) -> str:
    """What changed from feature set ``old`` to ``new``, in a few words: ``adds x, y; drops
    z`` (or ``reorders them``)."""
    added = [name for name in new if name not in old]
    dropped = [name for name in old if name not in new]
    parts = ([f"adds {', '.join(added)}"] if added else []) + \
        ([f"drops {', '.join(dropped)}"] if dropped else [])
    return "; ".join(parts) or "reorders them"

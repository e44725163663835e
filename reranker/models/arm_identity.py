"""What an arm is: its settings (:class:`ArmSpec`), read from a learner section of the
configuration (:func:`arm_section`, :func:`build_arm`), and its names (:class:`ArmIdentity`).

An arm's identity is its learner's name plus a stable hash of its settings (the learner's
parameters with their defaults filled in, the joint feature map, the normalisation, the
feature set): ``preference_perceptron-3f9c0a1b2e``. Each arm keeps its model versions in its
own folder, ``<store.models>/<arm id>/``, with an ``arm.json`` that says what the arm is, so
two configurations that differ only in a learner parameter or a feature never share a model,
and a saved model is refused by an arm with other settings
(:meth:`reranker.models.model.ModelFactory.from_dict`).

A configuration without an ``experiment:`` section has one arm, its ``learner:`` section;
an experiment has one arm per entry of ``experiment.arms``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reranker.core.errors import ConfigError, ModelLoadError, StoreError
from reranker.core.suggest import did_you_mean
from reranker.features.extraction import FeatureSpec
from reranker.learners.featuremap import FeatureMap
from reranker.learners.specialization import CONFIDENCE, general_features, specializes
from reranker.models.model import ModelFactory

ARM_FILE = "arm.json"
#: Keys an arm's section takes, as the ``learner:`` section does.
ARM_KEYS = ("name", "params", "depth", "discount", "seed", "specialize", "confidence", "shrink",
            "query_balance")
#: The keys an arm's section takes from the ``learner:`` section when it leaves them out.
ARM_DEFAULTS = ("depth", "discount", "seed", "specialize", "confidence", "shrink",
                "query_balance")


@dataclass(frozen=True)
class ArmSpec:
    """What an arm is: a label (its name in the configuration) and its settings."""

    label: str
    learner: str
    params: Mapping[str, Any]  # with defaults filled in, as the learner validated them
    depth: int
    discount: str
    normalization: str
    features: tuple[str, ...] = ()  # the model's feature names, in order
    seed: int | None = None  # not part of the identity: it changes no model
    #: whether a query's own clicks refine its pages (:mod:`reranker.learners.specialization`); with
    #: the click features on, the model's features then leave click_lift:query_doc out, and
    #: that is what makes it part of the identity
    specialize: bool = True
    confidence: float = CONFIDENCE  # of a judgment: what the model learns from, not what it is
    #: rank with the learned weights shrunk to what the queries agree on
    #: (:mod:`reranker.learners.shrinkage`): how the model is used, not what it is
    shrink: bool = True
    #: learn from each query's pages as if the queries came equally often
    #: (:mod:`reranker.models.balance`): what the model learns from, not what it is
    query_balance: bool = True

    def settings(self) -> dict[str, Any]:
        """Everything that makes a model of this arm mean what it means."""
        return {"learner": self.learner, "params": dict(self.params),
                "feature_map": FeatureMap(self.depth, self.discount).to_dict(),
                "normalization": self.normalization, "features": list(self.features)}

    @functools.cached_property
    def id(self) -> str:
        """``<learner>-<10 hex digits of the settings' SHA-256>``, stable across runs."""
        text = json.dumps(self.settings(), sort_keys=True, separators=(",", ":"))
        return f"{self.learner}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:10]}"


def arm_section(label: str, section: Any, defaults: Mapping[str, Any], where: str
                ) -> dict[str, Any]:
    """An arm's learner section with the ``learner:`` section's :data:`ARM_DEFAULTS` as
    defaults; a typo or a wrong type is a :class:`ConfigError` naming ``where``."""
    if not isinstance(section, Mapping):
        raise ConfigError(f"{where}: must be a mapping like the learner section "
                          f"({{name: ..., params: {{...}}}}), got {section!r}")
    unknown = sorted(set(section) - set(ARM_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}"
                          f"{did_you_mean(unknown[0], ARM_KEYS)} (known: {', '.join(ARM_KEYS)})")
    merged = {"name": None, "params": {}, "specialize": True, "confidence": CONFIDENCE,
              "shrink": True, "query_balance": True,
              **{key: defaults[key] for key in ARM_DEFAULTS if key in defaults}, **section}
    if not isinstance(merged["name"], str) or not merged["name"]:
        raise ConfigError(f"{where}.name must name a learner (`reranker learners` lists them)")
    if not isinstance(merged["params"], Mapping):
        raise ConfigError(f"{where}.params must be a mapping, got {merged['params']!r}")
    depth = merged["depth"]
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ConfigError(f"{where}.depth must be an integer of at least 1, got {depth!r}")
    if merged["discount"] not in ("log2", "reciprocal", "none"):
        raise ConfigError(f"{where}.discount must be one of log2, reciprocal, none, got "
                          f"{merged['discount']!r}")
    seed = merged["seed"]
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"{where}.seed must be an integer or null, got {seed!r}")
    for key in ("specialize", "shrink", "query_balance"):
        if not isinstance(merged[key], bool):
            raise ConfigError(f"{where}.{key} must be true or false, got {merged[key]!r}")
    confidence = merged["confidence"]
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) \
            or not 0.5 <= confidence <= 0.999:
        raise ConfigError(f"{where}.confidence must be a number from 0.5 to 0.999, got "
                          f"{confidence!r}")
    return {**merged, "params": dict(merged["params"]), "confidence": float(confidence)}


def build_arm(label: str, section: Mapping[str, Any], config, pm, where: str, *,
              name_key: str | None = None, params_key: str | None = None
              ) -> tuple[ArmSpec, ModelFactory]:
    """The spec and model factory of an arm described by a learner ``section``; errors
    name ``where.name`` and ``where.params`` (or ``name_key`` and ``params_key``: the
    command-line options that gave them)."""
    from reranker.core.plugins import learner_class

    learner_cls = learner_class(pm, section["name"], name_key or where + ".name")
    names = FeatureSpec.from_config(config).names
    specialize = specializes(learner_cls, section.get("specialize", True))
    if specialize:
        names = general_features(names)  # the query's own clicks are not the model's
    try:
        factory = ModelFactory(learner_cls, dict(section["params"]),
                               FeatureMap(section["depth"], section["discount"]),
                               names, config.features.normalization,
                               shrink=section.get("shrink", True))
    except ValueError as exc:
        raise ConfigError(f"{params_key or where + '.params'}: {exc}") from exc
    learner = factory.new_learner()
    learner.validate_params()
    try:  # (a parameter checked against the features, such as backend_order's feature)
        factory.new()
    except ValueError as exc:
        raise ConfigError(f"{params_key or where + '.params'}: {exc}") from None
    spec = ArmSpec(label=label, learner=learner_cls.name, params=learner.get_params(),
                   depth=section["depth"], discount=section["discount"],
                   normalization=config.features.normalization,
                   features=factory.feature_names, seed=section["seed"],
                   specialize=specialize,
                   confidence=float(section.get("confidence", CONFIDENCE)),
                   shrink=section.get("shrink", True),
                   query_balance=section.get("query_balance", True))
    factory.arm_settings = spec.settings()
    return spec, factory


#: The keys of :meth:`ArmSpec.settings`.
ARM_SETTINGS = ("learner", "params", "feature_map", "normalization", "features")


class ArmIdentity:
    """An arm's names: its spec (id and settings), the labels the configuration gives it,
    the older names of its impressions, and the ``arm.json`` in its model store (a file of
    its folder, or a document of the database) that records them."""

    def __init__(self, spec: ArmSpec, store):
        self.spec = spec
        #: The arm's model store (:class:`reranker.models.store.ModelStore` or
        #: :class:`reranker.models.database_store.DatabaseModelStore`).
        self.store = store
        #: The labels this arm has in the configuration (two when an experiment gives two
        #: arms identical settings, as an A/A test does: they share one model).
        self.labels: list[str] = [spec.label]
        #: Older names of this arm's impressions (the learner's name, for impressions logged
        #: before arms existed, when this arm took over that learner's model folder).
        self.aliases: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        """The values of ``Impression.arm`` that are this arm's own impressions."""
        return (self.spec.id, *self.aliases)

    def settle(self) -> None:
        """Write the ``arm.json`` if the store has none yet, and read the aliases."""
        data = self.read()
        if not data:
            self.write(aliases=[])
        self.aliases = tuple(str(a) for a in data.get("aliases", []))

    def read(self) -> dict[str, Any]:
        """The arm's ``arm.json`` (empty before the store has one); :class:`ModelLoadError`
        naming it when it cannot be read."""
        where = f"{ARM_FILE} of {self.store.location}"
        try:
            text = self.store.read_text(ARM_FILE)
            if text is None:
                return {}
            data = json.loads(text)
        except StoreError as exc:
            raise ModelLoadError(f"{where} is not readable: {exc.message}") from exc
        except ValueError as exc:
            raise ModelLoadError(f"{where} is not readable: {exc}") from exc
        if not isinstance(data, dict):
            raise ModelLoadError(f"{where} is not readable: not a JSON object")
        return data

    def write(self, aliases: list[str], carried_from: dict[str, Any] | None = None) -> None:
        """Replace the ``arm.json`` (atomically): the id, the settings, the aliases and,
        for a model carried over from another feature set, where it came from."""
        extra = {"carried_from": carried_from} if carried_from else {}
        text = json.dumps({"id": self.spec.id, **self.spec.settings(), "aliases": aliases,
                           **extra}, indent=1) + "\n"
        try:
            self.store.write_text(ARM_FILE, text)
        except StoreError as exc:
            raise ModelLoadError(exc.message) from exc

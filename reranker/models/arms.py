"""Arms: a learner with its parameters and feature-map settings, and the model it serves.

An arm is one handle over parts that each do one job, so that its callers (the service, the
trainer, ``reranker models``, the experiment) need only the arm:

* what it is: its settings, id, labels and aliases, and its ``arm.json``
  (:mod:`reranker.models.arm_identity`);
* where its new folder starts from: an earlier layout's folder, or the model of another
  feature set (:mod:`reranker.models.arm_migration`);
* which version a process serves, with pins honoured or not (:mod:`reranker.models.arm_serving`);
* the operator's changes to its versions: pin, unpin, roll back, restart
  (:mod:`reranker.models.arm_versions`);
* what it learns from an impression (:mod:`reranker.models.arm_feedback`).

Where its versions and pin are kept is the model store's
(:class:`reranker.models.store.ModelStore`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from reranker.core.errors import ConfigError
from reranker.learners.feedback import Feedback
from reranker.models.arm_feedback import ArmFeedback
from reranker.models.arm_identity import (
    ARM_DEFAULTS,
    ARM_FILE,
    ARM_KEYS,
    ArmIdentity,
    ArmSpec,
    arm_section,
    build_arm,
)
from reranker.models.arm_migration import FolderMigration
from reranker.models.arm_serving import ServedModel, pinned_gone
from reranker.models.arm_versions import ArmVersions
from reranker.models.database_store import ModelDatabase, model_place
from reranker.models.model import ModelFactory, RankingModel
from reranker.models.store import MAX_MODEL_BYTES, ModelStore
from reranker.stores.events import Impression

#: Importable from here as before the arm's parts had modules of their own.
__all__ = ["ARM_DEFAULTS", "ARM_FILE", "ARM_KEYS", "Arm", "ArmSpec", "arm_section",
           "arms_from_config", "build_arm", "pinned_gone"]


class Arm:
    """An arm at run time: its spec, model factory and model store, and the parts that do
    its jobs (module docstring), each usable alone: :attr:`identity`, :attr:`migration`,
    :attr:`served`, :attr:`versions`, :attr:`learning`."""

    def __init__(self, spec: ArmSpec, factory: ModelFactory, models_root: str | os.PathLike,
                 keep: int = 20, max_bytes: int = MAX_MODEL_BYTES):
        self.spec = spec
        self.factory = factory
        self.models = models_root.store(spec.id, keep=keep, max_bytes=max_bytes) \
            if isinstance(models_root, ModelDatabase) else \
            ModelStore(models_root, spec.id, keep=keep, max_bytes=max_bytes)
        self.identity = ArmIdentity(spec, self.models)
        self.migration = FolderMigration(self.identity, factory, self.models)
        self.served = ServedModel(self.models, factory, spec.label, spec.id)
        self.versions = ArmVersions(self.models, factory, spec.label, spec.id)
        self.learning = ArmFeedback(self.identity, factory)

    @classmethod
    def from_factory(cls, factory: ModelFactory, models_root: str | os.PathLike,
                     label: str | None = None, keep: int = 20) -> Arm:
        """An arm of a model factory built directly (for embedding and tests)."""
        learner = factory.new_learner()
        learner.validate_params()
        spec = ArmSpec(label=label or learner.name, learner=learner.name,
                       params=learner.get_params(), depth=factory.feature_map.depth,
                       discount=factory.feature_map.discount,
                       normalization=factory.normalization, features=factory.feature_names)
        return cls(spec, factory, models_root, keep=keep)

    # -- what it is ------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def labels(self) -> list[str]:
        """The labels this arm has in the configuration (:attr:`ArmIdentity.labels`)."""
        return self.identity.labels

    @property
    def aliases(self) -> tuple[str, ...]:
        """Older names of this arm's impressions (:attr:`ArmIdentity.aliases`)."""
        return self.identity.aliases

    def names(self) -> tuple[str, ...]:
        """The values of ``Impression.arm`` that are this arm's own impressions."""
        return self.identity.names()

    def arm_file(self) -> dict[str, Any]:
        """The arm's ``arm.json`` (:meth:`ArmIdentity.read`)."""
        return self.identity.read()

    # -- its folder ------------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the arm's folder with its ``arm.json`` and read the aliases. A new folder
        takes over one an earlier version wrote for exactly these settings, or starts from
        the newest model of the same arm under another feature set
        (:mod:`reranker.models.arm_migration`)."""
        if not self.models.exists():
            self.migration.start()
        self.identity.settle()

    def predecessor(self) -> tuple[str, Any, dict[str, Any]] | None:
        """Where a new folder of this arm would start from
        (:meth:`FolderMigration.predecessor`)."""
        return self.migration.predecessor()

    # -- the model it serves ---------------------------------------------------------------

    def load(self) -> RankingModel:
        """Load the model to serve (:meth:`ServedModel.load`)."""
        return self.served.load()

    @property
    def model(self) -> RankingModel:
        """The model to serve, the newest the store offers (:attr:`ServedModel.model`)."""
        return self.served.model

    @property
    def pinned(self) -> int | None:
        """The version pinned when the model was last checked, or None."""
        return self.served.pinned

    @property
    def model_errors(self) -> list[str]:
        """Why this process does not serve what it should (:attr:`ServedModel.model_errors`)."""
        return self.served.model_errors

    # -- managing its versions (``reranker models``) -----------------------------------------

    def load_version(self, version: int, what: str | None = None) -> RankingModel:
        """Saved ``version`` (:meth:`ArmVersions.load_version`)."""
        return self.versions.load_version(version, what)

    def serving_version(self) -> int | None:
        """The version its services serve (:meth:`ArmVersions.serving_version`)."""
        return self.versions.serving_version()

    def pin(self, version: int) -> int | None:
        """Make every service serve ``version`` (:meth:`ArmVersions.pin`)."""
        return self.versions.pin(version)

    def unpin(self) -> int | None:
        """Serve the newest good version again (:meth:`ArmVersions.unpin`)."""
        return self.versions.unpin()

    def rollback(self, version: int | None = None
                 ) -> tuple[RankingModel, RankingModel, RankingModel]:
        """Learn on from older weights (:meth:`ArmVersions.rollback`)."""
        return self.versions.rollback(version)

    def restart(self) -> int | None:
        """Start afresh from the learner's initial model (:meth:`ArmVersions.restart`) and
        serve it in this process at once."""
        version = self.versions.restart()
        if version is not None:
            self.load()
        return version

    # -- what it learns from ---------------------------------------------------------------

    def columns(self, names: tuple[str, ...] | list[str]) -> np.ndarray | None:
        """Where the model's features are among ``names`` (:meth:`ArmFeedback.columns`)."""
        return self.learning.columns(names)

    def feedback(self, imp: Impression) -> tuple[np.ndarray, Feedback] | None:
        """What it learns from ``imp``, if anything (:meth:`ArmFeedback.feedback`)."""
        return self.learning.feedback(imp)


def arms_from_config(config, pm) -> list[Arm]:
    """The configured arms: the experiment's, or the one ``learner:`` section."""
    experiment = getattr(config, "experiment", None)
    defaults = {k: config.learner[k] for k in ARM_DEFAULTS}
    if experiment is None or experiment.mode is None:
        sections = {config.learner.name: ("learner", dict(config.learner))}
    else:
        sections = {label: (f"experiment.arms.{label}", section)
                    for label, section in experiment.arms.items()}
    where = f"{config.source}: " if config.source else ""

    def named(dotted: str) -> str:  # (the environment variable that gave it, or the file)
        origin = config.origin(dotted)
        return f"{origin}: {dotted}" if origin else dotted

    arms: dict[str, Arm] = {}
    for label, (key, section) in sections.items():
        section = arm_section(label, section, defaults, f"{where}{key}")
        keys = {} if key != "learner" else {"name_key": named("learner.name"),
                                            "params_key": named("learner.params")}
        spec, factory = build_arm(label, section, config, pm, f"{where}{key}", **keys)
        learner_cls = factory.learner_cls
        capabilities = learner_cls.capabilities
        if key != "learner" and experiment.mode != "split" and not capabilities.floor \
                and not capabilities.learns_from_mixed_lists:
            # its pages would be mixed with the others' and it would never learn
            raise ConfigError(
                f"{where}{key}: learner {learner_cls.name!r} learns only from pages it ranks "
                f"itself, and in experiment.mode {experiment.mode} every page is mixed with "
                f"the other arms' results, so this arm would never learn; compare it with "
                f"experiment.mode: split")
        if spec.id in arms:  # identical settings (an A/A test): one model serves both labels
            arms[spec.id].labels.append(label)
            continue
        arms[spec.id] = Arm(spec, factory, model_place(config.store),
                            keep=config.store.keep_models,
                            max_bytes=config.store.max_model_bytes)
    return list(arms.values())

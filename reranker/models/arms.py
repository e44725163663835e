"""Arms: a learner with its parameters and feature-map settings, and the model it serves.

An arm's identity is its learner's name plus a stable hash of its settings (the learner's
parameters with their defaults filled in, the joint feature map, the normalisation, the
feature set): ``preference_perceptron-3f9c0a1b2e``. Each arm keeps its model versions in its
own folder, ``<store.models>/<arm id>/``, with an ``arm.json`` that says what the arm is, so
two configurations that differ only in a learner parameter or a feature never share a model,
and a saved model is refused by an arm with other settings
(:meth:`reranker.models.model.ModelFactory.from_dict`).

A configuration whose feature set changed gets a new folder. Its first version carries the
newest model of the same learner and settings under the previous feature set onto the new
one, by feature name (:meth:`reranker.learners.base.Learner.carry_over`; docs/algorithms.md,
"Models across feature sets"), or, where the learner or the normalisation cannot, it starts
a new model; either way with a one-line warning. The old folder stays: the impressions
logged under the old feature set are its arm's, and train it whenever that configuration
runs again.

A configuration without an ``experiment:`` section has one arm, its ``learner:`` section;
an experiment has one arm per entry of ``experiment.arms``.

Which impressions an arm learns from (docs/algorithms.md, "Comparing learners"):

* the impressions it showed alone (``Impression.arm`` is its id);
* mixed lists (interleaving, multileaving) it took part in, when its learner's feedback
  rule is defined on a list another policy showed (``learns_from_mixed_lists`` of its
  :class:`reranker.learners.capabilities.Capabilities`): it learns from the page as
  shown, with every click, and the adjacent pairs the experiment randomised on it
  (:func:`reranker.experiments.interleaving.perturb_pairs`), which compare two results
  without position bias whichever arm contributed them;
* nothing else: never the pages of another learner, nor of itself with other settings, nor
  later pages (``from`` > 0), whose order nobody randomised.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reranker.core.errors import (
    ConfigError,
    ConflictError,
    ModelLoadError,
    NotFoundError,
    RerankerError,
    StoreError,
)
from reranker.core.suggest import did_you_mean
from reranker.features.clicks.position_bias import (
    PAIR_DEPTH,
    PAIR_OFFSET,
    SWAP_PROBABILITY_KEY,
    SWAPPED,
)
from reranker.features.extraction import FeatureSpec, feature_columns
from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import Feedback, feedback_from_clicks
from reranker.learners.specialization import (
    CONFIDENCE,
    SPECIALISED,
    general_features,
    specializes,
    taught_by,
)
from reranker.models.model import ModelFactory, RankingModel, TrainingProgress, feature_change
from reranker.models.store import MAX_MODEL_BYTES, ModelStore
from reranker.stores.events import Impression

log = logging.getLogger(__name__)

ARM_FILE = "arm.json"
#: Keys an arm's section takes, as the ``learner:`` section does.
ARM_KEYS = ("name", "params", "depth", "discount", "seed", "specialize", "confidence")
#: The keys an arm's section takes from the ``learner:`` section when it leaves them out.
ARM_DEFAULTS = ("depth", "discount", "seed", "specialize", "confidence")


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
    if not isinstance(merged["specialize"], bool):
        raise ConfigError(f"{where}.specialize must be true or false, got "
                          f"{merged['specialize']!r}")
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
                               names, config.features.normalization)
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
                   confidence=float(section.get("confidence", CONFIDENCE)))
    factory.arm_settings = spec.settings()
    return spec, factory


class Arm:
    """An arm at run time: its spec, model factory and model folder, and the newest good
    model, which it picks up from the folder as any trainer (in this process or another)
    saves versions."""

    #: Seconds between full checks of the model folder, in case two saves fell into one tick
    #: of a coarse file-system clock and left its modification time unchanged.
    FULL_CHECK_INTERVAL = 1.0

    def __init__(self, spec: ArmSpec, factory: ModelFactory, models_root: str | os.PathLike,
                 keep: int = 20, max_bytes: int = MAX_MODEL_BYTES):
        self.spec = spec
        self.factory = factory
        #: The labels this arm has in the configuration (two when an experiment gives two
        #: arms identical settings, as an A/A test does: they share one model).
        self.labels: list[str] = [spec.label]
        self.models = ModelStore(models_root, spec.id, keep=keep, max_bytes=max_bytes)
        #: Older names of this arm's impressions (the learner's name, for impressions logged
        #: before arms existed, when this arm took over that learner's model folder).
        self.aliases: tuple[str, ...] = ()
        self._model: RankingModel | None = None
        self._stamp = -1
        self._checked = 0.0
        self._tried = -1  # newest version number a reload has looked at
        self.model_errors: list[str] = []
        self._lock = threading.Lock()
        self._columns: dict[tuple[str, ...], np.ndarray | None] = {}

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

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def label(self) -> str:
        return self.spec.label

    # -- the model folder -------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the arm's folder with its ``arm.json`` and read the aliases. A new folder
        takes over one an earlier version wrote for exactly these settings, or starts from
        the newest model of the same arm under another feature set (module docstring)."""
        folder = self.models.dir
        if not folder.exists():
            self._start_folder()
        if not (folder / ARM_FILE).exists():
            self._write_arm_file(aliases=[])
        data = self.arm_file()
        self.aliases = tuple(str(a) for a in data.get("aliases", []))

    def arm_file(self) -> dict[str, Any]:
        """The arm's ``arm.json`` (empty before the folder exists); :class:`ModelLoadError`
        naming it when it cannot be read."""
        path = self.models.dir / ARM_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{path} is not readable: {exc}") from exc
        if not isinstance(data, dict):
            raise ModelLoadError(f"{path} is not readable: not a JSON object")
        return data

    def _start_folder(self) -> None:
        """Start the arm's folder as :meth:`predecessor` says."""
        found = self.predecessor()
        if found is None:
            return
        how, other, settings = found
        if how == "take over":
            self._take_over(other)
        else:
            self._carry_from(other, settings)

    def predecessor(self) -> tuple[str, Path, dict[str, Any]] | None:
        """Where a new folder of this arm starts from, among the other folders in
        ``store.models`` (read only): ``("take over", folder, settings)`` for a folder an
        earlier version wrote for exactly these settings (``<learner>/`` before arms, an id
        without the feature set before feature sets had their own folders), which is renamed
        to this arm's id, its impressions counting as this arm's; else ``("carry", folder,
        settings)`` for the folder with the newest model of the same learner and settings
        under another feature set, carried onto these features as this arm's first version
        with a one-line warning; else None."""
        mine = self.spec.settings()
        others: list[tuple[float, Path, dict[str, Any]]] = []
        for other, settings, legacy in _sibling_folders(self.models.dir.parent,
                                                        self.spec.learner):
            if settings is None:  # it may be this arm's: starting afresh would strand it
                _, errors = ModelStore(other.parent, other.name).load_latest(self.factory)
                raise ModelLoadError(f"no saved model of learner {self.spec.learner!r} loads: "
                                     f"{'; '.join(errors)}; move {other} away to start a new "
                                     f"model")
            if {**settings, "features": mine["features"]} != mine:
                if legacy and other.name == self.spec.learner:  # (a folder from before arms)
                    log.warning("the models in %s were trained with other settings than arm "
                                "%r; it starts a new model in %s", other, self.label,
                                self.models.dir)
                continue
            if settings["features"] == mine["features"]:
                if legacy:  # an earlier version's folder of this very arm
                    return "take over", other, settings
                continue
            store = ModelStore(other.parent, other.name)
            saved = max((store.saved_at(v) or 0.0 for v in store.versions()), default=None)
            if saved is not None:
                others.append((saved, other, settings))
        if not others:
            return None
        _, other, settings = max(others, key=lambda entry: entry[0])
        return "carry", other, settings

    def _take_over(self, other: Path) -> None:
        folder = self.models.dir
        try:
            old = json.loads((other / ARM_FILE).read_text(encoding="utf-8"))
            aliases = [other.name, *old.get("aliases", [])]
        except (OSError, ValueError, AttributeError):  # (a folder from before arms)
            aliases = [other.name]
        try:
            os.rename(other, folder)
        except OSError as exc:
            log.warning("could not take over %s: %s", other, exc)
            return
        log.warning("model folder %s is now %s (arm %s)", other, folder, self.id)
        self._write_arm_file(aliases=aliases)

    def _carry_from(self, other: Path, settings: dict[str, Any]) -> None:
        """Start this arm from the newest good model in ``other`` (the same arm under feature
        set ``settings["features"]``), or from a new model when it cannot be carried over."""
        factory = ModelFactory(self.factory.learner_cls, dict(self.factory.params),
                               self.factory.feature_map, settings["features"],
                               self.factory.normalization)
        change = feature_change(settings["features"], self.spec.features)
        kept = (f"; the models of the old feature set stay in {other.name} and serve again "
                f"if the configuration goes back")
        old, _ = ModelStore(other.parent, other.name).load_latest(factory)
        try:
            if old is None:
                raise ValueError(f"no model in {other} loads")
            model = self.factory.carry_over(old)
        except ValueError as exc:
            log.warning("arm %r: the feature set changed (%s): a new model starts in %s, "
                        "since %s%s", self.label, change, self.id, exc, kept)
            return
        with self.models.lock():
            if self.models.versions():  # another process carried it meanwhile
                return
            model.version = self.models.next_version()
            self._write_arm_file(aliases=[], carried_from={
                "arm": other.name, "version": old.version, "change": change})
            self.models.save(model)
        shared = sum(name in old.feature_names for name in self.spec.features)
        log.warning("arm %r: the feature set changed (%s): its new model %s starts from the "
                    "weights of version %d on the %d features both share%s", self.label,
                    change, self.id, old.version, shared, kept)

    def _write_arm_file(self, aliases: list[str],
                        carried_from: dict[str, Any] | None = None) -> None:
        folder = self.models.dir
        extra = {"carried_from": carried_from} if carried_from else {}
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{ARM_FILE}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps({"id": self.id, **self.spec.settings(),
                                       "aliases": aliases, **extra}, indent=1) + "\n",
                           encoding="utf-8")
            os.replace(tmp, folder / ARM_FILE)
        except OSError as exc:
            raise ModelLoadError(f"store.models: cannot write {folder / ARM_FILE}: {exc}") \
                from exc

    def load(self) -> RankingModel:
        """Load the model to serve: the pinned version when one is pinned, else the newest
        good one (a fresh one when there is none; raise when saved versions exist and none
        loads). A pin that cannot be honoured (its version does not load, or the pin file
        holds no version) does not stop the start: the newest good version serves, and
        :attr:`model_errors` says why."""
        stamp = self.models.stamp()
        pinned, problem = self._read_pin()
        model = None
        if pinned is not None:
            try:
                model, errors = self.models.load(pinned, self.factory), []
            except ModelLoadError as exc:
                problem = f"pinned version {pinned} does not load: {exc.message}"
        if model is None:
            model, errors = self.models.load_latest(self.factory)
        if model is None:
            if errors:
                raise ModelLoadError(f"no saved model of arm {self.label!r} ({self.id}) "
                                     f"loads: " + "; ".join(errors))
            model = self.factory.new()
        self._model, self._stamp, self.model_errors = model, stamp, errors
        self._pinned, self._pin_problem = pinned, problem
        if problem is not None:
            self.model_errors = [self._unhonoured(problem), *errors]
            log.error("%s", self.model_errors[0])
        self._checked = time.monotonic()
        return model

    def _read_pin(self) -> tuple[int | None, str | None]:
        """The pinned version (None when none is), and the problem of a pin file that holds
        no version number (then no version is pinned)."""
        try:
            return self.models.pinned(), None
        except StoreError as exc:
            return None, exc.message

    def _unhonoured(self, problem: str) -> str:
        return (f"arm {self.label!r} ({self.id}): the pin cannot be honoured: {problem}; "
                f"serving the newest good version, {self._model.version}, instead: pin a "
                f"version that loads (`reranker models pin VERSION`) or serve the newest "
                f"(`reranker models unpin`)")

    def _serve_newest(self, problem: str) -> None:
        """A pin that cannot be honoured: serve the newest good version, and say why."""
        model, errors = self.models.load_latest(self.factory)
        if model is not None:
            self._model = model
        message = self._unhonoured(problem)
        if not self.model_errors or self.model_errors[0] != message:  # (said once)
            log.error("%s", message)
        self.model_errors = [message, *errors]

    @property
    def model(self) -> RankingModel:
        """The model to serve: the pinned version while one is pinned, else the newest good
        one. Checks the model folder for new versions and pin changes (one stat per request,
        and a full check every :attr:`FULL_CHECK_INTERVAL` seconds); a version that fails to
        load is reported and the current one kept."""
        stamp = self.models.stamp()
        now = time.monotonic()
        if stamp != self._stamp or now - self._checked > self.FULL_CHECK_INTERVAL:
            with self._lock:
                self._checked = now
                try:
                    self._refresh(changed=stamp != self._stamp)
                except RerankerError as exc:  # an unreadable folder or pin: keep serving
                    log.error("%s", exc.message)
                    self.model_errors = [exc.message]
                self._stamp = stamp
        return self._model

    #: The pinned version as last read from the pin file (None: not pinned).
    _pinned: int | None = None
    #: Why the pin cannot be honoured (its version does not load, or the pin file holds no
    #: version), while it cannot.
    _pin_problem: str | None = None

    @property
    def pinned(self) -> int | None:
        """The version pinned for this arm when the model was last checked, or None."""
        return self._pinned

    def _refresh(self, changed: bool) -> None:
        """Switch to the pinned version, or to the newest good one (``changed``: the folder's
        modification time moved since the last check)."""
        pinned, problem = self._read_pin()
        if problem is not None:  # a pin file that holds no version: the newest serves
            if changed or problem != self._pin_problem:
                self._serve_newest(problem)
            self._pinned, self._pin_problem = None, problem
            return
        if pinned is not None:
            if pinned != self._model.version and (changed or pinned != self._pinned):
                try:
                    self._model = self.models.load(pinned, self.factory)
                    self.model_errors, self._pin_problem = [], None
                except ModelLoadError as exc:  # the newest good version serves
                    self._pin_problem = f"pinned version {pinned} does not load: {exc.message}"
                    self._serve_newest(self._pin_problem)
            elif pinned == self._model.version:  # served from memory: is its file still there?
                gone = [pinned_gone(self.models, pinned)] \
                    if not self.models.path(pinned).exists() else []
                if gone and self.model_errors != gone:  # (said once)
                    log.error("%s", gone[0])
                self.model_errors = gone
            self._pinned = pinned
            return
        current = self._model.version
        if self._pinned is not None or self._pin_problem is not None:
            # unpinned: back to the newest good version
            self._pinned, self._tried, self._pin_problem = None, -1, None
            model, errors = self.models.load_latest(self.factory)
            if model is not None:
                self._model = model
            self.model_errors = errors
            return
        newest = max(self.models.versions(), default=-1)
        if changed or newest > max(current, self._tried):
            self._tried = newest  # a refused version is not retried
            model, errors = self.models.load_latest(self.factory, newer_than=current)
            if model is not None:
                self._model = model
            if model is not None or errors:
                self.model_errors = errors

    # -- managing versions (``reranker models``) ----------------------------------------------

    def load_version(self, version: int, what: str | None = None) -> RankingModel:
        """Load saved ``version``; the error names the arm (or ``what`` the caller calls
        it), the version and the folder, and says how to list the versions."""
        versions = self.models.versions()
        if version not in versions:
            saved = (f"its saved versions are {_ranges(versions)}" if versions
                     else "it has no saved version")
            raise NotFoundError(f"{what or f'arm {self.label!r} ({self.id})'} has no version "
                                f"{version} in {self.models.dir}: {saved} (`reranker models "
                                f"list` lists them)")
        try:
            return self.models.load(version, self.factory)
        except ModelLoadError as exc:
            which = f"{what}: version {version}" if what else \
                f"version {version} of arm {self.label!r}"
            raise ModelLoadError(f"{which} does not load: "
                                 f"{exc.message}; choose another version "
                                 f"(`reranker models list` lists them)") from None

    def serving_version(self) -> int | None:
        """The version a service of this arm serves: the pinned one, else the newest good
        one (0, the initial model, when none is saved), which also serves while the pin cannot
        be honoured."""
        pinned, _ = self._read_pin()
        if pinned is not None:
            try:
                return self.models.load(pinned, self.factory).version
            except ModelLoadError:
                pass
        model, _ = self.models.load_latest(self.factory)
        return 0 if model is None else model.version

    def pin(self, version: int) -> int | None:
        """Make every service of this arm serve ``version`` (which must load) until
        :meth:`unpin`; return the version pinned before, if any. Training goes on from the
        newest version meanwhile."""
        with self.models.lock():  # no trainer prunes the version between check and pin
            self.load_version(version)
            try:
                before = self.models.pinned()
            except StoreError:  # an unreadable pin file: replaced by this one
                before = None
            self.models.pin(version)
        return before

    def unpin(self) -> int | None:
        """Serve the newest good version again; return the version that was pinned."""
        return self.models.unpin()

    def rollback(self, version: int | None = None
                 ) -> tuple[RankingModel, RankingModel, RankingModel]:
        """Save a new version with the learned state and normalisation of ``version`` (by
        default the one before the newest good version) and the training cursor and counters
        of the newest good version. Learning goes on from the old weights; the impressions
        applied between the two are not applied again: what they taught is dropped. Returns
        the new model, the version it took the weights from and the one it took the cursor
        from."""
        with self.models.lock():  # no trainer saves a version meanwhile
            newest, _ = self.models.load_latest(self.factory)
            if newest is None:
                raise NotFoundError(f"arm {self.label!r} ({self.id}) has no saved version that "
                                    f"loads in {self.models.dir}: nothing to roll back")
            if version is None:
                older = [v for v in self.models.versions() if v < newest.version]
                if not older:
                    raise NotFoundError(f"arm {self.label!r} ({self.id}) has no version before "
                                        f"its newest, {newest.version}, in {self.models.dir}: "
                                        f"nothing to roll back to")
                version = older[-1]
            if version == newest.version:
                raise ConflictError(f"version {version} is the newest version of arm "
                                    f"{self.label!r}: rolling back to it changes nothing; "
                                    f"name an older one (`reranker models list` lists them)")
            target = self.load_version(version)
            model = RankingModel(learner=target.learner, normalizer=target.normalizer,
                                 feature_names=target.feature_names,
                                 version=self.models.next_version(),
                                 progress=dataclasses.replace(newest.progress))
            self.models.save(model)
        return model, target, newest

    def restart(self) -> int | None:
        """Save the learner's initial model as a new version, with the newest version's
        training cursor (the impressions applied before are not applied again) and its
        counters at zero: the arm starts afresh, its earlier versions kept. Returns the new
        version, or None when there is nothing to restart from or a version is pinned
        (which the arm would go on serving)."""
        with self.models.lock():  # no trainer saves a version meanwhile
            newest, _ = self.models.load_latest(self.factory)
            if newest is None or self.models.pinned() is not None:
                return None
            model = self.factory.new()
            model.progress = TrainingProgress(cursor=newest.progress.cursor,
                                              store_id=newest.progress.store_id)
            model.version = self.models.next_version()
            self.models.save(model)
        self.load()
        return model.version

    # -- what it learns from ----------------------------------------------------------------

    def names(self) -> tuple[str, ...]:
        """The values of ``Impression.arm`` that are this arm's own impressions."""
        return (self.id, *self.aliases)

    def columns(self, names: tuple[str, ...] | list[str]) -> np.ndarray | None:
        """Where the model's features are among ``names`` (the features a search builds and
        an impression logs, of which the model may leave some out: the query's own click
        lift), or None when one of them is missing."""
        names = tuple(names)
        if names not in self._columns:
            self._columns[names] = feature_columns(names, self.factory.feature_names)
        return self._columns[names]

    def feedback(self, imp: Impression) -> tuple[np.ndarray, Feedback] | None:
        """The features and feedback this arm learns from in ``imp``, or None when the
        impression is not one it may learn from (module docstring). The features are the
        model's columns of the logged ones (all of them when the model lacks one: the
        trainer then names the difference)."""
        if imp.offset:  # a later page: not randomised, its clicks would teach position bias
            return None
        index = {doc_id: i for i, doc_id in enumerate(imp.doc_ids)}
        clicked = np.array([index[d] for d in imp.clicked or [] if d in index], dtype=np.intp)
        X = imp.features
        if X is not None:
            columns = self.columns(imp.feature_names)
            if columns is not None and len(columns) != X.shape[1]:
                X = X[:, columns]
        if imp.arm in self.names():
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
        logged = (imp.context or {}).get("arms", {})
        if imp.arm is not None or not any(entry.get("id") in self.names()
                                           for entry in logged.values()) \
                or not self.factory.learner_cls.capabilities.learns_from_mixed_lists:
            return None
        # A mixed list it took part in: the page as shown, with every click, and the pairs
        # the experiment randomised on it (the arms' own perturbations are not what was
        # shown), as if the arm had shown it.
        context = {key: imp.context[key]
                   for key in (PAIR_OFFSET, SWAPPED, SWAP_PROBABILITY_KEY, PAIR_DEPTH)
                   if key in imp.context}
        return X, feedback_from_clicks(imp.ranking, imp.n_shown, clicked, context=context)


def _ranges(versions: list[int]) -> str:
    """``[1, 2, 3, 7, 9, 10]`` as ``1-3, 7, 9-10``."""
    parts: list[str] = []
    for version in versions:
        if parts and version == int(parts[-1].rsplit("-", 1)[-1]) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{version}"
        else:
            parts.append(str(version))
    return ", ".join(parts)


def _sibling_folders(root: Path, learner: str
                     ) -> Iterator[tuple[Path, dict[str, Any] | None, bool]]:
    """The model folders in ``root`` that may hold models of ``learner``, each with the arm
    settings its models have, and whether an earlier version wrote it (a folder named
    ``learner`` without ``arm.json``, from before arms; an ``arm.json`` without the feature
    set, from before feature sets had their own folders). A folder whose settings cannot be
    read is passed over, except a folder from before arms with saved versions, which comes
    with settings None."""
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError:
        return
    for child in children:
        store = ModelStore(root, child.name)
        arm_file = child / ARM_FILE
        if arm_file.exists():
            try:
                data = json.loads(arm_file.read_text(encoding="utf-8"))
                settings = {key: data[key] for key in ARM_SETTINGS if key != "features"}
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if settings["learner"] != learner:
                continue
            if isinstance(data.get("features"), list):
                yield child, {**settings, "features": data["features"]}, False
                continue
            saved = _saved_settings(store)  # the feature set is the models'
            if saved is not None:
                yield child, saved, True
        elif child.name == learner:
            saved = _saved_settings(store)
            if saved is not None or store.versions():
                yield child, saved, True


#: The keys of :meth:`ArmSpec.settings`.
ARM_SETTINGS = ("learner", "params", "feature_map", "normalization", "features")


def _saved_settings(store: ModelStore) -> dict[str, Any] | None:
    """The arm settings of the newest readable model in a folder."""
    for version in reversed(store.versions()):
        try:
            data = json.loads(store.path(version).read_text(encoding="utf-8"))
            return {"learner": data["learner"]["name"], "params": data["learner"]["params"],
                    "feature_map": data["feature_map"],
                    "normalization": data["features"]["normalization"]["method"],
                    "features": list(data["features"]["names"])}
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


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
        arms[spec.id] = Arm(spec, factory, config.store.models, keep=config.store.keep_models,
                            max_bytes=config.store.max_model_bytes)
    return list(arms.values())


def pinned_gone(models: ModelStore, pinned: int) -> str:
    """The problem of a pin whose version's file is gone."""
    return (f"pinned version {pinned} is gone from {models.dir} (its file was deleted): a "
            f"process serving it keeps it in memory, one that starts now refuses to; pin "
            f"another version (`reranker models pin`) or unpin")

"""Where a new arm folder starts: an earlier layout's folder of the same arm, taken over, or
the newest model of the same arm under another feature set, carried over.

A configuration whose feature set changed gets a new folder. Its first version carries the
newest model of the same learner and settings under the previous feature set onto the new
one, by feature name (:meth:`reranker.learners.base.Learner.carry_over`; docs/algorithms.md,
"Models across feature sets"), or, where the learner or the normalisation cannot, it starts
a new model; either way with a one-line warning. The old folder stays: the impressions
logged under the old feature set are its arm's, and train it whenever that configuration
runs again.

Folders written by earlier versions (``<learner>/`` before arms, an ``arm.json`` without the
feature set before feature sets had their own folders) are renamed to the arm's id, their
impressions counting as the arm's (:attr:`reranker.models.arm_identity.ArmIdentity.aliases`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reranker.core.errors import ModelLoadError
from reranker.models.arm_identity import ARM_FILE, ARM_SETTINGS, ArmIdentity
from reranker.models.model import ModelFactory, feature_change
from reranker.models.store import ModelStore

#: The warnings keep the logger they have always had (from when one module held all of an
#: arm): operators filter their logs by it, and the documentation shows the lines with it.
log = logging.getLogger("reranker.models.arms")


class FolderMigration:
    """How the folder of one arm (``identity``, whose versions ``models`` holds) starts from
    the other folders beside it, which it only reads, except the one it takes over."""

    def __init__(self, identity: ArmIdentity, factory: ModelFactory, models: ModelStore):
        self.identity = identity
        self.spec = identity.spec
        self.factory = factory
        self.models = models

    def start(self) -> None:
        """Start the arm's new folder as :meth:`predecessor` says (nothing when it says
        None: the arm starts a new model)."""
        found = self.predecessor()
        if found is None:
            return
        how, other, settings = found
        if how == "take over":
            self._take_over(other)
        else:
            self._carry_from(other, settings)

    def predecessor(self) -> tuple[str, Any, dict[str, Any]] | None:
        """Where a new folder of this arm starts from, among the other folders in
        ``store.models`` (read only): ``("take over", folder, settings)`` for a folder an
        earlier version wrote for exactly these settings (``<learner>/`` before arms, an id
        without the feature set before feature sets had their own folders), which is renamed
        to this arm's id, its impressions counting as this arm's; else ``("carry", folder,
        settings)`` for the folder with the newest model of the same learner and settings
        under another feature set, carried onto these features as this arm's first version
        with a one-line warning; else None."""
        mine = self.spec.settings()
        if not isinstance(self.models, ModelStore):  # the database: its other arms
            return self._predecessor_in(self.models.database, mine)
        others: list[tuple[Any, dict[str, Any]]] = []
        for other, settings, legacy in sibling_folders(self.models.dir.parent,
                                                       self.spec.learner):
            if settings is None:  # it may be this arm's: starting afresh would strand it
                _, errors = ModelStore(other.parent, other.name).load_latest(self.factory)
                raise ModelLoadError(f"no saved model of learner {self.spec.learner!r} loads: "
                                     f"{'; '.join(errors)}; move {other} away to start a new "
                                     f"model")
            if {**settings, "features": mine["features"]} != mine:
                if legacy and other.name == self.spec.learner:  # (a folder from before arms)
                    log.warning("the models in %s were trained with other settings than arm "
                                "%r; it starts a new model in %s", other, self.spec.label,
                                self.models.dir)
                continue
            if settings["features"] == mine["features"]:
                if legacy:  # an earlier version's folder of this very arm
                    return "take over", other, settings
                continue
            others.append((ModelStore(other.parent, other.name), settings))
        return newest_to_carry(others)

    def _predecessor_in(self, database, mine: dict[str, Any]
                        ) -> tuple[str, Any, dict[str, Any]] | None:
        """The arm of the database with the newest model of these settings under another
        feature set (its ``arm.json`` says what it is), to carry from; None when none."""
        others: list[tuple[Any, dict[str, Any]]] = []
        for arm in database.arms():
            if arm == self.spec.id:
                continue
            store = database.store(arm)
            try:
                data = json.loads(store.read_text(ARM_FILE) or "{}")
                settings = {key: data[key] for key in ARM_SETTINGS}
            except (ValueError, KeyError, TypeError):
                continue
            if {**settings, "features": mine["features"]} != mine \
                    or settings["features"] == mine["features"]:
                continue
            others.append((store, settings))
        return newest_to_carry(others)

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
        log.warning("model folder %s is now %s (arm %s)", other, folder, self.spec.id)
        self.identity.write(aliases=aliases)

    def _carry_from(self, other, settings: dict[str, Any]) -> None:
        """Start this arm from the newest good model in ``other`` (the model store of the
        same arm under feature set ``settings["features"]``), or from a new model when it
        cannot be carried over."""
        factory = ModelFactory(self.factory.learner_cls, dict(self.factory.params),
                               self.factory.feature_map, settings["features"],
                               self.factory.normalization)
        change = feature_change(settings["features"], self.spec.features)
        kept = (f"; the models of the old feature set stay in {other.name} and serve again "
                f"if the configuration goes back")
        old, _ = other.load_latest(factory)
        try:
            if old is None:
                raise ValueError(f"no model in {other.location} loads")
            model = self.factory.carry_over(old)
        except ValueError as exc:
            log.warning("arm %r: the feature set changed (%s): a new model starts in %s, "
                        "since %s%s", self.spec.label, change, self.spec.id, exc, kept)
            return
        with self.models.lock():
            if self.models.versions():  # another process carried it meanwhile
                return
            model.version = self.models.next_version()
            self.identity.write(aliases=[], carried_from={
                "arm": other.name, "version": old.version, "change": change})
            self.models.save(model)
        shared = sum(name in old.feature_names for name in self.spec.features)
        log.warning("arm %r: the feature set changed (%s): its new model %s starts from the "
                    "weights of version %d on the %d features both share%s", self.spec.label,
                    change, self.spec.id, old.version, shared, kept)


def newest_to_carry(candidates: list[tuple[Any, dict[str, Any]]]
                    ) -> tuple[str, Any, dict[str, Any]] | None:
    """``("carry", store, settings)`` for the candidate model store (with its arm settings)
    whose newest version was saved last; None when none has a version."""
    saved = [(max(store.saved_at(v) or 0.0 for v in versions), store, settings)
             for store, settings in candidates if (versions := store.versions())]
    if not saved:
        return None
    _, store, settings = max(saved, key=lambda entry: entry[0])
    return "carry", store, settings


def sibling_folders(root: Path, learner: str
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
            saved = saved_settings(store)  # the feature set is the models'
            if saved is not None:
                yield child, saved, True
        elif child.name == learner:
            saved = saved_settings(store)
            if saved is not None or store.versions():
                yield child, saved, True


def saved_settings(store: ModelStore) -> dict[str, Any] | None:
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

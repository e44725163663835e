"""Managing an arm's saved versions (``reranker models``): loading one by number, the
version the services serve, pinning and unpinning one, rolling back to older weights and
restarting from the learner's initial model. Each change is written to the model store,
whose services pick it up within a second (:class:`reranker.models.arm_serving.ServedModel`)."""

from __future__ import annotations

import dataclasses

from reranker.core.errors import ConflictError, ModelLoadError, NotFoundError, StoreError
from reranker.models.model import ModelFactory, RankingModel, TrainingProgress
from reranker.models.store import ModelStore


class ArmVersions:
    """The versions of one arm (``label``, ``arm_id``: how messages name it) that ``models``
    holds, and the operator's changes to which one serves."""

    def __init__(self, models: ModelStore, factory: ModelFactory, label: str, arm_id: str):
        self.models = models
        self.factory = factory
        self.label = label
        self.arm_id = arm_id

    def load_version(self, version: int, what: str | None = None) -> RankingModel:
        """Load saved ``version``; the error names the arm (or ``what`` the caller calls
        it), the version and the folder, and says how to list the versions."""
        versions = self.models.versions()
        if version not in versions:
            saved = (f"its saved versions are {_ranges(versions)}" if versions
                     else "it has no saved version")
            raise NotFoundError(f"{what or f'arm {self.label!r} ({self.arm_id})'} has no "
                                f"version {version} in {self.models.location}: {saved} (`reranker "
                                f"models list` lists them)")
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
        pinned, _ = self.models.pin_state()
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
                raise NotFoundError(f"arm {self.label!r} ({self.arm_id}) has no saved version "
                                    f"that loads in {self.models.location}: nothing to roll back")
            if version is None:
                older = [v for v in self.models.versions() if v < newest.version]
                if not older:
                    raise NotFoundError(f"arm {self.label!r} ({self.arm_id}) has no version "
                                        f"before its newest, {newest.version}, in "
                                        f"{self.models.location}: nothing to roll back to")
                version = older[-1]
            if version == newest.version:
                raise ConflictError(f"version {version} is the newest version of arm "
                                    f"{self.label!r}: rolling back to it changes nothing; "
                                    f"name an older one (`reranker models list` lists them)")
            target = self.load_version(version)
            model = RankingModel(learner=target.learner, normalizer=target.normalizer,
                                 feature_names=target.feature_names,
                                 version=self.models.next_version(),
                                 progress=dataclasses.replace(newest.progress),
                                 origin={"rollback_of": target.version,
                                         "cursor_of": newest.version})
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
            model.origin = {"restart_after": newest.version}
            self.models.save(model)
        return model.version


def _ranges(versions: list[int]) -> str:
    """``[1, 2, 3, 7, 9, 10]`` as ``1-3, 7, 9-10``."""
    parts: list[str] = []
    for version in versions:
        if parts and version == int(parts[-1].rsplit("-", 1)[-1]) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{version}"
        else:
            parts.append(str(version))
    return ", ".join(parts)

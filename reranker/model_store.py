"""Versioned model files, one folder per learner, saved atomically.

``<models>/<learner>/model-000042.json`` holds version 42. A version is written to a
temporary file, flushed to disk and then hard-linked to its final name, which fails if that
version already exists: two trainers can never overwrite each other, and a reader never sees
half a file. A version that fails to load is reported and skipped, never deleted, so the
last good one keeps serving.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from pathlib import Path

from .errors import ModelLoadError, RerankerError, StoreError
from .model import ModelFactory, RankingModel

log = logging.getLogger(__name__)

_NAME = re.compile(r"^model-(\d{6,})\.json$")


class VersionExistsError(RerankerError):
    """Another trainer saved this version first."""

    status = 409


class ModelStore:
    """The saved versions of one learner's model."""

    def __init__(self, root: str | os.PathLike, learner_name: str, keep: int = 20):
        self.dir = Path(root) / learner_name
        self.keep = keep

    def path(self, version: int) -> Path:
        return self.dir / f"model-{version:06d}.json"

    def versions(self) -> list[int]:
        """Saved version numbers, oldest first."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"store.models: cannot read the model folder {self.dir}: "
                             f"{exc}") from exc
        return sorted(int(m.group(1)) for m in map(_NAME.match, names) if m)

    def stamp(self) -> int:
        """Changes whenever a version is added or removed (the folder's mtime); 0 when the
        folder does not exist, -1 when it cannot be read."""
        try:
            return os.stat(self.dir).st_mtime_ns
        except FileNotFoundError:
            return 0
        except OSError:
            return -1

    def save(self, model: RankingModel) -> Path:
        """Write ``model`` as version ``model.version``; raise :class:`VersionExistsError`
        if that version exists."""
        final = self.path(model.version)
        text = json.dumps(model.to_dict(), indent=1, allow_nan=False) + "\n"
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".model-", suffix=".tmp", dir=self.dir)
        except OSError as exc:
            raise StoreError(f"store.models: cannot write to the model folder {self.dir}: "
                             f"{exc}") from exc
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(tmp, final)
            except FileExistsError:
                raise VersionExistsError(f"model version {model.version} already exists at "
                                         f"{final}") from None
        finally:
            os.unlink(tmp)
        _fsync_dir(self.dir)
        self._prune()
        return final

    def _prune(self) -> None:
        versions = self.versions()
        for version in versions[: max(0, len(versions) - self.keep)]:
            try:
                self.path(version).unlink()
            except FileNotFoundError:
                pass

    def load(self, version: int, factory: ModelFactory) -> RankingModel:
        """Load one version; raise :class:`ModelLoadError` naming the file and the problem."""
        path = self.path(version)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ModelLoadError(f"model {path} does not exist") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ModelLoadError(f"model {path} is refused: not readable JSON ({exc})") from exc
        model = factory.from_dict(data, str(path))
        if model.version != version:
            raise ModelLoadError(f"model {path} is refused: it says it is version "
                                 f"{model.version}")
        return model

    def load_latest(self, factory: ModelFactory, newer_than: int = -1
                    ) -> tuple[RankingModel | None, list[str]]:
        """The newest version that loads (and is newer than ``newer_than``), with the errors
        of the newer ones that did not. ``(None, errors)`` when none does."""
        errors = []
        for version in reversed(self.versions()):
            if version <= newer_than:
                break
            try:
                return self.load(version, factory), errors
            except ModelLoadError as exc:
                log.error("%s", exc.message)
                errors.append(exc.message)
        return None, errors


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover -- platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)

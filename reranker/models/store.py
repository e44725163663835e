"""Versioned model files, one folder per learner, saved atomically.

``<models>/<learner>/model-000042.json`` holds version 42. A version is written to a
temporary file, flushed to disk and then hard-linked to its final name, which fails if that
version already exists: two trainers can never overwrite each other, and a reader never sees
half a file. A version that fails to load is reported and skipped, never deleted, so the
last good one keeps serving.

Beside the versions, the folder holds two small files, each written to a temporary file and
renamed into place (so a reader sees the old or the new content, and the folder's
modification time, which the service watches, changes):

* ``next-version``: the number the next saved version gets at least. It is raised before a
  version is linked into place, so a number is never used twice, even after model files are
  deleted, moved away or pruned (:meth:`ModelStore.next_version`).
* ``pinned-version``: the version every service of the configuration serves instead of the
  newest (``reranker models pin``); pruning keeps it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from reranker.core.errors import ModelLoadError, ModelStoreError, RerankerError, StoreError
from reranker.models.model import ModelFactory, RankingModel

log = logging.getLogger(__name__)

_NAME = re.compile(r"^model-(\d{6,})\.json$")
#: The high-water mark of version numbers: the next version is numbered at least this.
NEXT_VERSION_FILE = "next-version"
#: The version the services serve while it exists.
PIN_FILE = "pinned-version"
#: The lock file that trainers (and the commands that save versions) hold while they save.
LOCK_FILE = ".trainer.lock"


#: The default of ``store.max_model_bytes``.
MAX_MODEL_BYTES = 256 * 1024 * 1024


class VersionExistsError(RerankerError):
    """Another trainer saved this version first."""

    status = 409


def parse_version_number(text: str, where: str, fix: str) -> int:
    """The version number a pin or next-version document holds; :class:`ModelStoreError`
    naming ``where`` and how to ``fix`` it when it holds none."""
    text = text.strip()
    if not text.isdigit():
        raise ModelStoreError(f"store.models: {where} must hold a version number, not "
                              f"{text!r}; {fix}")
    return int(text)


class SavedVersions:
    """What the two model stores share, over their own ``versions``, ``load``, ``pinned``
    and ``_log_refused``: the newest version that loads, and the state of the pin."""

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
                self._log_refused(version, exc.message)
                errors.append(exc.message)
        return None, errors

    def pin_state(self) -> tuple[int | None, str | None]:
        """The pinned version (None when none is), and the problem of a pin that holds no
        version number (then no version is pinned)."""
        try:
            return self.pinned(), None
        except StoreError as exc:
            return None, exc.message


class ModelStore(SavedVersions):
    """The saved versions of one learner's model, in a folder (the default; the
    PostgreSQL database is the other place, :mod:`reranker.models.database_store`)."""

    #: Seconds between full checks of the store by a serving process (in case two saves
    #: fell into one tick of a coarse file-system clock and left the folder's time alone).
    full_check_interval = 1.0

    def __init__(self, root: str | os.PathLike, learner_name: str, keep: int = 20,
                 max_bytes: int = MAX_MODEL_BYTES):
        self.dir = Path(root) / learner_name
        self.keep = keep
        #: Largest model file read (``store.max_model_bytes``): a larger one is refused by its
        #: size, before its bytes are read.
        self.max_bytes = max_bytes
        #: The refused files already logged, as (version, size, modification time): the
        #: service looks for new versions every second, and a file that stays broken is
        #: logged once (``/healthz`` keeps saying it), a file rewritten since logged again.
        self._logged: set[tuple[int, int, int]] = set()

    def path(self, version: int) -> Path:
        return self.dir / f"model-{version:06d}.json"

    @property
    def location(self) -> str:
        """Where the arm's models are, for messages: the folder."""
        return str(self.dir)

    @property
    def name(self) -> str:
        """The arm's id: the folder's name."""
        return self.dir.name

    def exists(self) -> bool:
        """Whether the arm's folder exists yet."""
        return self.dir.exists()

    def read_text(self, name: str) -> str | None:
        """The file ``name`` of the folder, None when it does not exist."""
        try:
            return (self.dir / name).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelStoreError(f"store.models: cannot read {self.dir / name}: {exc}") \
                from exc

    def write_text(self, name: str, text: str) -> None:
        """Replace the file ``name`` of the folder atomically."""
        write_atomically(self.dir, name, text)

    def document(self, name: str) -> Path:
        """The file ``name`` of the folder (where messages say a document is)."""
        return self.dir / name

    def document_stamp(self, name: str) -> tuple[int, int] | None:
        """Changes when the file ``name`` is written (its time and size); None without it."""
        try:
            stat = (self.dir / name).stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def versions(self) -> list[int]:
        """Saved version numbers, oldest first."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ModelStoreError(f"store.models: cannot read the model folder {self.dir}: "
                             f"{exc}") from exc
        return sorted(int(m.group(1)) for m in map(_NAME.match, names) if m)

    def has(self, version: int) -> bool:
        """Whether ``version`` is saved (it may still fail to load)."""
        return self.path(version).exists()

    def saved_at(self, version: int) -> float | None:
        """When ``version`` was saved (its file's modification time), None when it is gone."""
        try:
            return os.stat(self.path(version)).st_mtime
        except OSError:
            return None

    def stamp(self) -> int:
        """Changes whenever a version is added or removed (the folder's mtime); 0 when the
        folder does not exist, -1 when it cannot be read."""
        try:
            return os.stat(self.dir).st_mtime_ns
        except FileNotFoundError:
            return 0
        except OSError:
            return -1

    # -- version numbers --------------------------------------------------------------------

    def next_version(self) -> int:
        """The number of the next version to save: one past every number ever used in this
        folder (the ``next-version`` mark, or the newest file when that is higher), at least
        1 (version 0 is the learner's initial model, never saved)."""
        return max(self._read_number(NEXT_VERSION_FILE) or 0,
                   max(self.versions(), default=0) + 1, 1)

    def _raise_mark(self, version: int) -> None:
        """Record that ``version`` is used: ``next-version`` becomes at least ``version + 1``."""
        if (self._read_number(NEXT_VERSION_FILE) or 0) <= version:
            self._write_file(NEXT_VERSION_FILE, f"{version + 1}\n")

    # -- pinning ----------------------------------------------------------------------------

    @property
    def pin_path(self) -> Path:
        return self.dir / PIN_FILE

    def pinned(self) -> int | None:
        """The pinned version, or None when none is pinned; :class:`StoreError` naming the pin
        file when it cannot be read."""
        return self._read_number(PIN_FILE)

    def pin(self, version: int) -> None:
        """Pin ``version`` (atomically: a reader sees the old pin or the new one). The caller
        checks that the version loads."""
        self._write_file(PIN_FILE, f"{version}\n")

    def unpin(self) -> int | None:
        """Remove the pin; return the version that was pinned (None when none was, or when
        the pin file held no version number: it is removed all the same)."""
        if not self.pin_path.exists():  # (a read-only folder refuses even that unlink)
            return None
        try:
            pinned = self.pinned()
        except StoreError:  # a pin file that does not hold a version: removed
            pinned = None
        try:
            self.pin_path.unlink()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ModelStoreError(f"store.models: cannot remove the pin file {self.pin_path}: "
                             f"{exc}") from exc
        _fsync_dir(self.dir)
        return pinned

    # -- small files and the lock ------------------------------------------------------------

    def _read_number(self, name: str) -> int | None:
        path = self.dir / name
        try:
            text = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelStoreError(f"store.models: cannot read {name} in the model folder "
                             f"{self.dir}: {exc}") from exc
        return parse_version_number(text, str(path),
                                    "write the right number into it or delete it")

    def _write_file(self, name: str, text: str) -> None:
        """Replace ``<folder>/<name>`` with ``text`` atomically and durably."""
        write_atomically(self.dir, name, text)

    def lock(self, name: str = LOCK_FILE) -> contextlib.AbstractContextManager[None]:
        """Hold the folder's trainer lock (no trainer saves a version meanwhile), or the
        lock ``name``."""
        return folder_lock(self.dir, name)

    # -- saving and loading -----------------------------------------------------------------

    def save(self, model: RankingModel) -> Path:
        """Write ``model`` as version ``model.version``; raise :class:`VersionExistsError`
        if that version exists. The ``next-version`` mark is raised past it first, so its
        number is never given out again."""
        final = self.path(model.version)
        text = json.dumps(model.to_dict(), indent=1, allow_nan=False) + "\n"
        self._raise_mark(model.version)
        try:
            fd, tmp = tempfile.mkstemp(prefix=".model-", suffix=".tmp", dir=self.dir)
        except OSError as exc:
            raise ModelStoreError(f"store.models: cannot write to the model folder {self.dir}: "
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
        """Delete all but the newest ``keep`` versions, and the pinned one."""
        versions = self.versions()
        try:
            pinned = self.pinned()
        except StoreError:  # an unreadable pin file: it might name any version
            return
        for version in versions[: max(0, len(versions) - self.keep)]:
            if version == pinned:
                continue
            try:
                self.path(version).unlink()
            except FileNotFoundError:
                pass

    def load(self, version: int, factory: ModelFactory) -> RankingModel:
        """Load one version; raise :class:`ModelLoadError` naming the file and the problem."""
        path = self.path(version)
        try:
            with open(path, "rb") as file:
                size = os.fstat(file.fileno()).st_size
                if size > self.max_bytes:
                    raise ModelLoadError(f"model {path} is refused: {size} bytes, more than "
                                         f"store.max_model_bytes ({self.max_bytes})")
                data = json.loads(file.read().decode("utf-8"))
        except FileNotFoundError:
            raise ModelLoadError(f"model {path} does not exist") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ModelLoadError(f"model {path} is refused: not readable JSON ({exc})") from exc
        model = factory.from_dict(data, str(path))
        if model.version != version:
            raise ModelLoadError(f"model {path} is refused: it says it is version "
                                 f"{model.version}")
        return model

    def _log_refused(self, version: int, message: str) -> None:
        try:
            stat = self.path(version).stat()
        except OSError:
            stat = None
        key = (version, -1, -1) if stat is None else (version, stat.st_size, stat.st_mtime_ns)
        if key in self._logged:
            return
        if len(self._logged) >= 1000:
            self._logged.clear()
        self._logged.add(key)
        log.error("%s", message)


def write_atomically(folder: Path, name: str, text: str) -> None:
    """Replace ``<folder>/<name>`` with ``text`` atomically and durably: a temporary file,
    flushed to disk, renamed into place (a reader sees the old or the new content)."""
    path = folder / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise ModelStoreError(f"store.models: cannot write {path}: {exc}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ModelStoreError(f"store.models: cannot write {path}: {exc}") from exc
    _fsync_dir(folder)


@contextlib.contextmanager
def folder_lock(folder: Path, name: str) -> Iterator[None]:
    """Hold the exclusive lock of the file ``<folder>/<name>`` (made if missing)."""
    lock_path = folder / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(lock_path, "a+b")
    except OSError as exc:
        raise ModelStoreError(f"store.models: cannot use {lock_path}: {exc}") from exc
    with handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


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

"""Atomic, versioned checkpoints: a process killed mid-write loses at most that write.

The new state is written to a temporary file in the same directory, flushed and fsynced, the
current checkpoint is hard-linked as ``<name>.prev``, and the temporary file is renamed over the
checkpoint (rename is atomic on POSIX, so the checkpoint path always holds a whole file).
The directory is fsynced so the rename itself survives a crash.  Temporary files left by a
writer killed mid-write are removed by the next successful write.

One state file has one writer: :class:`CheckpointLock` holds an exclusive ``flock`` on
``<name>.lock`` for as long as a planner uses the file, and a second planner is refused.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from koi.errors import StateError

__all__ = [
    "SCHEMA_VERSION",
    "CheckpointLock",
    "load_checkpoint",
    "lock_path",
    "previous_path",
    "save_checkpoint",
]

SCHEMA_VERSION = 1


def previous_path(path: Path) -> Path:
    """Where the checkpoint before the latest one is kept."""
    return path.with_name(path.name + ".prev")


def lock_path(path: Path) -> Path:
    """The lock file that keeps a second planner off the checkpoint at ``path``."""
    return path.with_name(path.name + ".lock")


def _temp_prefix(path: Path) -> str:
    return f".{path.name}."


def save_checkpoint(path: Path, state: Any) -> None:
    """Write ``state`` (JSON-ready data) to ``path`` atomically, keeping the previous file.

    Raises
    ------
    StateError
        The file could not be written (unwritable or missing directory, a parent that is a
        file, a full disk).  ``path`` and ``<name>.prev`` are then as they were.
    """
    payload = json.dumps({"schema": SCHEMA_VERSION, "state": state}, separators=(",", ":"))
    try:
        _write(path, payload)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise StateError(f"{path}: cannot write checkpoint ({reason})") from None
    _remove_stale_temps(path)


def _write(path: Path, payload: str) -> None:
    directory = path.parent
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, f"{directory} is not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        if path.exists():
            # Hard-link the current file as .prev, so that ``path`` exists at every instant.
            link = path.with_name(path.name + ".prev.tmp")
            with contextlib.suppress(FileNotFoundError):
                link.unlink()
            os.link(path, link)
            link.replace(previous_path(path))
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_directory(directory)


def _remove_stale_temps(path: Path) -> None:
    """Temporary files of writes that were killed before their rename (one writer per file,
    so after a successful write every one of them is stale)."""
    prefix = _temp_prefix(path)
    for stale in path.parent.glob(f"{glob.escape(prefix)}*.tmp"):
        with contextlib.suppress(OSError):
            stale.unlink()
    with contextlib.suppress(OSError):
        path.with_name(path.name + ".prev.tmp").unlink()


def load_checkpoint(path: Path) -> Any:
    """Read the state data from ``path``.

    Raises
    ------
    StateError
        When the file is missing, not valid JSON, not a koi checkpoint, or written by a newer
        schema version.  The message says whether ``<name>.prev`` is available to fall back to.
    """
    prev = previous_path(path)
    hint = f" (the previous checkpoint {prev.name} is intact)" if prev.exists() else ""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StateError(f"{path}: no checkpoint{hint}") from None
    except OSError as exc:
        raise StateError(f"{path}: cannot read checkpoint: {exc}{hint}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StateError(
            f"{path}: corrupt checkpoint ({exc.msg} at line {exc.lineno}){hint}"
        ) from None
    except (ValueError, RecursionError) as exc:  # a number past the digit limit, deep nesting
        raise StateError(f"{path}: corrupt checkpoint ({exc!r}){hint}") from None
    if not isinstance(data, dict) or "schema" not in data or "state" not in data:
        raise StateError(f"{path}: not a koi checkpoint{hint}")
    schema = data["schema"]
    if isinstance(schema, bool) or not isinstance(schema, int) or schema < 1:
        msg = f"{path}: schema: must be an integer >= 1, got {schema!r}"
        raise StateError(msg + hint)
    if schema > SCHEMA_VERSION:
        msg = f"{path}: checkpoint schema {schema!r} is newer than this koi ({SCHEMA_VERSION})"
        raise StateError(msg + hint)
    return data["state"]


class CheckpointLock:
    """An exclusive lock on a checkpoint path, held until :meth:`release` (or process exit).

    Raises
    ------
    StateError
        Another planner (in this process or another) holds the lock, or the lock file cannot
        be created.
    """

    def __init__(self, path: Path) -> None:
        self.path = lock_path(path)
        self._fd: int | None = None
        try:
            if self.path.parent.exists() and not self.path.parent.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, f"{self.path.parent} is not a directory")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise StateError(f"{self.path}: cannot create the state lock ({reason})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            msg = (
                f"{path}: another planner is using this state file (lock {self.path.name} "
                "is held); two planners on one state would overwrite each other's learning"
            )
            raise StateError(msg) from None
        self._fd = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Let another planner use the state file (closing the descriptor drops the lock)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        self.release()


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems do not support fsync on directories
        pass
    finally:
        os.close(fd)

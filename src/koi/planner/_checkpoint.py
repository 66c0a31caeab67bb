"""Atomic, versioned checkpoints: a process killed mid-write loses at most that write.

The new state is written to a temporary file in the same directory, flushed and fsynced, the
current checkpoint is hard-linked as ``<name>.prev``, and the temporary file is renamed over the
checkpoint (rename is atomic on POSIX, so the checkpoint path always holds a whole file).
The directory is fsynced so the rename itself survives a crash.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from koi.errors import StateError

__all__ = ["SCHEMA_VERSION", "load_checkpoint", "previous_path", "save_checkpoint"]

SCHEMA_VERSION = 1


def previous_path(path: Path) -> Path:
    """Where the checkpoint before the latest one is kept."""
    return path.with_name(path.name + ".prev")


def save_checkpoint(path: Path, state: Any) -> None:
    """Write ``state`` (JSON-ready data) to ``path`` atomically, keeping the previous file."""
    payload = json.dumps({"schema": SCHEMA_VERSION, "state": state}, separators=(",", ":"))
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
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
    if not isinstance(data, dict) or "schema" not in data or "state" not in data:
        raise StateError(f"{path}: not a koi checkpoint{hint}")
    schema = data["schema"]
    if not isinstance(schema, int) or schema > SCHEMA_VERSION:
        msg = f"{path}: checkpoint schema {schema!r} is newer than this koi ({SCHEMA_VERSION})"
        raise StateError(msg + hint)
    return data["state"]


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems do not support fsync on directories
        pass
    finally:
        os.close(fd)

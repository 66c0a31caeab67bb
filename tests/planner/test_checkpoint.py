from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from koi.errors import StateError
from koi.planner._checkpoint import (
    SCHEMA_VERSION,
    load_checkpoint,
    previous_path,
    save_checkpoint,
)


def test_round_trip_keeps_previous(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    save_checkpoint(path, {"tick": 1})
    save_checkpoint(path, {"tick": 2})
    assert load_checkpoint(path) == {"tick": 2}
    assert load_checkpoint(previous_path(path)) == {"tick": 1}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_corrupt_file_is_a_clear_error_and_previous_survives(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    save_checkpoint(path, {"tick": 1})
    save_checkpoint(path, {"tick": 2})
    path.write_text('{"schema": 1, "state": {"ti')
    with pytest.raises(StateError, match=r"corrupt checkpoint.*previous checkpoint"):
        load_checkpoint(path)
    assert load_checkpoint(previous_path(path)) == {"tick": 1}


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"schema": SCHEMA_VERSION + 1, "state": {}}))
    with pytest.raises(StateError, match="newer"):
        load_checkpoint(path)


def test_missing_and_foreign_files(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="no checkpoint"):
        load_checkpoint(tmp_path / "nope.json")
    other = tmp_path / "other.json"
    other.write_text("[1, 2]")
    with pytest.raises(StateError, match="not a koi checkpoint"):
        load_checkpoint(other)


_WRITER = """
import sys
from pathlib import Path
from koi.planner._checkpoint import save_checkpoint
path = Path(sys.argv[1])
blob = "x" * 200_000
i = 0
while True:
    save_checkpoint(path, {"tick": i, "blob": blob})
    i += 1
"""


@pytest.mark.slow
def test_process_killed_mid_write_leaves_a_loadable_state(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    loaded = 0
    for delay in (0.0, 0.013, 0.029, 0.047):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)])
        give_up = time.monotonic() + 30
        while not path.exists() and time.monotonic() < give_up:
            time.sleep(0.01)  # wait for the writer's first checkpoint, however slow the machine
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if path.exists():
            state = load_checkpoint(path)
            assert state["blob"] == "x" * 200_000
            loaded += 1
    assert loaded, "the writer never produced a checkpoint"

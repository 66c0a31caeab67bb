"""Issue items 6 and 7: checkpoint writes that fail, stale temporaries, one planner per state
file, and checkpoint values validated when they are loaded."""

from __future__ import annotations

import errno
import json
import math
from pathlib import Path
from typing import Any

import pytest

from koi.config import KoiConfig
from koi.errors import StateError
from koi.planner import Planner, PlannerState
from koi.planner._checkpoint import (
    CheckpointLock,
    load_checkpoint,
    lock_path,
    previous_path,
    save_checkpoint,
)
from tests.planner._world import CATALOG


def test_stale_temporaries_are_removed_by_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    save_checkpoint(path, {"tick": 1})
    # What a writer killed between mkstemp and rename leaves behind.
    stale = [tmp_path / ".state.json.abc123.tmp", tmp_path / "state.json.prev.tmp"]
    for p in stale:
        p.write_text("half a checkpoint")
    other = tmp_path / ".other.json.xyz.tmp"  # another state file's temporary is not ours
    other.write_text("x")
    save_checkpoint(path, {"tick": 2})
    assert not any(p.exists() for p in stale)
    assert other.exists()
    assert load_checkpoint(path) == {"tick": 2}


def test_a_parent_that_is_a_file_is_a_state_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(
        StateError, match=r"cannot write checkpoint \(.*not-a-dir is not a directory\)"
    ):
        save_checkpoint(blocker / "state.json", {"tick": 1})


def test_a_full_disk_leaves_the_previous_files_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    save_checkpoint(path, {"tick": 1})
    save_checkpoint(path, {"tick": 2})

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("koi.planner._checkpoint.os.fsync", full)
    with pytest.raises(StateError, match="No space left on device"):
        save_checkpoint(path, {"tick": 3})
    monkeypatch.undo()
    assert load_checkpoint(path) == {"tick": 2}
    assert load_checkpoint(previous_path(path)) == {"tick": 1}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_second_planner_on_the_same_state_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    first = Planner(catalog=CATALOG, state_path=path)
    with pytest.raises(StateError, match="another planner is using this state file"):
        Planner(catalog=CATALOG, state_path=path)
    Planner(catalog=CATALOG, state_path=tmp_path / "other.json").close()  # other files are free
    first.close()
    with Planner(catalog=CATALOG, state_path=path) as second:
        assert second.state.tick == 0
    assert lock_path(path).exists()
    CheckpointLock(path).release()  # released by the context manager


def _saved_state() -> dict[str, Any]:
    data: dict[str, Any] = Planner.initial_state(KoiConfig()).to_data()
    return json.loads(json.dumps(data))  # exactly what a checkpoint holds


@pytest.mark.parametrize(
    ("section", "key", "bad", "named"),
    [
        ("calibration", "beta", math.nan, "beta"),
        ("calibration", "beta", -1.0, "beta"),
        ("calibration", "lam", math.inf, "lam"),
        ("calibration", "lam", "0.5", "lam"),
        ("calibration", "regret", -0.2, "regret"),
        ("calibration", "ticks", 2.5, "ticks"),
        ("epsilon", "eps", math.nan, "epsilon.eps"),
        ("epsilon", "eps", -0.1, "epsilon.eps"),
        ("epsilon", "eps", "0.1", "epsilon.eps"),
        ("epsilon", "hits", True, "epsilon.hits"),
        (None, "tick", "3", "tick"),
        (None, "tick", -1, "tick"),
        (None, "last_time_s", math.nan, "last_time_s"),
    ],
)
def test_bad_knobs_are_refused_naming_the_field(
    section: str | None, key: str, bad: Any, named: str
) -> None:
    data = _saved_state()
    PlannerState.from_data(data, cusum=KoiConfig().cusum)  # the unmodified state loads
    (data if section is None else data[section])[key] = bad
    with pytest.raises(StateError) as info:
        PlannerState.from_data(data, cusum=KoiConfig().cusum)
    assert named in str(info.value)


@pytest.mark.parametrize("schema", [-1, 0, "1", True, None, 1.0])
def test_a_bad_schema_is_refused(tmp_path: Path, schema: object) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"schema": schema, "state": _saved_state()}))
    with pytest.raises(StateError, match=r"schema: must be an integer >= 1"):
        load_checkpoint(path)


def test_a_planner_refuses_a_checkpoint_with_bad_knobs(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    data = _saved_state()
    data["epsilon"]["eps"] = math.inf
    save_checkpoint(path, data)
    with pytest.raises(StateError, match=r"epsilon\.eps: must be a finite number >= 0"):
        Planner(catalog=CATALOG, state_path=path)
    # The refused planner let go of the lock: a fixed checkpoint can be used at once.
    save_checkpoint(path, _saved_state())
    Planner(catalog=CATALOG, state_path=path).close()

"""Issue item 10 (CLI edge): bad files, flags and pipes give one line and a non-zero exit."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from koi.cli import main
from koi.types import ClusterSnapshot, to_json
from tests.planner._world import chat_job, pools


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    return err


def test_a_non_utf8_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "snap.json"
    bad.write_bytes(b'{"time_s": 0, "jobs": [\xff\xfe]}')
    assert main(["plan", str(bad)]) == 2
    assert "not UTF-8 text" in _err(capsys)


def test_deeply_nested_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "snap.json"
    bad.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["plan", str(bad)]) == 2
    assert "nested too deeply" in _err(capsys)


def test_an_unwritable_state_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(to_json(ClusterSnapshot(0.0, [chat_job()], pools())))
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["plan", str(snap), "--state", str(blocker / "state.json")]) == 2
    assert "is not a directory" in _err(capsys)


def test_an_unwritable_bench_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = str(blocker / "out")
    assert main(["bench", "--scenario", "smoke", "--planners", "fcfs", "--out", out]) == 2
    _err(capsys)


def test_a_checkpoint_that_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The lock is taken, then the disk fills: the plan was not made durable, so it is an error.
    snap = tmp_path / "snap.json"
    snap.write_text(to_json(ClusterSnapshot(0.0, [chat_job()], pools())))

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("koi.planner._checkpoint.os.fsync", full)
    assert main(["plan", str(snap), "--state", str(tmp_path / "state.json")]) == 2
    err = _err(capsys)
    assert "No space left on device" in err
    assert "nothing was launched" in err


@pytest.mark.parametrize("command", ["sweep", "render", "agent", "scenarios"])
def test_every_file_reader_names_a_non_utf8_file(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"a = '\xff\xfe'\n")
    argv = {
        "sweep": ["sweep", str(bad), "--out", str(tmp_path / "o")],
        "render": ["render", str(bad), "--target", "k8s", "--out", str(tmp_path / "o")],
        "agent": ["agent", "--config", str(bad)],
        "scenarios": ["scenarios", "--file", str(bad)],
    }[command]
    assert main(argv) == 2
    assert f"{bad}: not UTF-8 text" in _err(capsys)


@pytest.mark.parametrize("command", ["sweep", "agent", "scenarios", "catalog"])
def test_every_toml_reader_names_a_deeply_nested_file(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "deep.toml"
    bad.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    argv = {
        "sweep": ["sweep", str(bad), "--out", str(tmp_path / "o")],
        "agent": ["agent", "--config", str(bad)],
        "scenarios": ["scenarios", "--file", str(bad)],
        "catalog": ["catalog", "instances", "--file", str(bad)],
    }[command]
    assert main(argv) == 2
    assert "TOML nested too deeply" in _err(capsys)


def test_render_names_a_deeply_nested_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["render", str(bad), "--target", "k8s", "--out", str(tmp_path / "o")]) == 2
    assert f"{bad}: JSON nested too deeply" in _err(capsys)


def test_huge_priority_in_a_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = tmp_path / "snap.json"
    text = to_json(ClusterSnapshot(0.0, [chat_job()], pools()))
    snap.write_text(text.replace('"priority": 0', '"priority": ' + "9" * 40))
    assert '"priority": 9999' in snap.read_text()
    assert main(["plan", str(snap)]) == 2
    assert "priority: must be an integer in [0, 1000000]" in _err(capsys)


PREDICT = [
    "predict",
    "--model",
    "Llama-3.1-8B",
    "--gpu",
    "H100-SXM",
    "--tp",
    "1",
    "--isl",
    "1000",
    "--osl",
    "200",
]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--rate", "nan"], "--rate: must be > 0 requests per second, got nan"),
        (["--rate", "inf"], "--rate: must be > 0 requests per second, got inf"),
        (["--rate", "-1"], "--rate: must be > 0"),
        (["--concurrency", "0"], "--concurrency: must be an integer >= 1, got 0"),
        (["--rate", "1", "--replicas", "0"], "--replicas: must be an integer >= 1, got 0"),
        (["--rate", "1", "--price-per-gpu-h", "nan"], "--price-per-gpu-h: must be >= 0"),
        (["--rate", "1", "--engine", "tgi"], "--engine: must be one of vllm, sglang, trtllm"),
    ],
)
def test_bad_predict_numbers(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*PREDICT, *flags]) == 2
    assert message in _err(capsys)


def test_predict_a_million_replicas_answers_without_replaying_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The replay simulates every replica (its cost grows with their number); past a few dozen
    # the closed form answers.  How long it takes is measured in benchmarks/input_size.py.
    def replay(*args: object, **kwargs: object) -> None:
        raise AssertionError("a million replicas were replayed")

    monkeypatch.setattr("koi.surrogate._point.replay_protocol", replay)
    assert main([*PREDICT, "--rate", "5000", "--replicas", "1000000", "--json"]) == 0
    assert '"feasible": true' in capsys.readouterr().out
    with pytest.raises(AssertionError, match="replayed"):  # a few replicas are replayed
        main([*PREDICT, "--rate", "5", "--replicas", "2", "--json"])


def test_a_closed_pipe_is_quiet() -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "koi.cli", "catalog", "instances"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    assert len(proc.stdout.read(10)) == 10  # the command runs and writes ...
    proc.stdout.close()  # ... and the reader goes away, like ``| head -c 10``
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err, err.decode()
    assert b"BrokenPipe" not in err

"""Issue item 10 (CLI edge): bad files, flags and pipes give one line and a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
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
    assert main(["plan", str(bad)]) == 1
    assert "not UTF-8 text" in _err(capsys)


def test_deeply_nested_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "snap.json"
    bad.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["plan", str(bad)]) == 1
    assert "nested too deeply" in _err(capsys)


def test_an_unwritable_state_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(to_json(ClusterSnapshot(0.0, [chat_job()], pools())))
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["plan", str(snap), "--state", str(blocker / "state.json")]) == 1
    assert "is not a directory" in _err(capsys)


def test_an_unwritable_bench_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = str(blocker / "out")
    assert main(["bench", "--scenario", "smoke", "--planners", "fcfs", "--out", out]) == 1
    _err(capsys)


def test_huge_priority_in_a_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = tmp_path / "snap.json"
    text = to_json(ClusterSnapshot(0.0, [chat_job()], pools()))
    snap.write_text(text.replace('"priority": 0', '"priority": ' + "9" * 40))
    assert '"priority": 9999' in snap.read_text()
    assert main(["plan", str(snap)]) == 1
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


def test_predict_a_million_replicas_answers_in_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    start = time.perf_counter()
    assert main([*PREDICT, "--rate", "5000", "--replicas", "1000000", "--json"]) == 0
    assert time.perf_counter() - start < 20.0
    assert '"feasible": true' in capsys.readouterr().out


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

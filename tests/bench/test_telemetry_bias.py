"""benchmarks/telemetry_bias.py: the telemetry's completions against the accounting's."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "telemetry_bias.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("telemetry_bias", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_reports_every_served_online_job(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mod = _module()
    argv = ["telemetry_bias.py", "--scenario", "smoke", "--seed", "0", "--planner", "fcfs"]
    monkeypatch.setattr(sys, "argv", argv)
    mod.main()
    out = json.loads(capsys.readouterr().out)
    assert out["planner"] == "fcfs"
    assert set(out["jobs"]) == {"agent-30b", "chat-8b", "mod-1b"}
    for row in out["jobs"].values():
        assert 0 < row["finished_per_offered"] <= 1
        assert row["completed_per_request"] > 0
        assert row["windows_over"] >= 0

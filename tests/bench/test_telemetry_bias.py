"""benchmarks/telemetry_bias.py: the telemetry's completions against the accounting's."""

from __future__ import annotations

import json
import sys
from types import ModuleType

import pytest
from tests._support.scripts import benchmark


def _module() -> ModuleType:
    return benchmark("telemetry_bias")


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

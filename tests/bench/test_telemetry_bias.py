"""benchmarks/telemetry_bias.py: the telemetry's completions against the accounting's."""

from __future__ import annotations

import json
import sys

import pytest
from tests._support.scripts import benchmark

TELEMETRY_BIAS = benchmark("telemetry_bias")


def test_reports_every_served_online_job(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["telemetry_bias.py", "--scenario", "smoke", "--seed", "0", "--planner", "fcfs"]
    monkeypatch.setattr(sys, "argv", argv)
    TELEMETRY_BIAS.main()
    out = json.loads(capsys.readouterr().out)
    assert out["planner"] == "fcfs"
    assert set(out["jobs"]) == {"agent-30b", "chat-8b", "mod-1b"}
    for row in out["jobs"].values():
        assert 0 < row["finished_per_offered"] <= 1
        assert row["completed_per_request"] > 0
        assert row["windows_over"] >= 0

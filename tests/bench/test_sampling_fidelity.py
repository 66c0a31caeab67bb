"""benchmarks/sampling_fidelity.py: the same plans on the sampled and the full world."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from tests._support.scripts import benchmark

SAMPLING_FIDELITY = benchmark("sampling_fidelity")


def _fcfs_on_smoke(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flag: str
) -> dict[str, Any]:
    argv = ["sampling_fidelity.py", "--scenario", "smoke", "--planner", "fcfs", flag]
    monkeypatch.setattr(sys, "argv", argv)
    SAMPLING_FIDELITY.main()
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_replays_the_recorded_plans_on_both_worlds(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _fcfs_on_smoke(monkeypatch, capsys, "--live")
    assert out["replay_exact"]
    sampled, full = out["sampled"], out["full"]
    assert set(sampled["jobs"]) == set(full["jobs"]) == {"agent-30b", "chat-8b", "mod-1b"}
    # smoke's chat job is sampled (scale > 1): the full world replays it request by request.
    assert sampled["jobs"]["chat-8b"] != full["jobs"]["chat-8b"]
    for m, d in out["full_minus_sampled"].items():
        assert d == pytest.approx(full["metrics"][m] - sampled["metrics"][m], rel=1e-3, abs=1e-9)
    assert set(out["live_full"]["metrics"]) == set(sampled["metrics"])


def test_sampled_only_compares_the_telemetry_with_the_accounting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _fcfs_on_smoke(monkeypatch, capsys, "--sampled-only")
    assert "full" not in out
    for row in out["sampled"]["jobs"].values():
        assert 0 < row["finished"] <= 1
        assert 0 <= row["slo_met"] <= row["finished"]
        assert row["telemetry_completed_per_request"] > 0
        assert row["windows_over"] >= 0

"""benchmarks/tick.py: the planner timed in a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from types import ModuleType

import attrs
import pytest
from tests._support.scripts import BENCHMARKS, benchmark

from koi.config import KoiConfig
from koi.planner import Planner
from koi.sim import load_scenario, run


@pytest.fixture
def tick(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # The planner's process is spawned: it imports the script by name, as a run does.
    mod = benchmark("tick")
    monkeypatch.setitem(sys.modules, "tick", mod)
    return mod


def test_the_planner_in_its_own_process_plans_what_it_plans_in_this_one(
    tick: ModuleType,
) -> None:
    sc = load_scenario("smoke")
    here = run(sc, Planner(), seed=0).metrics
    policy = tick.PlannerProcess(KoiConfig(), relaxed=True)
    there = run(sc, policy, seed=0).metrics
    assert policy.close() > 0  # its peak RSS, in MiB
    # Everything but the planning times (wall clock) is the same run.
    times = {
        "plan_time_median_s": there.plan_time_median_s,
        "plan_time_p95_s": there.plan_time_p95_s,
    }
    assert attrs.evolve(here, **times) == there
    assert here.swaps > 0  # a run with decisions to get wrong
    assert all(t.cpu_s > 0 and t.stages for t in policy.ticks)


def test_reports_the_planners_memory_apart_from_the_worlds() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "tick.py"), "--scenario", "smoke", "--ticks", "2"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    report = json.loads(out.stdout)
    assert report["ticks"] == 2
    assert report["planner_peak_rss_mib"] > 0
    assert report["world_peak_rss_mib"] > 0
    assert set(report["median_stage_s"]) >= {"S4_books", "S6_select"}

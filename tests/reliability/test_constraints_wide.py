"""The C1–C5 property over every catalog GPU and model, with finished-but-deployed jobs, shrunk
pools, C2-infeasible incumbents, quotas, priorities and hanging or raising plugins: every
committed plan is valid, and no tick falls back (a valid plan always exists: the safe one).

``benchmarks/reliability_soak.py`` runs the same property over many more examples."""

from __future__ import annotations

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koi.config import KoiConfig, PlannerConfig
from koi.planner import Planner
from koi.surrogate import Surrogate, SurrogateConfig
from koi.types import ClusterSnapshot
from tests.planner._world import CATALOG
from tests.reliability.fleets import Hanging, Raising, check_plan, snapshots

# The closed form only, one search round and no tick deadline: a few hundred ticks in under a
# minute.  The soak runs the default configuration.
FAST = attrs.evolve(
    KoiConfig(),
    planner=PlannerConfig(
        search_rounds=1, replay_top=0, proposer_timeout_s=0.2, tick_deadline_s=None
    ),
    surrogate=SurrogateConfig(use_replay=False),
)
SURROGATE = Surrogate(dict(CATALOG.gpus), dict(CATALOG.models), FAST.surrogate)


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(snapshot=snapshots(), plugin=st.integers(0, 19))
def test_committed_plans_satisfy_c1_to_c5_everywhere(
    snapshot: ClusterSnapshot, plugin: int
) -> None:
    hanging = Hanging()
    plugins: list[object] = []
    if plugin == 0:
        plugins.append(hanging)
    elif plugin == 1:
        plugins.append(Raising(SystemExit(2)))
    elif plugin == 2:
        plugins.append(Raising(RuntimeError("boom")))
    planner = Planner(config=FAST, catalog=CATALOG, plugins=plugins, surrogate=SURROGATE)
    try:
        result = planner.tick(snapshot)
    finally:
        hanging.release.set()
    assert not result.fallback, result.errors
    check_plan(planner, snapshot, result)

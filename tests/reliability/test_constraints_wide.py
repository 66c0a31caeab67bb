"""The C1–C5 property over every catalog GPU and model, with finished-but-deployed jobs, shrunk
pools, C2-infeasible incumbents, quotas, priorities and hanging or raising plugins: every
committed plan is valid, and no tick falls back (a valid plan always exists: the safe one).

``benchmarks/reliability_soak.py`` runs the same property over many more examples."""

from __future__ import annotations

from collections import Counter

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koi.config import KoiConfig, PlannerConfig
from koi.planner import Planner
from koi.surrogate import Surrogate, SurrogateConfig
from koi.types import ClusterSnapshot
from tests.planner._world import CATALOG
from tests.reliability.fleets import GPUS, MODELS, Hanging, Raising, check_plan, snapshots

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


def _situations(snapshot: ClusterSnapshot) -> set[str]:
    jobs = {j.id: j for j in snapshot.jobs}
    out = set()
    held: Counter[str] = Counter()
    for a in snapshot.active:
        job = jobs[a.job_id]
        if not job.is_online and job.remaining_requests == 0:
            out.add("finished but deployed")
        held.update(a.ladder.gpus_by_pool())
    if any(held[p.id] > p.capacity_gpus for p in snapshot.pools):
        out.add("shrunk pool")
    if any(not SURROGATE.feasibility(r.chain).ok for a in snapshot.active for r in a.ladder.ranks):
        out.add("C2-infeasible incumbent")
    if snapshot.quotas:
        out.add("quota")
    if len({j.priority for j in snapshot.jobs}) > 1:
        out.add("priorities")
    return out


def test_committed_plans_satisfy_c1_to_c5_everywhere() -> None:
    seen: Counter[str] = Counter()

    @settings(
        max_examples=200,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(snapshot=snapshots(), plugin=st.integers(0, 19))
    def check(snapshot: ClusterSnapshot, plugin: int) -> None:
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
        seen.update({p.environment.gpu for p in snapshot.pools})
        seen.update({j.model for j in snapshot.jobs})
        seen.update(_situations(snapshot))
        seen.update({("hanging", "raising SystemExit", "raising")[plugin]} if plugin < 3 else ())

    check()
    # What the 200 examples reached (the property would hold vacuously on a narrow strategy).
    wanted = {*GPUS, *MODELS, "finished but deployed", "shrunk pool", "C2-infeasible incumbent"}
    wanted |= {"quota", "priorities", "hanging", "raising SystemExit", "raising"}
    assert not wanted - seen.keys(), f"never drawn: {sorted(wanted - seen.keys())}"

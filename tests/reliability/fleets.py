"""Random and adversarial fleets for the C1–C5 property test and its soak.

Snapshots draw from every catalog environment (so every GPU) and every catalog model, with the
situations a host meets every day: finished batch jobs still deployed, pools shrunk under their
deployments, incumbents that fail C2, quotas below current use, priorities, and plugins that
hang, raise or send garbage.  :func:`check_plan` is the property: C1 per GPU and per instance
(with make-before-break peaks), C2, C3, C4, C5 quotas and the priority rule.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterable

from hypothesis import strategies as st

from koi.planner import Planner, TickResult
from koi.plugins import hookimpl
from koi.types import (
    ActionKind,
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Environment,
    Job,
    Ladder,
    LengthDist,
    Pool,
    Quant,
    Quota,
    Rank,
    ServingTarget,
    WorkloadProfile,
)
from tests.planner._world import CATALOG

ENVS: tuple[Environment, ...] = tuple(CATALOG.environments())
MODELS: tuple[str, ...] = tuple(sorted(CATALOG.models))
GPUS: tuple[str, ...] = tuple(sorted(CATALOG.gpus))


@st.composite
def envs(draw: st.DrawFn) -> Environment:
    """Every GPU equally likely, then one of its environments."""
    gpu = draw(st.sampled_from(GPUS))
    return draw(st.sampled_from([e for e in ENVS if e.gpu == gpu]))


@st.composite
def jobs(draw: st.DrawFn, k: int) -> Job:
    model = draw(st.sampled_from(MODELS))
    isl, osl = draw(st.sampled_from([(256, 64), (1024, 256), (4096, 128)]))
    lengths = (LengthDist(isl, 0.3, isl * 4), LengthDist(osl, 0.3, osl * 4))
    group = draw(st.sampled_from([None, "team-a", "team-b"]))
    priority = draw(st.integers(0, 3))
    if draw(st.booleans()):
        target = ServingTarget.online(
            p99_ttft_ms=draw(st.floats(200, 5000)), p99_tpot_ms=draw(st.floats(20, 200))
        )
        workload = WorkloadProfile(*lengths, rate_rps=draw(st.floats(0.2, 20.0)))
        return Job(f"j{k}", model, "online", workload, target, quota_group=group, priority=priority)
    total = draw(st.integers(10, 20_000))
    # One batch job in four has finished (what a host reports at the end of every batch job).
    done = total if draw(st.integers(0, 3)) == 0 else draw(st.integers(0, total))
    target = ServingTarget.batch(deadline_s=draw(st.floats(600, 20_000)))
    return Job(
        f"j{k}",
        model,
        "batch",
        WorkloadProfile(*lengths, total_requests=total),
        target,
        quota_group=group,
        priority=priority,
        completed_requests=done,
    )


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    """A fleet and its jobs; deployments ignore capacity on purpose (a pool may have shrunk
    under them) and ignore C2 (an incumbent may no longer fit)."""
    chosen = draw(st.lists(envs(), min_size=1, max_size=4, unique_by=lambda e: e.id))
    pools = [Pool(e, draw(st.integers(0, 3))) for e in chosen]
    js = [draw(jobs(k)) for k in range(draw(st.integers(1, 5)))]
    active = []
    for job in js:
        if not draw(st.booleans()):
            continue
        pool = draw(st.sampled_from(pools))
        env = pool.environment
        tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if t <= env.gpus_per_instance]))
        quant = draw(st.sampled_from([Quant.BF16, Quant.FP8]))
        chain = Chain(job.model, env, Config(tp=tp, quant=quant))
        replicas = draw(st.integers(1, 2))
        active.append(ActiveDeployment(job.id, Ladder((Rank(chain, replicas),))))
    quotas = [Quota("team-a", draw(st.integers(0, 16)))] if draw(st.booleans()) else []
    return ClusterSnapshot(600.0, js, pools, active, quotas)


class Hanging:
    """A proposer that blocks until released (named to sort before the built-in one)."""

    koi_plugin_name = "a-hanging-plugin"

    def __init__(self) -> None:
        self.release = threading.Event()

    @hookimpl
    def koi_propose_ladders(self, job: Job, context: object) -> list[Ladder]:
        self.release.wait(30)
        return []


class Raising:
    """A proposer that raises what a broken plugin raises, ``SystemExit`` included."""

    koi_plugin_name = "b-raising-plugin"

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    @hookimpl
    def koi_propose_ladders(self, job: Job, context: object) -> list[Ladder]:
        raise self.exc


def _instances(ranks: Iterable[Rank], env: Environment) -> int:
    """Instances needed to host ``ranks`` on ``env`` (first fit decreasing: chains whose GPUs
    divide the instance size, as koi's do, pack optimally)."""
    per = env.gpus_per_instance
    whole = 0
    pieces: list[int] = []
    for r in ranks:
        if r.chain.gpus >= per:
            whole += r.replicas * math.ceil(r.chain.gpus / per)
        else:
            pieces += [r.chain.gpus] * r.replicas
    bins: list[int] = []
    for size in sorted(pieces, reverse=True):
        for i, free in enumerate(bins):
            if free >= size:
                bins[i] -= size
                break
        else:
            bins.append(per - size)
    return whole + len(bins)


def check_plan(planner: Planner, snapshot: ClusterSnapshot, result: TickResult) -> None:
    """C1–C5 and the priority rule on a committed plan (assertions name what broke)."""
    plan = result.plan
    assert {a.job_id for a in plan.actions} == {j.id for j in snapshot.jobs}
    jobs = {j.id: j for j in snapshot.jobs}
    pools = {p.id: p for p in snapshot.pools}
    current = snapshot.current_ladders
    finished = {j.id for j in snapshot.jobs if not j.is_online and j.remaining_requests == 0}
    held: Counter[str] = Counter()  # a finished job's GPUs stay taken until its stop is applied
    stopping: Counter[str] = Counter()
    for dep in snapshot.active:
        held.update(dep.ladder.gpus_by_pool())
        if dep.job_id in finished:
            stopping.update(dep.ladder.gpus_by_pool())
    shrunk = {p for p, n in held.items() if n > pools[p].capacity_gpus}
    steady: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    ranks_in: dict[str, list[Rank]] = {}
    for a in plan.actions:
        if a.job_id in finished:
            assert a.kind is ActionKind.STOP, f"finished {a.job_id} not stopped: {a.kind}"
        for pool, gpus in a.ladder.gpus_by_pool().items():
            steady[pool] += gpus
        for r in a.ladder.ranks:
            ranks_in.setdefault(r.chain.environment.id, []).append(r)
        if a.kind is ActionKind.RECONFIGURE:  # make-before-break, except on a shrunk pool
            switch = a.ladder.switch_peak_by_pool(current[a.job_id])
            new = a.ladder.gpus_by_pool()
            for pool in switch.keys() | new.keys():
                peak[pool] += new.get(pool, 0) if pool in shrunk else switch.get(pool, 0)
        else:
            peak.update(a.ladder.gpus_by_pool())
    for pool, used in steady.items():  # C1 after the plan, everywhere
        cap = max(pools[pool].capacity_gpus - stopping[pool], 0)
        assert used <= cap, f"C1 {pool}: {used} GPUs"
    for pool, used in peak.items():  # C1 during the switch, where it held before
        if pool not in shrunk:
            cap = pools[pool].capacity_gpus - stopping[pool]
            assert used <= cap, f"C1 peak {pool}: {used} GPUs"
    for pool, ranks in ranks_in.items():  # C1 per instance
        need = _instances(ranks, pools[pool].environment)
        assert need <= pools[pool].capacity_instances, f"C1 {pool}: {need} instances"
    for a in plan.actions:  # C2 for every new ladder
        if a.kind in (ActionKind.PLACE, ActionKind.RECONFIGURE):
            for rank in a.ladder.ranks:
                assert planner.surrogate.feasibility(rank.chain).ok, f"C2 {a.job_id}"
    tau = planner.config.planner.tau
    # GPUs nobody holds now (``held`` already counts the finished jobs' until their stop).
    free = Counter({p: pools[p].capacity_gpus for p in pools})
    free.subtract(held)
    best_effort: Counter[str] = Counter()
    for c in result.candidates:  # C3 for every chosen change but the best-effort ones...
        if c.chosen and c.kind in (ActionKind.PLACE, ActionKind.RECONFIGURE):
            if "best-effort" in c.sources:
                best_effort.update(c.ladder.gpus_by_pool())
            else:
                assert c.breach_probability <= tau, f"C3 {c.job_id}"
    for pool, used in best_effort.items():  # ...which take only GPUs nobody holds
        assert used <= max(free[pool], 0), f"best effort on {pool}: {used} GPUs"
    moved = sum(a.kind is ActionKind.RECONFIGURE for a in plan.actions)
    assert moved <= result.knobs["swap_budget"], "C4"
    for quota in snapshot.quotas:  # C5 quotas
        group = [j for j in jobs if jobs[j].quota_group == quota.group]
        used = sum(plan.action(j).ladder.gpus for j in group)
        was = sum(current[j].gpus for j in group if j in current and j not in finished)
        assert used <= max(quota.max_gpus, was), f"C5 quota {quota.group}"
    _check_priority_rule(snapshot, result)


def _check_priority_rule(snapshot: ClusterSnapshot, result: TickResult) -> None:
    """While a pending job with a candidate that fits alone is deferred, no lower-priority job
    takes new GPUs in a pool that candidate needs."""
    plan = result.plan
    jobs = {j.id: j for j in snapshot.jobs}
    capacity = {p.id: p.capacity_gpus for p in snapshot.pools}
    caps = {q.group: q.max_gpus for q in snapshot.quotas}
    current = snapshot.current_ladders
    for h in jobs.values():
        if h.id in current or plan.action(h.id).kind is not ActionKind.DEFER:
            continue
        needs: set[str] = set()
        for c in result.candidates_for(h.id):
            if c.rejected or c.kind is not ActionKind.PLACE or "best-effort" in c.sources:
                continue
            use = c.ladder.gpus_by_pool()
            cap = caps.get(h.quota_group or "", math.inf)
            if all(n <= capacity[p] for p, n in use.items()) and c.ladder.gpus <= cap:
                needs.update(use)
        for a in plan.actions:
            k = jobs[a.job_id]
            if k.priority >= h.priority or a.kind not in (ActionKind.PLACE, ActionKind.RECONFIGURE):
                continue
            before = current[k.id].gpus_by_pool() if k.id in current else {}
            for pool, n in a.ladder.gpus_by_pool().items():
                assert not (pool in needs and n > before.get(pool, 0)), (
                    f"priority: {k.id} (priority {k.priority}) takes {pool} while {h.id} "
                    f"(priority {h.priority}) is deferred"
                )

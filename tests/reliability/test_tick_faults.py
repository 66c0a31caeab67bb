"""Issue items 2-6 and 9 at the tick: what a host reports every day never freezes the fleet."""

from __future__ import annotations

import errno
import threading
import time
from collections import Counter
from pathlib import Path

import attrs
import pytest

from koi.config import KoiConfig, PlannerConfig
from koi.planner import Planner, TickResult
from koi.planner._checkpoint import load_checkpoint
from koi.plugins import hookimpl
from koi.types import (
    ActionKind,
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Job,
    Ladder,
    LaunchResult,
    LengthDist,
    Plan,
    Pool,
    Rank,
    ServingTarget,
    WorkloadProfile,
)
from tests.planner._world import CATALOG, chat_job


def _env(gpu: str, per_instance: int = 1):  # type: ignore[no-untyped-def]
    return next(
        e
        for e in CATALOG.environments(clouds=["aws"], markets=["on_demand"], gpus=[gpu])
        if e.region == "us-east-1" and e.gpus_per_instance == per_instance
    )


L40S = _env("L40S")
L4 = _env("L4")


def _batch(job_id: str, *, total: int = 1000, done: int = 0) -> Job:
    workload = WorkloadProfile(
        LengthDist(512, 0.3, 2048), LengthDist(128, 0.3, 512), total_requests=total
    )
    return Job(
        job_id,
        "Llama-3.1-8B",
        "batch",
        workload,
        ServingTarget.batch(deadline_s=20_000),
        completed_requests=done,
    )


def _ladder(env, model: str = "Llama-3.1-8B", replicas: int = 1) -> Ladder:  # type: ignore[no-untyped-def]
    return Ladder((Rank(Chain(model, env, Config()), replicas),))


def _steady_use(result: TickResult) -> Counter[str]:
    use: Counter[str] = Counter()
    for a in result.plan.actions:
        use.update(a.ladder.gpus_by_pool())
    return use


def test_a_finished_batch_job_still_deployed_is_stopped_and_its_gpus_freed() -> None:
    done = _batch("done", total=500, done=500)
    waiting = chat_job("chat", rate=2.0)
    pool = Pool(L40S, 1)  # the finished job holds the only GPU
    snap = ClusterSnapshot(
        600.0, [done, waiting], [pool], [ActiveDeployment("done", _ladder(L40S))]
    )
    planner = Planner(catalog=CATALOG)
    result = planner.tick(snap)
    assert not result.fallback, result.errors
    assert result.plan.action("done").kind is ActionKind.STOP
    # Its GPU stays taken until the host applies the stop; then the waiting job gets it.
    assert result.plan.action("chat").kind is ActionKind.DEFER
    after = planner.tick(ClusterSnapshot(900.0, [done, waiting], [pool]))
    assert after.plan.action("chat").kind is ActionKind.PLACE


def test_a_pool_shrunk_under_its_deployments_sheds_the_excess() -> None:
    # A TPOT bound one FP8 L4 replica meets with room (p99 ~58 ms predicted), so the spare L4
    # pool can take what the shrunk pool sheds.
    target = ServingTarget.online(p99_ttft_ms=1500, p99_tpot_ms=75)
    a, b = (attrs.evolve(chat_job(j, rate=1.0), target=target) for j in ("a", "b"))
    shrunk, spare = Pool(L40S, 1), Pool(L4, 4)
    active = [
        ActiveDeployment("a", _ladder(L40S, replicas=2)),
        ActiveDeployment("b", _ladder(L40S)),
    ]
    snap = ClusterSnapshot(600.0, [a, b], [shrunk, spare], active)
    result = Planner(catalog=CATALOG).tick(snap)
    assert not result.fallback, result.errors
    use = _steady_use(result)
    assert use[shrunk.id] <= 1  # C1 holds after the plan
    assert use[spare.id] <= spare.capacity_gpus
    kinds = {a.kind for a in result.plan.actions}
    assert kinds & {ActionKind.STOP, ActionKind.RECONFIGURE}  # something was shed ...
    assert use[spare.id] > 0  # ... placed elsewhere, since the spare pool has room ...
    assert all(not a.ladder.is_empty for a in result.plan.actions)  # ... and nothing stops


def test_the_safe_plan_also_sheds_a_shrunk_pool() -> None:
    class Broken:
        koi_plugin_name = "broken-books"

        @hookimpl
        def koi_budget_books(self, snapshot: object) -> object:
            return "not a mapping"  # a PluginError in S4: the tick falls back

    a, b = chat_job("a", rate=1.0), chat_job("b", rate=1.0)
    a = attrs.evolve(a, priority=2)
    shrunk = Pool(L40S, 1)
    active = [ActiveDeployment("a", _ladder(L40S)), ActiveDeployment("b", _ladder(L40S), 300.0)]
    snap = ClusterSnapshot(600.0, [a, b], [shrunk], active)
    result = Planner(catalog=CATALOG, plugins=[Broken()]).tick(snap)
    assert result.fallback
    assert result.plan.action("a").kind is ActionKind.KEEP  # higher priority stays
    assert result.plan.action("b").kind is ActionKind.STOP
    assert "shed" in result.plan.action("b").reason
    assert _steady_use(result)[shrunk.id] <= 1
    # The service it sheds is reported at risk, in the result and in the plan.
    (risk,) = result.at_risk
    assert (risk.job_id, risk.verdict.value) == ("b", "unserved")
    assert "shed" in risk.detail
    assert result.plan.diagnostics["at_risk"] == {"b": "unserved"}


def test_c2_infeasible_incumbents_beyond_the_swap_budget_still_get_a_plan() -> None:
    # A 70B model cannot fit on one 24 GB L4: every one of these incumbents fails C2.
    jobs = [chat_job(f"big{k}", rate=0.5, model="Llama-3.1-70B") for k in range(4)]
    jobs.append(chat_job("small", rate=1.0))
    pools = [Pool(L4, 8), Pool(L40S, 4)]
    active = [ActiveDeployment(j.id, _ladder(L4, j.model)) for j in jobs[:4]]
    snap = ClusterSnapshot(600.0, jobs, pools, active)
    planner = Planner(catalog=CATALOG)
    assert not planner.surrogate.feasibility(active[0].ladder.ranks[0].chain).ok
    result = planner.tick(snap)
    assert not result.fallback, result.errors
    assert result.knobs["swap_budget"] < 4
    assert result.plan.action("small").kind is ActionKind.PLACE
    for j in jobs[:4]:
        assert result.plan.action(j.id).kind is not ActionKind.KEEP


class _Hang:
    def __init__(self, hooks: set[str]) -> None:
        self.hooks = hooks
        self.koi_plugin_name = "hang-" + "-".join(sorted(hooks))
        self.release = threading.Event()

    def _maybe(self, hook: str) -> None:
        if hook in self.hooks:
            self.release.wait(60)

    @hookimpl
    def koi_collect_telemetry(self, ranks: object, window: object) -> list[object]:
        self._maybe("telemetry")
        return []

    @hookimpl
    def koi_propose_ladders(self, job: Job, context: object) -> list[Ladder]:
        self._maybe("propose")
        return []

    @hookimpl
    def koi_launch(self, plan: Plan) -> list[LaunchResult]:
        self._maybe("launch")
        return []

    @hookimpl
    def koi_plan_committed(self, plan: Plan, report: object) -> None:
        self._maybe("audit")


@pytest.mark.parametrize("hooks", [{"telemetry"}, {"propose"}, {"launch", "audit"}])
def test_hanging_plugins_are_abandoned_at_the_tick_deadline(hooks: set[str]) -> None:
    deadline = 20.0
    cfg = attrs.evolve(
        KoiConfig(), planner=PlannerConfig(tick_deadline_s=deadline, proposer_timeout_s=1000.0)
    )
    hang = _Hang(hooks)
    planner = Planner(catalog=CATALOG, config=cfg, plugins=[hang])
    job = chat_job()
    pools = [Pool(L40S, 2)]
    first = Planner(catalog=CATALOG).tick(ClusterSnapshot(0.0, [job], pools))
    active = [ActiveDeployment("chat", first.plan.action("chat").ladder)]
    planner.state = attrs.evolve(planner.state, last_time_s=0.0)  # so telemetry is asked for
    start = time.monotonic()
    try:
        result = planner.tick(ClusterSnapshot(300.0, [job], pools, active))
    finally:
        hang.release.set()
    assert time.monotonic() - start < deadline + 3.0
    assert any("abandoned" in e for e in result.errors), result.errors
    assert _steady_use(result)[pools[0].id] <= pools[0].capacity_gpus
    if "propose" in hooks:  # proposals cut short: no job counts as reviewed (so none settles)
        assert planner._reviews == {}


class _Recorder:
    koi_plugin_name = "recorder"

    def __init__(self, *, fail_launch: bool = False, fail_audit: bool = False) -> None:
        self.launched: list[Plan] = []
        self.fail_launch, self.fail_audit = fail_launch, fail_audit

    @hookimpl
    def koi_launch(self, plan: Plan) -> list[LaunchResult]:
        self.launched.append(plan)
        if self.fail_launch:
            raise RuntimeError("cloud API: quota exceeded")
        return []

    @hookimpl
    def koi_plan_committed(self, plan: Plan, report: object) -> None:
        if self.fail_audit:
            raise RuntimeError("audit sink unreachable")


def test_launcher_and_audit_failures_reach_the_result() -> None:
    rec = _Recorder(fail_launch=True, fail_audit=True)
    result = Planner(catalog=CATALOG, plugins=[rec]).tick(
        ClusterSnapshot(0.0, [chat_job()], [Pool(L40S, 2)])
    )
    assert any("launch" in e and "quota exceeded" in e for e in result.errors)
    assert any("koi_plan_committed" in e and "audit sink unreachable" in e for e in result.errors)


def test_a_failed_checkpoint_write_launches_nothing_and_keeps_memory_and_disk_equal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    rec = _Recorder()
    planner = Planner(catalog=CATALOG, plugins=[rec], state_path=path)
    snap = ClusterSnapshot(0.0, [chat_job()], [Pool(L40S, 2)])
    planner.tick(snap)
    assert len(rec.launched) == 1
    on_disk = load_checkpoint(path)

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("koi.planner._checkpoint.os.fsync", full)
    result = planner.tick(attrs.evolve(snap, time_s=300.0))  # does not raise
    assert not result.committed
    assert any("checkpoint" in e and "No space left" in e for e in result.errors)
    assert len(rec.launched) == 1  # nothing launched without its state on disk
    assert planner.state.tick == 1
    assert load_checkpoint(path) == on_disk == planner.state.to_data() | {}  # unchanged
    monkeypatch.undo()
    again = planner.tick(attrs.evolve(snap, time_s=600.0))
    assert again.committed
    assert len(rec.launched) == 2
    assert planner.state.tick == 2

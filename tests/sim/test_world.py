"""The simulated fleet's dynamics and the Must-show behaviours of issue 7."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import attrs
import pytest

from koi.catalog import Catalog
from koi.errors import InvalidInput
from koi.sim import (
    DeferAll,
    LaunchConfig,
    SimConfig,
    build_world,
    greedy_first_fit,
    over_provision,
    run,
)
from koi.types import (
    ActionKind,
    Chain,
    ClusterSnapshot,
    Config,
    JobAction,
    Ladder,
    Observation,
    Outcome,
    Plan,
    Rank,
)

from .conftest import Fixed, by_job, one_rank, online_job_toml, pool_toml, tiny

RELIABLE = SimConfig(launch=LaunchConfig(fail_prob=0.0, slow_prob=0.0))


def test_defer_all_scores_zero() -> None:
    r = run("smoke", DeferAll(), seed=0)
    m = r.metrics
    assert m.offered_tok_s > 0  # the work was offered ...
    assert m.goodput_tok_s == 0.0  # ... and refusing it earns nothing
    assert m.online_admission == 0.0
    assert m.batch_admission == 0.0
    assert m.ttft_attainment == 0.0
    assert m.batch_progress == 0.0
    assert m.composite == 0.0
    assert m.cost_usd == 0.0


def test_over_provisioning_meets_latency_but_pays_for_idle(catalog: Catalog) -> None:
    sc = tiny(pool_toml(instances=12) + online_job_toml(rate=40, inp=500, out=100))
    right = run(sc, greedy_first_fit(catalog.gpus, catalog.models), seed=0, cfg=RELIABLE)
    over = run(sc, over_provision(catalog.gpus, catalog.models), seed=0, cfg=RELIABLE)
    assert max(over.series["gpus"]) >= 2 * max(right.series["gpus"])
    for m in (over.metrics, right.metrics):
        assert m.ttft_attainment > 0.9
        assert m.tpot_attainment > 0.9
    assert over.metrics.cost_per_slo_token_usd > 2 * right.metrics.cost_per_slo_token_usd
    assert over.metrics.efficiency < right.metrics.efficiency


def test_overload_grows_ttft() -> None:
    sc = tiny(pool_toml(instances=2) + online_job_toml(rate=80, inp=500, out=100), minutes=40)
    policy = Fixed(one_rank("Llama-3.1-8B"))
    result = run(sc, policy, seed=0, cfg=RELIABLE)
    ttfts = [obs[0].outcomes.p99_ttft_ms for _, obs in policy.seen if obs]
    assert len(ttfts) >= 5
    assert all(b > a for a, b in itertools.pairwise(ttfts[1:]))  # grows every window
    assert ttfts[-1] > 3 * ttfts[1]
    assert ttfts[-1] > 10 * 1000  # far past the 1 s bound
    assert result.metrics.ttft_attainment < 0.2
    assert result.metrics.dropped_requests < 0.1 * result.metrics.offered_tok_s * 2400 / 100
    healthy = [obs[0].healthy for _, obs in policy.seen if obs]
    assert not any(healthy[1:])


def test_overload_still_shows_when_windows_are_sampled() -> None:
    """A sampled window (each replayed request standing for several) still shows overload."""
    sc = tiny(pool_toml(instances=2) + online_job_toml(rate=80, inp=500, out=100), minutes=40)
    policy = Fixed(one_rank("Llama-3.1-8B"))
    cfg = attrs.evolve(
        RELIABLE, sampling=attrs.evolve(RELIABLE.sampling, max_requests_per_window=400)
    )
    run(sc, policy, seed=0, cfg=cfg)
    ttfts = [obs[0].outcomes.p99_ttft_ms for _, obs in policy.seen if obs]
    assert ttfts[-1] > 3 * ttfts[1]
    reqs = [obs[0].requests for _, obs in policy.seen if obs]
    assert reqs[-1] == pytest.approx(80 * 300, rel=0.1)  # scaled back to world counts


def test_a_sampled_window_counts_requests_in_flight_once() -> None:
    """Long outputs, well within capacity: the launch window ends with a full running batch.
    A real 300 s window ends with that batch in flight, not ``scale`` times it, so its
    telemetry finishes nearly all it was sent (counted as a flow, 64 % here, with an empty
    queue: koi read such windows after a launch as overloaded)."""
    sc = tiny(pool_toml(instances=2) + online_job_toml(rate=8, out=600, tpot=200), minutes=20)
    policy = Fixed(one_rank("Llama-3.1-8B"))
    cfg = attrs.evolve(
        RELIABLE, sampling=attrs.evolve(RELIABLE.sampling, max_requests_per_window=200)
    )
    run(sc, policy, seed=0, cfg=cfg)
    windows = [o for _, obs in policy.seen for o in obs]
    assert windows[0].mediators.mean_batch_size > 20  # many in flight at the window's end
    assert windows[0].mediators.queue_depth < 1
    for o in windows:
        assert o.completed == pytest.approx(o.requests, rel=0.1)


def test_a_window_in_which_no_request_finished_reports_no_tpot() -> None:
    """Outputs that take longer than the sampled window: no request of the launch window
    finishes in it, so it has no TPOT sample.  It is reported missing (a real source has no
    data), not as a p99 TPOT of 0 ms that a planner would read as a perfect rank; p99 TTFT
    was measured, and the SLO margin is taken over it."""
    sc = tiny(pool_toml(instances=2) + online_job_toml(rate=8, out=4000, tpot=200), minutes=15)
    policy = Fixed(one_rank("Llama-3.1-8B"))
    cfg = attrs.evolve(
        RELIABLE, sampling=attrs.evolve(RELIABLE.sampling, max_requests_per_window=200)
    )
    run(sc, policy, seed=0, cfg=cfg)
    first, *later = [o for _, obs in policy.seen for o in obs]
    assert first.measured(Outcome.TPOT) is None
    assert "p99_tpot_ms" in first.missing
    ttft = first.measured(Outcome.TTFT)
    assert ttft is not None
    assert ttft > 0
    assert first.measured(Outcome.SLO_MARGIN) == pytest.approx(min(1.0, (1000 - ttft) / 1000))
    assert later
    assert all(o.measured(Outcome.TPOT) for o in later)  # measured once some finish


@pytest.mark.parametrize("notice", [False, True])
def test_preempted_spot_rank_loses_capacity(notice: bool) -> None:
    pool = pool_toml(instances=2, market="spot", preemption=0.0)
    event = (
        "[[events]]\nat_min = 10\nkind = 'preemption'\n"
        f"pool = 'lab/r1/spot/box'\ninstances = 1\nnotice = {str(notice).lower()}\n"
    )
    sc = tiny(pool + online_job_toml(rate=5) + event)
    policy = Fixed(one_rank("Llama-3.1-8B", replicas=2))
    run(sc, policy, seed=0, cfg=RELIABLE)
    snaps = [s for s, _ in policy.seen]
    obs = [o for _, o in policy.seen]
    assert snaps[2].pools[0].capacity_instances == (1 if notice else 2)
    assert snaps[3].pools[0].capacity_instances == 1
    assert snaps[3].current_ladders["chat"].replicas == 1
    if notice:
        assert snaps[2].current_ladders["chat"].replicas == 1  # announced: shown as gone
        assert obs[3][0].replicas_up == 1
    else:
        during = obs[3][0]  # telemetry of the window in which the instance vanished
        assert during.replicas_up == 1
        assert not during.healthy


def test_spot_hazard_preempts() -> None:
    sc = tiny(pool_toml(instances=4, market="spot", preemption=20.0) + online_job_toml(rate=2))
    policy = Fixed(one_rank("Llama-3.1-8B", replicas=4))
    result = run(sc, policy, seed=0, cfg=RELIABLE)
    assert any("preempted" in e for t in result.trace.ticks for e in t.events)
    assert any(o.replicas_up < 4 for _, obs in policy.seen for o in obs)


def test_same_seed_same_metrics(catalog: Catalog) -> None:
    a = run("smoke", greedy_first_fit(catalog.gpus, catalog.models), seed=3)
    b = run("smoke", greedy_first_fit(catalog.gpus, catalog.models), seed=3)
    c = run("smoke", greedy_first_fit(catalog.gpus, catalog.models), seed=4)
    assert a.metrics == attrs.evolve(
        b.metrics,
        plan_time_median_s=a.metrics.plan_time_median_s,
        plan_time_p95_s=a.metrics.plan_time_p95_s,
    )
    assert a.trace.batch == b.trace.batch
    assert a.metrics.goodput_tok_s != c.metrics.goodput_tok_s


@attrs.define
class _Cheat:
    """Asks for what it may not have: too many GPUs, an infeasible chain, a forged price."""

    name: str = "cheat"
    mode: str = "capacity"

    def decide(self, snapshot: ClusterSnapshot, observations: object) -> Plan:
        del observations
        env = snapshot.pools[0].environment
        model, config, n = "Llama-3.1-8B", Config(), 1
        if self.mode == "capacity":
            n = snapshot.pools[0].capacity_instances + 1
        elif self.mode == "infeasible":
            config = Config(tp=2)  # two GPUs on one-GPU instances
        elif self.mode == "forged":
            env = attrs.evolve(env, price_usd_per_h=0.01)
        elif self.mode == "wrong-model":
            model = "Qwen3-8B"
        actions = [
            JobAction(j.id, ActionKind.PLACE, Ladder((Rank(Chain(model, env, config), n),)))
            for j in snapshot.jobs
        ]
        actions.append(JobAction("ghost", ActionKind.DEFER))
        return Plan(snapshot.time_s, actions)


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("capacity", "capacity (C1)"),
        ("infeasible", "infeasible (C2)"),
        ("forged", "environment differs"),
        ("wrong-model", "is not the job's"),
    ],
)
def test_safety_checks_reject_cheating(mode: str, reason: str) -> None:
    sc = tiny(pool_toml(instances=2, gpu="L4", price=0.8) + online_job_toml(rate=1))
    result = run(sc, _Cheat(mode=mode), seed=0)
    rejected = [r for t in result.trace.ticks for r in t.rejected]
    assert any(reason in r for r in rejected)
    assert any("ghost: unknown" in r for r in rejected)
    assert result.metrics.goodput_tok_s == 0.0
    assert result.metrics.cost_usd == 0.0


def test_launch_delay_scales_with_model_size(catalog: Catalog) -> None:
    body = (
        pool_toml(instances=8, gpus_per_instance=8, price=40)
        + online_job_toml(job_id="small", model="Llama-3.2-1B", rate=4)
        + online_job_toml(job_id="big", model="Llama-3.1-70B", rate=4, tpot=200, ttft=5000)
    )
    sc = tiny(body)
    policy = Fixed(
        by_job(
            {
                "small": one_rank("Llama-3.2-1B"),
                "big": one_rank("Llama-3.1-70B", tp=4),
            }
        )
    )
    result = run(sc, policy, seed=0, cfg=RELIABLE)
    first = {w.job_id: w for w in result.trace.ticks[0].jobs}
    assert first["big"].dropped > first["small"].dropped > 0
    second = {w.job_id: w for w in result.trace.ticks[1].jobs}
    assert second["small"].dropped == 0


@attrs.define
class _Switcher:
    """Places one replica on pool 0, then at the second tick moves it to ``target``."""

    target: tuple[int, Config]
    name: str = "switcher"
    ticks: int = 0

    def decide(self, snapshot: ClusterSnapshot, observations: object) -> Plan:
        del observations
        self.ticks += 1
        pool, config = (0, Config()) if self.ticks < 2 else self.target
        env = snapshot.pools[pool].environment
        ladder = Ladder((Rank(Chain("Llama-3.1-8B", env, config), 1),))
        kind = ActionKind.PLACE if self.ticks == 1 else ActionKind.RECONFIGURE
        return Plan(snapshot.time_s, [JobAction("chat", kind, ladder)])


def test_make_before_break_keeps_serving() -> None:
    body = (
        pool_toml(instances=2) + pool_toml(instance="other", instances=1) + online_job_toml(rate=5)
    )
    result = run(tiny(body), _Switcher((1, Config())), seed=0, cfg=RELIABLE)
    switch = result.trace.ticks[1]
    assert switch.swaps == 1
    chat = next(w for w in switch.jobs if w.job_id == "chat")
    assert chat.dropped == 0  # the old chain served until the new one was up
    assert chat.gpus == 2  # both held during the switch
    later = next(w for w in result.trace.ticks[2].jobs if w.job_id == "chat")
    assert later.gpus == 1


def test_a_swap_hands_its_requests_in_flight_to_the_new_chain() -> None:
    """Long outputs on sampled windows (each replayed request stands for thirty): the
    replaced chain still runs requests when the new one takes over, with too little of the
    window left to finish them.  They move to the new chain and finish there, and those
    running when the run ends are left out of what was offered, so every request is
    finished, dropped (before the first launch) or still running.  Lost with the old chain,
    they were 12 % of the job's traffic."""
    body = (
        pool_toml(instances=2)
        + pool_toml(instance="other", instances=1)
        + online_job_toml(rate=2, out=1500, tpot=200)
    )
    cfg = attrs.evolve(
        RELIABLE, sampling=attrs.evolve(RELIABLE.sampling, max_requests_per_window=20)
    )
    result = run(tiny(body), _Switcher((1, Config())), seed=0, cfg=cfg)
    assert result.trace.ticks[1].swaps == 1
    in_flight = result.trace.in_flight["chat"]
    assert in_flight > 300
    windows = [w for t in result.trace.ticks for w in t.jobs]
    offered = sum(w.offered for w in windows)
    done = sum(w.finished + w.dropped for w in windows)
    assert done + in_flight == pytest.approx(offered, rel=0.005)


@pytest.mark.parametrize("notice", [False, True])
def test_a_preempted_rank_hands_its_requests_to_the_other_rank(notice: bool) -> None:
    """A two-rank ladder whose spot rank is preempted (announced: it runs to the next tick
    and is then discarded).  Its requests finish on the on-demand rank; nothing is lost."""
    body = (
        pool_toml(instances=1, market="spot")
        + pool_toml(instance="other", instances=1)
        + online_job_toml(rate=2, out=1500, tpot=200)
        + "[[events]]\nat_min = 10\nkind = 'preemption'\n"
        + f"pool = 'lab/r1/spot/box'\ninstances = 1\nnotice = {str(notice).lower()}\n"
    )

    def two_ranks(snapshot: ClusterSnapshot, job_id: str) -> Ladder:
        del job_id
        chains = [Chain("Llama-3.1-8B", p.environment, Config()) for p in snapshot.pools]
        return Ladder(tuple(Rank(c, 1) for c in chains))

    cfg = attrs.evolve(
        RELIABLE, sampling=attrs.evolve(RELIABLE.sampling, max_requests_per_window=20)
    )
    policy = Fixed(two_ranks)
    result = run(tiny(body), policy, seed=0, cfg=cfg)
    assert policy.seen[-1][0].current_ladders["chat"].replicas == 1
    windows = [w for t in result.trace.ticks for w in t.jobs]
    offered = sum(w.offered for w in windows)
    done = sum(w.finished + w.dropped for w in windows)
    assert done + result.trace.in_flight["chat"] == pytest.approx(offered, rel=0.005)


def test_break_before_make_when_full() -> None:
    """Moving within a full pool cannot overlap: the job goes dark while the new chain loads."""
    body = pool_toml(instances=1) + online_job_toml(rate=5)
    result = run(tiny(body), _Switcher((0, Config(quant="fp8"))), seed=0, cfg=RELIABLE)
    chat = next(w for w in result.trace.ticks[1].jobs if w.job_id == "chat")
    assert result.trace.ticks[1].swaps == 1
    assert chat.dropped > 0
    assert chat.gpus == 1


def test_a_draining_chain_yields_to_a_plan_that_fits_the_snapshot() -> None:
    """A chain replaced make-before-break drains on GPUs that the snapshot, which counts
    whole instances, shows as free (here four of one 8-GPU instance). A plan that fits the
    snapshot takes them: the drain stops and nothing is rejected (it was refused as over
    capacity, although the planner could not have known)."""
    body = pool_toml(gpus_per_instance=8, instances=1)
    body += online_job_toml(job_id="a") + online_job_toml(job_id="b")
    world = build_world(tiny(body), seed=0, cfg=RELIABLE)
    env = world.snapshot().pools[0].environment

    def ladder(tp: int, replicas: int) -> Ladder:
        return Ladder((Rank(Chain("Llama-3.1-8B", env, Config(tp=tp)), replicas),))

    world.apply(Plan(0.0, [JobAction("a", ActionKind.PLACE, ladder(4, 1))]))
    world.apply(Plan(0.0, [JobAction("a", ActionKind.RECONFIGURE, ladder(2, 1))]))
    assert world.snapshot().pools[0].capacity_gpus == 8  # 2 shown, 4 draining, 6 free
    place_b = JobAction("b", ActionKind.PLACE, ladder(2, 3))
    result = world.apply(Plan(0.0, [JobAction("a", ActionKind.KEEP, ladder(2, 1)), place_b]))
    assert result.rejected == ()
    assert result.places == 1
    assert world.cost_and_gpus(1.0)[1] == {"H100-SXM": 8}  # the drain gave its GPUs back


def test_batch_job_finishes_and_meets_its_deadline(catalog: Catalog) -> None:
    r = run("smoke", over_provision(catalog.gpus, catalog.models), seed=0)
    (b,) = r.trace.batch
    assert b.done_s is not None
    assert b.done_s < b.deadline_s
    assert b.completed_by_deadline == b.requested
    assert r.metrics.deadline_attainment == 1.0
    assert r.metrics.batch_progress == 1.0
    # Finished jobs leave the snapshot and release their GPUs.
    last = r.trace.ticks[-1]
    assert next(w for w in last.jobs if w.job_id == b.job_id).gpus == 0


@pytest.mark.parametrize("requests", [1, 7])
def test_a_batch_job_is_credited_with_no_more_work_than_it_has(requests: int) -> None:
    """A sampled window's request stands for many (30 here at the least); the one that
    finishes a small job stands only for the work that was left."""
    body = (
        pool_toml(instances=1)
        + f"""
[[jobs]]
id = "tiny-batch"
model = "Llama-3.2-1B"
class = "batch"
input = {{ mean = 600, cv = 0.5, max = 2048 }}
output = {{ mean = 50, cv = 0.0, max = 100 }}
requests = {requests}
deadline_min = 20
"""
    )
    r = run(tiny(body, minutes=20), Fixed(one_rank("Llama-3.2-1B")), seed=0, cfg=RELIABLE)
    (b,) = r.trace.batch
    assert b.completed_by_deadline == requests
    assert b.output_tokens == pytest.approx(50 * requests)
    finished = sum(w.finished for t in r.trace.ticks for w in t.jobs)
    assert finished == pytest.approx(requests)
    assert r.metrics.goodput_tok_s <= r.metrics.offered_tok_s * (1 + 1e-9)


def test_driver_update_moves_observed_speed() -> None:
    event = "[[events]]\nat_min = 10\nkind = 'driver_update'\ngpu = 'H100-SXM'\nspeed = 0.5\n"
    sc = tiny(pool_toml(instances=2) + online_job_toml(rate=2, out=200) + event)
    policy = Fixed(one_rank("Llama-3.1-8B"))
    run(sc, policy, seed=0, cfg=RELIABLE)
    tpot = [obs[0].outcomes.p99_tpot_ms for _, obs in policy.seen if obs]
    before, after = tpot[1], tpot[-1]
    assert after == pytest.approx(2 * before, rel=0.35)


def test_workload_drift_is_hidden_from_the_snapshot() -> None:
    event = "[[events]]\nat_min = 10\nkind = 'workload_drift'\njob = 'chat'\nrate_scale = 3.0\n"
    sc = tiny(pool_toml(instances=2) + online_job_toml(rate=2) + event)
    policy = Fixed(one_rank("Llama-3.1-8B"))
    run(sc, policy, seed=0, cfg=RELIABLE)
    snaps = [s for s, _ in policy.seen]
    assert snaps[-1].jobs[0].workload.rate_rps == 2.0  # the declared profile
    reqs = [obs[0].requests for _, obs in policy.seen if obs]
    assert reqs[-1] > 2.2 * reqs[1]  # telemetry sees the real traffic


def test_the_true_workload_is_the_drifted_one() -> None:
    event = "[[events]]\nat_min = 10\nkind = 'workload_drift'\njob = 'chat'\nrate_scale = 3.0\n"
    world = build_world(tiny(pool_toml(instances=2) + online_job_toml(rate=2) + event), seed=0)
    assert world.true_workload("chat").rate_rps == 2.0
    world.begin_tick(2, 600.0)
    assert world.true_workload("chat").rate_rps == 6.0
    assert world.snapshot().jobs[0].workload.rate_rps == 2.0  # the snapshot shows the declared
    with pytest.raises(InvalidInput, match="unknown job 'nope'"):
        world.true_workload("nope")


def test_observations_are_complete(catalog: Catalog) -> None:
    policy = Fixed(one_rank("Llama-3.1-8B"))
    sc = tiny(pool_toml(instances=2) + online_job_toml(rate=4))
    run(sc, policy, seed=0, cfg=RELIABLE)
    o = policy.seen[2][1][0]
    assert o.requests > 0
    assert o.completed > 0
    assert o.replicas_up == 1
    assert o.healthy
    assert 0 < o.outcomes.p99_ttft_ms < 1000
    assert 0 < o.outcomes.p99_tpot_ms < 60
    assert o.outcomes.throughput_tok_s == pytest.approx(4 * 100, rel=0.25)
    assert math.isfinite(o.outcomes.cost_per_mtok_usd)
    assert 0 < o.outcomes.slo_margin <= 1
    med = o.mediators
    assert 0 < med.kv_cache_util < 1
    assert med.mean_batch_size > 0
    assert 0 < med.mem_bw_util <= 1
    assert 0 < med.compute_util <= 1
    assert 0 < med.prefill_share < 1
    assert 0 < med.memory_pressure < 1
    assert med.comm_share == 0  # tp = 1


def test_world_never_exposes_truth() -> None:
    world = build_world("smoke", seed=0)
    public = {n for n in dir(world) if not n.startswith("_")}
    assert not any("truth" in n or "factor" in n for n in public)


def test_batch_work_lost_to_preemption_is_redone() -> None:
    body = (
        pool_toml(instances=2, market="spot")
        + "\n[[jobs]]\nid = 'b'\nmodel = 'Llama-3.1-8B'\nclass = 'batch'\n"
        + "input = { mean = 300, cv = 0.3, max = 1200 }\n"
        + "output = { mean = 300, cv = 0.3, max = 1200 }\n"
        + "requests = 40000\ndeadline_min = 40\n"
        + "[[events]]\nat_min = 5\nkind = 'preemption'\npool = 'lab/r1/spot/box'\ninstances = 1\n"
    )
    policy = Fixed(one_rank("Llama-3.1-8B", replicas=2))
    result = run(tiny(body, minutes=45), policy, seed=0, cfg=RELIABLE)
    (b,) = result.trace.batch
    assert any(o.replicas_up == 1 for _, obs in policy.seen for o in obs)
    assert b.done_s is not None
    assert b.completed_by_deadline == b.requested
    done = sum(w.batch_completed for t in result.trace.ticks for w in t.jobs)
    assert done == pytest.approx(b.requested)


@attrs.define
class _MakeRoom:
    """Fills the pool with "low", then shrinks it to make room for "high" (higher priority)."""

    name: str = "make-room"
    ticks: int = 0

    def decide(self, snapshot: ClusterSnapshot, observations: object) -> Plan:
        del observations
        self.ticks += 1
        env = snapshot.pools[0].environment
        chain = Chain("Llama-3.1-8B", env, Config())
        if self.ticks == 1:
            actions = [JobAction("low", ActionKind.PLACE, Ladder((Rank(chain, 4),)))]
        elif self.ticks == 2:
            actions = [
                JobAction("low", ActionKind.RECONFIGURE, Ladder((Rank(chain, 2),))),
                JobAction("high", ActionKind.PLACE, Ladder((Rank(chain, 2),))),
            ]
        else:
            actions = []
        return Plan(snapshot.time_s, actions)


def test_scale_ins_free_gpus_before_higher_priorities_place() -> None:
    """The host applies stops and scale-ins first: a plan that shrinks a low-priority job to
    make room for a higher-priority one holds, although the higher priority is checked first."""
    body = (
        pool_toml(instances=4)
        + online_job_toml(job_id="low", rate=1)
        + online_job_toml(job_id="high", rate=1, arrival_min=1)
        + "priority = 1\n"
    )
    result = run(tiny(body), _MakeRoom(), seed=0, cfg=RELIABLE)
    second = result.trace.ticks[1]
    assert second.rejected == ()
    gpus = {w.job_id: w.gpus for w in second.jobs}
    assert gpus == {"low": 2, "high": 2}


def test_a_world_running_a_batch_job_pickles_and_continues_identically(catalog: Catalog) -> None:
    # koi agent's simulated fleet saves its world after every launch: a batch job's closed
    # loop must survive pickling and the copy must draw the same requests as the original.
    import pickle

    world = build_world("smoke", seed=0)
    policy = greedy_first_fit(catalog.gpus, catalog.models)
    tick_s = world.scenario.tick_s
    world.begin_tick(0, 0.0)
    world.apply(policy.decide(world.snapshot(), ()))
    batch = [j.id for j in world.snapshot().jobs if not j.is_online]
    running = {d.job_id for d in world.snapshot().active}
    assert set(batch) & running, "the test needs a running batch job"
    copy = pickle.loads(pickle.dumps(world))
    for w in (world, copy):
        w.preempt_unannounced()
    original, _ = world.serve(tick_s)
    copied, _ = copy.serve(tick_s)
    assert [o for o in original if o.job_id in batch]
    assert original == copied


class _Grow:
    """Places one replica on pool 0; at the third tick adds two replicas on pool 1."""

    name = "grow"

    def __init__(self) -> None:
        self.ticks = 0
        self.seen: list[tuple[Observation, ...]] = []

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        self.seen.append(tuple(observations))
        self.ticks += 1
        first, second = (p.environment for p in snapshot.pools[:2])
        one = Rank(Chain("Llama-3.1-8B", first, Config()), 1)
        if self.ticks == 1:
            return Plan(snapshot.time_s, [JobAction("chat", ActionKind.PLACE, Ladder((one,)))])
        if self.ticks == 3:
            two = Rank(Chain("Llama-3.1-8B", second, Config()), 2)
            grown = Ladder((one, two))
            return Plan(snapshot.time_s, [JobAction("chat", ActionKind.RECONFIGURE, grown)])
        current = snapshot.current_ladders["chat"]
        return Plan(snapshot.time_s, [JobAction("chat", ActionKind.KEEP, current)])


@pytest.mark.parametrize("drain", [True, False])
def test_a_rank_that_fell_behind_drains_when_the_router_counts_queues(drain: bool) -> None:
    """One replica takes twice its capacity for two ticks, then a second rank of two replicas
    joins.  A router that counts queues sends the first rank nothing new until its queue is
    down to the others' level, so the queue is gone two ticks after the second rank is up;
    split by capacity alone, the first rank keeps its share of the arrivals and still holds a
    queue then."""
    body = (
        pool_toml(instances=1)
        + pool_toml(instance="other", instances=4)
        + online_job_toml(rate=20, inp=2000, out=300)
    )
    policy = _Grow()
    result = run(
        tiny(body, minutes=60), policy, seed=0, cfg=attrs.evolve(RELIABLE, drain_backlogs=drain)
    )
    (behind,) = (o for o in policy.seen[2] if o.chain.environment.instance_type == "box")
    assert behind.mediators.queue_depth > 50  # it fell behind before the second rank came
    (after,) = (o for o in policy.seen[5] if o.chain.environment.instance_type == "box")
    if drain:
        assert after.mediators.queue_depth < 1
        assert result.metrics.ttft_attainment > 0.85
    else:
        assert after.mediators.queue_depth > 50
        assert result.metrics.ttft_attainment < 0.8


@attrs.define
class _Recycling:
    """``Fixed``, its plans asking to recycle slow replicas (as koi's and the baselines' do)."""

    inner: Fixed
    name: str = "recycling"
    earlier: tuple[Observation, ...] = ()

    room: int = 0  # instances the plans pretend each pool has beyond its capacity
    asked: list[str] = attrs.field(factory=list)

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        plan = self.inner.decide(snapshot, observations)
        pools = [
            attrs.evolve(p, capacity_instances=p.capacity_instances + self.room)
            for p in snapshot.pools
        ]
        plan = plan.recycling(observations, self.earlier, 1.3, pools)
        self.earlier = tuple(observations)
        self.asked += [name for a in plan.actions for name in a.recycle]
        return plan


def test_a_replica_is_recycled_only_where_the_pool_has_room_for_its_successor() -> None:
    event = "[[events]]\nat_min = 5\nkind = 'degrade'\njob = 'chat'\nslow = 2.5\n"
    sc = tiny(pool_toml(instances=3) + online_job_toml(rate=6, out=100) + event)
    fixed = Fixed(one_rank("Llama-3.1-8B", replicas=3))
    policy = _Recycling(fixed, room=1)
    result = run(sc, policy, seed=0, cfg=RELIABLE)
    assert policy.asked  # the plans ask (they pretend there is room) ...
    notes = [e for t in result.trace.ticks for e in t.events if "recycled" in e]
    assert notes == []  # ... but a full pool keeps the slow replica serving
    slow = [w.slow_replicas(1.3) for w in (obs[0] for _, obs in fixed.seen[2:])]
    assert all(len(s) == 1 for s in slow)


@pytest.mark.parametrize("recycle", [False, True])
def test_a_replica_slow_two_windows_running_is_recycled(recycle: bool) -> None:
    event = "[[events]]\nat_min = 5\nkind = 'degrade'\njob = 'chat'\nslow = 2.5\n"
    sc = tiny(pool_toml(instances=4) + online_job_toml(rate=6, out=100) + event)
    fixed = Fixed(one_rank("Llama-3.1-8B", replicas=3))
    result = run(sc, _Recycling(fixed) if recycle else fixed, seed=0, cfg=RELIABLE)
    windows = [obs[0] for _, obs in fixed.seen[1:]]  # one rank: one observation per window
    tpots = dict(windows[1].replica_tpot_ms)  # the window the event slowed a replica in
    assert len(tpots) == 3
    assert max(tpots.values()) > 2 * min(tpots.values())
    slow = [sorted(w.slow_replicas(1.3)) for w in windows]
    assert slow[0] == []
    assert slow[1] == slow[2] == [max(tpots, key=tpots.__getitem__)]
    notes = [(t.index, e) for t in result.trace.ticks for e in t.events if "recycled" in e]
    if recycle:  # asked at the tick after its second slow window, served at full speed after
        assert notes == [(3, "chat: 1 slow replica(s) recycled")]
        assert slow[3:] == [[]] * len(slow[3:])
        assert all(s.current_ladders["chat"].replicas == 3 for s, _ in fixed.seen[1:])
        assert result.trace.ticks[3].jobs[0].gpus == 4  # the old one drains, paid for
    else:
        assert not notes
        assert all(s == slow[1] for s in slow[1:])

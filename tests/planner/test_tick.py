"""End-to-end behaviour of the S0–S7 tick on small hand-built fleets."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import attrs
import pytest

from koi.baselines import KoiPolicy, make_policy
from koi.config import KoiConfig
from koi.errors import InvalidInput, KoiError, KoiWarning
from koi.planner import Planner
from koi.planner._corrections import DECODE_TIME, correction_fn
from koi.plugins import hookimpl
from koi.scoring import ScoringConfig
from koi.sim import LaunchConfig, Scenario, SimConfig, parse_scenario, run
from koi.surrogate import RankCorrection
from koi.testing.fakes import example_snapshot
from koi.types import (
    ActionKind,
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Job,
    Ladder,
    Observation,
    Outcome,
    Plan,
    Quant,
    Rank,
    ServingTarget,
)

from ._world import CATALOG, Sim, World, chat_job, pools, sim_world, unhurried_planner


def _tpot_error(planner: Planner, world: World, job: Job) -> float:
    ladder = world.active[job.id].ladder
    corr = correction_fn(
        planner.state, job, gpus=planner.gpus, models=planner.models, cfg=planner.config
    )
    mine = planner.surrogate.predict(job, ladder, corrections=corr).outcomes.p99_tpot_ms
    true = world.surrogate.predict(job, ladder, corrections=world.truth).outcomes.p99_tpot_ms
    return abs(mine - true) / true


def _run(
    planner: Planner, world: World, ticks: int, obs: Sequence[Observation] = ()
) -> list[Observation]:
    observations = list(obs)
    for _ in range(ticks):
        result = planner.tick(world.snapshot(), observations)
        assert not result.fallback, result.errors
        world.apply(result.plan)
        observations = world.advance()
    return observations


SLOW = RankCorrection(decode_time=1.6, prefill_time=1.3)


def _one_gpu_world(truth: RankCorrection = SLOW) -> World:
    return World([chat_job()], pools(gpus=("L40S",)), truth=lambda _c: truth)


def _forecast_error(planner: Planner, sim: Sim, obs: Sequence[Observation]) -> float:
    """Relative error of the planner's corrected p99 TPOT forecast for the ladder it runs,
    made before the window, against what the simulated fleet then reported."""
    job = sim.world.scenario.jobs[0]
    snap = sim.world.snapshot()
    ladder = next(a.ladder for a in snap.active if a.job_id == job.id)
    corr = correction_fn(
        planner.state, job, gpus=planner.gpus, models=planner.models, cfg=planner.config
    )
    mine = planner.surrogate.predict(job, ladder, corrections=corr).outcomes.p99_tpot_ms
    true = max(o.outcomes.p99_tpot_ms for o in obs if o.job_id == job.id)
    return abs(mine - true) / true


def test_corrections_halve_the_prediction_error_against_the_simulated_fleet() -> None:
    """Learning against the measured world's truth (not koi's own correction form): the
    forecast of the first window is off by more than 20 %; after six windows of telemetry the
    forecasts are at least twice as close (median of three, the windows are noisy)."""
    sim = sim_world(seed=0, rate=2.0)
    planner = Planner(catalog=CATALOG)
    errors = []
    obs: list[Observation] = []
    for _ in range(8):
        obs = sim.run(planner, 1, obs)
        errors.append(_forecast_error(planner, sim, obs))
    before = errors[0]
    after = sorted(errors[-3:])[1]
    assert before > 0.2  # the prior really is wrong here
    assert after <= before / 2


def test_cusum_relearns_after_a_driver_update_in_the_simulated_fleet() -> None:
    """A driver update slows the L40S steps by 1/0.6 at 40 minutes: CUSUM flags the stratum
    and the decode-time correction moves by most of that step."""
    event = '[[events]]\nat_min = 40\nkind = "driver_update"\ngpu = "L40S"\nspeed = 0.6\n'
    sim = sim_world(seed=0, rate=2.0, events=event)
    planner = Planner(catalog=CATALOG)
    obs = sim.run(planner, 8)
    # The stratum's key (gpu|class|engine), not a chain's key inside it.
    stratum = next(
        iter({e.stratum for e in planner.state.corrections.entries if e.stratum.count("|") == 2})
    )
    learned = planner.state.corrections.factor(stratum, DECODE_TIME, planner.config.corrections)
    assert learned is not None
    flagged_before = len(sim.divergences)
    sim.run(planner, 10, obs)
    step_outcomes = (Outcome.TTFT.value, Outcome.TPOT.value, Outcome.THROUGHPUT.value)
    flagged = sim.divergences[flagged_before:]
    assert any(d == f"{stratum}:{o}" for d in flagged for o in step_outcomes)
    relearned = planner.state.corrections.factor(stratum, DECODE_TIME, planner.config.corrections)
    assert relearned is not None
    assert relearned > 1.3 * learned


def _explorer(beta: float) -> Planner:
    """A planner whose exploration weight stays at ``beta`` (the slow loop is switched off)."""
    base = KoiConfig()
    cfg = attrs.evolve(
        base,
        scoring=attrs.evolve(ScoringConfig(), beta=beta),
        calibration=attrs.evolve(base.calibration, eta_beta=0.0, beta_min=0.0, beta_max=10.0),
    )
    return Planner(config=cfg, catalog=CATALOG)


def test_exploration_picks_an_untested_stratum() -> None:
    """Same fleet and jobs, different β: a high exploration weight puts load on hardware the
    evidence has not seen; without it the planner stays on what it knows."""
    fleet = pools(gpus=("L40S", "A100-80GB"), per_pool=4)
    used = {}
    for beta in (0.0, 4.0):
        world = World([chat_job("a")], fleet, truth=lambda _c: RankCorrection())
        planner = _explorer(beta)
        gpus: set[str] = set()
        obs: list[Observation] = []
        for _ in range(6):
            obs = _run(planner, world, 1, obs)
            gpus |= {r.chain.environment.gpu for r in world.active["a"].ladder.ranks}
        world.jobs.append(chat_job("b", rate=3.0))
        result = planner.tick(world.snapshot(), obs)
        gpus |= {r.chain.environment.gpu for r in result.plan.action("b").ladder.ranks}
        used[beta] = gpus
    assert len(used[0.0]) == 1  # exploitation: both jobs on the one GPU type it has tried
    assert used[4.0] - used[0.0]  # exploration: some load went to the untested type


def test_swap_budget_caps_reconfigurations() -> None:
    fleet = pools(gpus=("H100-SXM", "L40S"), per_pool=8)
    h100 = next(
        p.environment
        for p in fleet
        if p.environment.gpu == "H100-SXM" and p.environment.gpus_per_instance == 8
    )
    jobs = [chat_job(f"j{i}", rate=2.0) for i in range(4)]
    # Wasteful incumbents: TP=8 on H100 for an 8B model.
    wasteful = Ladder((Rank(Chain("Llama-3.1-8B", h100, Config(tp=8)), 1),))
    active = [ActiveDeployment(j.id, wasteful) for j in jobs]
    snapshot = ClusterSnapshot(0.0, jobs, fleet, active)
    for share, at_most in ((0.0, 1), (1.0, 4)):
        cfg = attrs.evolve(
            KoiConfig(),
            calibration=attrs.evolve(
                KoiConfig().calibration, swap_min_share=share, swap_max_share=share
            ),
        )
        result = Planner(config=cfg, catalog=CATALOG).tick(snapshot)
        moved = sum(a.kind is ActionKind.RECONFIGURE for a in result.plan.actions)
        assert result.knobs["swap_budget"] == at_most
        assert 1 <= moved <= at_most
        if share == 1.0:
            assert moved > 1  # the cap, not a lack of better ladders, held the first run back


def test_resumes_from_its_checkpoint(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "state.json"
    world = _one_gpu_world()
    planner = Planner(catalog=CATALOG, state_path=path)
    _run(planner, world, 3)
    planner.close()  # one planner per state file
    again = Planner(catalog=CATALOG, state_path=path)
    assert again.state.tick == planner.state.tick == 3
    assert again.state.corrections == planner.state.corrections
    assert again.state.evidence.to_data() == planner.state.evidence.to_data()
    assert again.state.ledger == planner.state.ledger


class _Broken:
    koi_plugin_name = "broken-proposer"

    @hookimpl
    def koi_propose_ladders(self, job: Job, context: object) -> list[Ladder]:
        raise RuntimeError("boom")


def test_a_raising_proposer_is_skipped_and_reported() -> None:
    world = _one_gpu_world()
    planner = Planner(catalog=CATALOG, plugins=[_Broken()])
    result = planner.tick(world.snapshot())
    assert not result.fallback
    assert result.plan.action("chat").kind is ActionKind.PLACE
    assert any("broken-proposer" in e for e in result.errors)


def test_a_failing_stage_gives_the_safe_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    world = _one_gpu_world()
    planner = Planner(catalog=CATALOG)
    _run(planner, world, 1)
    world.jobs.append(chat_job("new", rate=1.0))

    def explode(*_a: object, **_k: object) -> None:
        raise KoiError("solver exploded")

    monkeypatch.setattr("koi.planner._stages.select", explode)
    before = planner.state
    result = planner.tick(world.snapshot())
    assert result.fallback
    assert result.plan.action("chat").kind is ActionKind.KEEP
    assert result.plan.action("new").kind is ActionKind.DEFER
    assert any("solver exploded" in e for e in result.errors)
    assert planner.state.evidence == before.evidence  # nothing learned from a failed tick


def test_bad_input_is_refused_before_anything_changes() -> None:
    planner = Planner(catalog=CATALOG)
    job = attrs.evolve(chat_job(), model="No-Such-Model")
    with pytest.raises(InvalidInput, match="unknown model"):
        planner.tick(ClusterSnapshot(0.0, [job], pools()))
    with pytest.raises(InvalidInput, match="observations"):
        planner.tick(ClusterSnapshot(0.0, [chat_job()], pools()), ["not an observation"])  # type: ignore[list-item]
    assert planner.state.tick == 0


class _NoisyTelemetry:
    """Telemetry plugin returning garbage next to nothing useful."""

    koi_plugin_name = "noisy-telemetry"

    @hookimpl
    def koi_collect_telemetry(self, ranks: object, window: tuple[float, float]) -> list[object]:
        return [{"job_id": "chat", "outcomes": {"p99_ttft_ms": float("nan")}}, 42]


def test_garbage_telemetry_is_skipped_with_a_warning() -> None:
    world = _one_gpu_world()
    planner = Planner(catalog=CATALOG, plugins=[_NoisyTelemetry()])
    _run(planner, world, 1)
    with pytest.warns(KoiWarning):
        result = planner.tick(world.snapshot())
    assert not result.fallback
    assert any("noisy-telemetry" in e for e in result.errors)


def test_workload_drift_seen_in_telemetry_resizes_the_job() -> None:
    """The snapshot keeps the declared rate; telemetry shows 3x the traffic."""
    world = World([chat_job(rate=4.0)], pools(gpus=("L40S",), per_pool=8), truth=lambda _c: SLOW)
    planner = Planner(catalog=CATALOG)
    result = planner.tick(world.snapshot())
    world.apply(result.plan)
    before = world.active["chat"].ladder.replicas
    busier = [
        attrs.evolve(o, requests=o.requests * 3, completed=o.completed * 3) for o in world.advance()
    ]
    result = planner.tick(world.snapshot(), busier)
    after = result.plan.action("chat").ladder.replicas
    assert result.plan.action("chat").kind is ActionKind.RECONFIGURE
    assert after > before


def _placed_chat() -> tuple[World, Planner]:
    """A chat job at 4 requests/s on eight L40S of a slow world, placed by a fresh planner."""
    world = World([chat_job(rate=4.0)], pools(gpus=("L40S",), per_pool=8), truth=lambda _c: SLOW)
    planner = Planner(catalog=CATALOG)
    world.apply(planner.tick(world.snapshot()).plan)
    return world, planner


def test_a_backlog_seen_in_telemetry_resizes_the_job() -> None:
    """Traffic as declared, but the ranks report requests queued: twice the window's arrivals
    wait in each rank.  Planned for its arrivals alone the job would never drain them; it is
    resized, where its twin with empty queues keeps its ladder."""
    plans = []
    for backlog in (0.0, 2.0):
        world, planner = _placed_chat()
        before = world.active["chat"].ladder.replicas
        window = [
            attrs.evolve(
                o,
                mediators=attrs.evolve(
                    o.mediators, queue_depth=backlog * o.requests / max(o.replicas_up, 1)
                ),
            )
            for o in world.advance()
        ]
        plans.append(planner.tick(world.snapshot(), window).plan.action("chat"))
    assert plans[0].kind is ActionKind.KEEP
    assert plans[1].kind is ActionKind.RECONFIGURE
    assert plans[1].ladder.replicas > before


def test_a_deep_backlog_is_drained_at_most_backlog_drain_times_the_arrivals() -> None:
    """Thirty windows of arrivals queued: with ``backlog_drain = 1`` the job is planned for
    twice its arrivals, as if one window were queued; counted whole in one window the backlog
    asks for a ladder many times larger."""

    def planned(backlog: float, drain: float) -> int:
        cfg = KoiConfig()
        cfg = attrs.evolve(cfg, planner=attrs.evolve(cfg.planner, backlog_drain=drain))
        world = World(
            [chat_job(rate=4.0)], pools(gpus=("L40S",), per_pool=8), truth=lambda _c: SLOW
        )
        planner = Planner(catalog=CATALOG, config=cfg)
        world.apply(planner.tick(world.snapshot()).plan)
        window = [
            attrs.evolve(
                o,
                mediators=attrs.evolve(
                    o.mediators, queue_depth=backlog * o.requests / max(o.replicas_up, 1)
                ),
            )
            for o in world.advance()
        ]
        action = planner.tick(world.snapshot(), window).plan.action("chat")
        assert action.kind is ActionKind.RECONFIGURE
        return action.ladder.replicas

    one_window = planned(1.0, drain=1.0)
    assert planned(30.0, drain=1.0) == one_window
    assert planned(30.0, drain=1e6) > 4 * one_window


def test_longer_outputs_seen_in_telemetry_are_planned_for() -> None:
    """The snapshot keeps the declared output length; three windows of telemetry show each
    request generating twice the tokens (the requests and their rate unchanged).  The job is
    then planned for twice the output tokens per second: its candidates' predicted throughput
    doubles against a twin fed the plain windows."""
    demand = []
    for tokens_x in (1.0, 2.0):
        world, planner = _placed_chat()
        for _ in range(3):
            window = [
                attrs.evolve(
                    o,
                    outcomes=attrs.evolve(
                        o.outcomes, throughput_tok_s=tokens_x * o.outcomes.throughput_tok_s
                    ),
                )
                for o in world.advance()
            ]
            result = planner.tick(world.snapshot(), window)
            world.apply(result.plan)
        served = [c.outcomes for c in result.candidates_for("chat") if c.outcomes is not None]
        demand.append(max(o.throughput_tok_s for o in served))
    assert demand[1] == pytest.approx(2 * demand[0], rel=0.1)


def test_a_fleet_whose_jobs_all_finished_gets_stop_actions() -> None:
    done = attrs.evolve(
        chat_job(),
        job_class="batch",
        workload=attrs.evolve(chat_job().workload, rate_rps=None, total_requests=10),
        target=ServingTarget.batch(deadline_s=3600.0),
        completed_requests=10,
    )
    result = Planner(catalog=CATALOG).tick(ClusterSnapshot(0.0, [done], pools()))
    assert not result.fallback, result.errors
    assert result.plan.action(done.id).kind is ActionKind.STOP


def test_a_finished_batch_job_still_deployed_is_stopped_and_the_rest_planned() -> None:
    # What a host reports at the end of every batch job: all requests done, ladder still up.
    snap = example_snapshot()
    summarize = snap.job("summarize")
    done = attrs.evolve(summarize, completed_requests=summarize.workload.total_requests or 0)
    chain = Chain("Llama-3.1-70B", snap.pools[0].environment, Config(tp=4, quant=Quant.FP8))
    deployed = ActiveDeployment("summarize", Ladder((Rank(chain, 1),)), since_s=0.0)
    jobs = (snap.job("chat"), done)
    finished = ClusterSnapshot(0.0, jobs, snap.pools, (*snap.active, deployed))
    result = Planner().tick(finished)
    assert not result.fallback, result.errors
    assert result.plan.action("summarize").kind is ActionKind.STOP
    assert result.plan.action("chat").kind is not ActionKind.DEFER


# Launches that neither fail nor run slow: the scenario's own events are the only surprise.
_RELIABLE = SimConfig(launch=LaunchConfig(fail_prob=0.0, slow_prob=0.0))


def _lab(name: str, jobs: str, *, gpu: str, instances: int, price: float) -> Scenario:
    """A 40-minute scenario on one on-demand pool of single-GPU boxes."""
    text = f"""
[scenario]
name = "{name}"
duration_min = 40
tick_s = 300
[[pools]]
cloud = "lab"
region = "r1"
market = "on_demand"
instance_type = "box"
instances = {instances}
gpu = "{gpu}"
gpus_per_instance = 1
price_usd_per_h = {price}
"""
    return parse_scenario(text + jobs, source=name)


def test_a_replica_slow_two_windows_running_is_recycled_not_sized_for() -> None:
    jobs = """
[[jobs]]
id = "chat"
model = "Llama-3.1-8B"
class = "online"
input = { mean = 500, cv = 0.3, max = 2000 }
output = { mean = 150, cv = 0.3, max = 600 }
rate_rps = 120
p99_ttft_ms = 1500
p99_tpot_ms = 60
[[events]]
at_min = 10
kind = "degrade"
job = "chat"
slow = 2.5
"""
    sc = _lab("straggler", jobs, gpu="H100-SXM", instances=8, price=4.0)
    for ratio in (1.5, None):
        cfg = KoiConfig(planner=attrs.evolve(KoiConfig().planner, slow_replica_ratio=ratio))
        result = run(sc, make_policy("koi", config=cfg), seed=0, cfg=_RELIABLE)
        notes = [t.index for t in result.trace.ticks for e in t.events if "recycled" in e]
        assert notes == ([4] if ratio else []), ratio  # slow in the windows from 10 and 15 min


def test_a_service_with_almost_no_traffic_keeps_one_replica() -> None:
    # One request every 100 s.  koi used to add a replica at almost every tick (every ladder
    # was short of a required rate floored at 1 token/s, so cost barely counted and the
    # smallest breach probability decided), taking GPUs a busier job could use.
    jobs = """
[[jobs]]
id = "tiny"
model = "Llama-3.2-1B"
class = "online"
input = { mean = 100, cv = 0.1, max = 200 }
output = { mean = 5, cv = 0.1, max = 10 }
arrival = "constant"
rate_rps = 0.01
p99_ttft_ms = 100
p99_tpot_ms = 20
"""
    koi = make_policy("koi")
    assert isinstance(koi, KoiPolicy)
    asked: list[int] = []

    def decide(snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        plan = koi.planner.tick(snapshot, observations).plan
        asked.append(plan.action("tiny").ladder.gpus)
        return plan

    policy = SimpleNamespace(name="koi", decide=decide)
    sc = _lab("dormant", jobs, gpu="L4", instances=6, price=0.8)
    result = run(sc, policy, seed=0, cfg=_RELIABLE)
    assert asked == [1] * 8
    assert result.metrics.online_admission > 0.9


def test_a_pool_with_no_gpus_sets_no_cost_scale() -> None:
    # An empty pool offers nothing.  Priced near zero, it once set a cost scale no ladder could
    # reach: every placement scored below refusing the job, which waited while A100s stood idle.
    a100 = pools(per_pool=1, gpus=("A100-80GB",))[0]
    h100 = pools(per_pool=1, gpus=("H100-SXM",))[0]
    cheap = attrs.evolve(h100.environment, price_usd_per_h=1e-9)
    empty = attrs.evolve(h100, environment=cheap, capacity_instances=0)
    job = chat_job(rate=1.0)
    for fleet in ([a100], [a100, empty]):
        plan = unhurried_planner().tick(ClusterSnapshot(0.0, [job], fleet)).plan
        assert plan.action(job.id).kind is ActionKind.PLACE


def test_the_cost_scales_start_over_past_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from koi.planner import _planner

    monkeypatch.setattr(_planner, "_REFERENCE_MEMO", 2)
    planner = unhurried_planner()
    jobs = [chat_job(f"chat-{i}", rate=1.0 + i) for i in range(3)]  # three workloads
    planner.tick(ClusterSnapshot(0.0, jobs, pools()))
    assert 0 < len(planner._reference_costs) <= 2

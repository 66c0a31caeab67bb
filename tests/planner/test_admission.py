"""Admission: making room for a newcomer, best effort with a verdict, late batch jobs."""

from __future__ import annotations

from types import SimpleNamespace

import attrs
import pytest

from koi.candidates import CandidateGenerator, ProposalContext
from koi.config import KoiConfig
from koi.planner import Planner, TickResult
from koi.planner._admission import _Spare, admit, effort_picks, served_fraction, struggling
from koi.planner._evaluate import Evaluated, Evaluator
from koi.planner._progress import Progress, late_batch_jobs, work_time_s
from koi.planner._report import Verdict
from koi.planner._safety import repairs_only
from koi.types import (
    ActionKind,
    ActiveDeployment,
    AdmissionPolicy,
    Chain,
    ClusterSnapshot,
    Config,
    Job,
    Ladder,
    LengthDist,
    Mediators,
    Observation,
    Outcomes,
    Pool,
    Quant,
    Rank,
    ServingTarget,
    WorkloadProfile,
)

from ._world import CATALOG, SURROGATE, catalog_evaluator

ENV = next(e for e in CATALOG.environments(clouds=["aws"]) if e.id.endswith("on_demand/g6e.xlarge"))
MODEL = "Llama-3.1-8B"
CHAIN = Chain(MODEL, ENV, Config(tp=1, quant=Quant.BF16))


def _online(
    job_id: str,
    *,
    priority: int = 0,
    ttft_ms: float = 2000.0,
    admission: AdmissionPolicy = AdmissionPolicy.SERVE_BEST_EFFORT,
    rate_rps: float = 2.0,
) -> Job:
    return Job(
        job_id,
        MODEL,
        "online",
        WorkloadProfile(LengthDist(512, 0.3, 2048), LengthDist(128, 0.3, 512), rate_rps=rate_rps),
        ServingTarget.online(p99_ttft_ms=ttft_ms, p99_tpot_ms=100.0),
        priority=priority,
        admission=admission,
    )


def _planner(**planner: object) -> Planner:
    cfg = KoiConfig()
    knobs = {"tick_deadline_s": None, "proposer_timeout_s": None, **planner}
    return Planner(config=attrs.evolve(cfg, planner=attrs.evolve(cfg.planner, **knobs)))


def _full_fleet(newcomer: Job) -> ClusterSnapshot:
    """Eight GPUs, all held by a low-priority job that needs far fewer to meet its target."""
    old = _online("old")
    held = ActiveDeployment("old", Ladder((Rank(CHAIN, 8),)))
    return ClusterSnapshot(600.0, [old, newcomer], [Pool(ENV, 8)], [held])


def _risk(result: TickResult, job_id: str) -> Verdict | None:
    return next((r.verdict for r in result.at_risk if r.job_id == job_id), None)


def test_newcomer_is_admitted_by_shrinking_a_lower_priority_job() -> None:
    snapshot = _full_fleet(_online("new", priority=1))
    result = _planner().tick(snapshot, launch=False)
    new, old = result.plan.action("new"), result.plan.action("old")
    assert new.kind is ActionKind.PLACE
    assert old.kind is ActionKind.RECONFIGURE
    assert old.ladder.scales_in(Ladder((Rank(CHAIN, 8),)))
    assert old.ladder.gpus + new.ladder.gpus <= 8  # the shrink freed what the newcomer took
    assert "room made: old" in new.reason
    assert "for new" in old.reason
    chosen = next(c for c in result.candidates_for("old") if c.chosen)
    assert chosen.breach_probability <= 0.3  # the donor stays within its own target
    assert result.at_risk == ()
    # Without making room nothing free fits the newcomer: it waits, reported as blocked.
    blocked = _planner(make_room=False).tick(snapshot, launch=False)
    assert blocked.plan.action("new").kind is ActionKind.DEFER
    assert _risk(blocked, "new") is Verdict.CAPACITY


def test_an_online_job_left_unserved_without_a_verdict_is_at_risk() -> None:
    # No verdicts this tick (as for the stuck jobs past ``make_room_jobs``): the newcomer
    # waits, and the plan still says so.
    snapshot = _full_fleet(_online("new", priority=1))
    result = _planner(make_room_jobs=0).tick(snapshot, launch=False)
    assert result.plan.action("new").kind is ActionKind.DEFER
    risk = next(r for r in result.at_risk if r.job_id == "new")
    assert risk.verdict is Verdict.UNSERVED
    assert risk.breach_probability == 1.0
    assert result.plan.diagnostics["at_risk"]["new"] == "unserved"
    assert _risk(result, "old") is None  # served within its target


def test_hopeless_job_is_served_best_effort_and_reported_at_risk() -> None:
    impossible = _online("new", ttft_ms=1.0)  # no ladder anywhere answers in 1 ms
    snapshot = ClusterSnapshot(600.0, [impossible], [Pool(ENV, 8)], [])
    result = _planner().tick(snapshot, launch=False)
    action = result.plan.action("new")
    assert action.kind is ActionKind.PLACE
    chosen = next(c for c in result.candidates_for("new") if c.chosen)
    assert "best-effort" in chosen.sources
    assert chosen.breach_probability > 0.3
    risk = next(r for r in result.at_risk if r.job_id == "new")
    assert risk.verdict is Verdict.HOPELESS
    assert "served best effort" in risk.detail
    assert result.plan.diagnostics["at_risk"] == {"new": "hopeless"}
    # At 2 req/s every ladder keeps up, so least breach decides: no rejected ladder that fits
    # is less likely to breach.
    rejected = [
        c for c in result.candidates_for("new") if c.rejected.startswith("C3") and c.ladder.gpus
    ]
    assert all(c.breach_probability >= chosen.breach_probability for c in rejected)


def test_best_effort_ladders_compete_at_the_fidelity_of_the_keep() -> None:
    # A running job's keep is re-predicted by the replay engine (S5); the best-effort ladders
    # entering after it are replayed too, so the selection never weighs the replayed keep
    # against a closed form that near saturation is far more optimistic.  A pending job has
    # no replayed candidate: its best-effort ladders keep the closed form.
    job = _online("new", ttft_ms=60.0, rate_rps=40.0)
    held = [ActiveDeployment("new", Ladder((Rank(CHAIN, 1),)))]
    planner = _planner()

    def effort(active: list[ActiveDeployment]) -> list[tuple[bool, bool]]:
        snapshot = ClusterSnapshot(600.0, [job], [Pool(ENV, 8)], active)
        result = planner.tick(snapshot, launch=False)
        out = []
        for c in result.candidates_for("new"):
            if "best-effort" in c.sources and c.ladder != Ladder((Rank(CHAIN, 1),)):
                replayed = planner.surrogate.predict(job, c.ladder, now_s=600.0).outcomes
                screened = planner.surrogate.screen(job, c.ladder, now_s=600.0).outcomes
                out.append((c.outcomes == replayed, c.outcomes == screened))
        return out

    running, pending = effort(held), effort([])
    assert running
    assert all(is_replayed for is_replayed, _ in running)
    assert pending
    assert all(is_screened for _, is_screened in pending)
    assert any(not is_screened for _, is_screened in running)  # the two differ here


def _effort_evaluator(job: Job, snapshot: ClusterSnapshot, cfg: KoiConfig) -> Evaluator:
    return catalog_evaluator(snapshot, Planner.initial_state(cfg), cfg)


class _NoProposals(CandidateGenerator):
    """A proposer with nothing to offer: admission judges only the ladders it is given."""

    def propose(self, job: Job, context: ProposalContext) -> list[Ladder]:
        return []


def test_best_effort_prefers_the_ladder_that_keeps_up_with_the_traffic() -> None:
    # 60 req/s of 128 tokens: one L40S carries about 4,850 tok/s of the 7,680 offered, four
    # carry it all.  With a 1 ms TTFT bound both breach for sure; the four are made no less
    # likely to breach (as if telemetry said so), so breach probability alone would pick the
    # one that cannot keep up.
    job = _online("new", ttft_ms=1.0, rate_rps=60.0)
    cfg = KoiConfig()
    cfg = attrs.evolve(cfg, planner=attrs.evolve(cfg.planner, best_effort_candidates=1))
    snapshot = ClusterSnapshot(600.0, [job], [Pool(ENV, 8)], [])
    evaluator = _effort_evaluator(job, snapshot, cfg)
    one, four = Ladder((Rank(CHAIN, 1),)), Ladder((Rank(CHAIN, 4),))
    mine = {
        Ladder(): evaluator.defer(job),
        one: evaluator.evaluate(job, one, key="one"),
        four: evaluator.evaluate(job, four, key="four", breach_floor=1.0),
    }
    for ladder in (one, four):
        assert mine[ladder].report.rejected.startswith("C3")
    assert mine[one].report.breach_probability < mine[four].report.breach_probability
    assert served_fraction(job, mine[one], evaluator) < 0.7
    assert served_fraction(job, mine[four], evaluator) == 1.0

    admit([job], {job.id: mine}, evaluator=evaluator, generator=_NoProposals(SURROGATE), cfg=cfg)
    offered = [ev for ev in mine.values() if ev.candidate is not None and ev.candidate.best_effort]
    best = max(offered, key=lambda ev: ev.report.value)
    assert best.report.ladder == four
    # Its smaller fallbacks (three, two, one replica) join, each worth less than it.
    assert sorted(ev.report.ladder.replicas for ev in offered) == [1, 2, 3, 4]
    assert mine[Ladder()].report.value < min(ev.report.value for ev in offered)


def test_a_hopeless_job_is_served_where_it_keeps_up_with_its_traffic() -> None:
    # 100 req/s of 128 tokens (12,800 tok/s) and a 1 ms TTFT bound: every ladder breaches.
    # One free H100 is a hair less likely to breach than sixteen L4s, but it cannot carry
    # the traffic; the L4s can, so best effort serves the job there.
    h100 = next(
        e
        for e in CATALOG.environments(clouds=["aws"])
        if e.id.endswith("us-east-1/on_demand/p5.4xlarge")
    )
    l4 = next(
        e
        for e in CATALOG.environments(clouds=["aws"])
        if e.id.endswith("us-east-1/on_demand/g6.xlarge")
    )
    job = _online("new", ttft_ms=1.0, rate_rps=100.0)
    snapshot = ClusterSnapshot(600.0, [job], [Pool(h100, 1), Pool(l4, 16)], [])
    result = _planner().tick(snapshot, launch=False)
    assert result.plan.action("new").kind is ActionKind.PLACE
    assert _risk(result, "new") is Verdict.HOPELESS
    chosen = next(c for c in result.candidates_for("new") if c.chosen)
    assert "best-effort" in chosen.sources
    assert {r.chain.environment.gpu for r in chosen.ladder.ranks} == {"L4"}
    need = job.required_output_tok_s(600.0)

    def capacity(ladder: Ladder) -> float:
        return sum(r.capacity_tok_s for r in SURROGATE.screen(job, ladder, now_s=600.0).ranks)

    assert capacity(chosen.ladder) >= need
    on_h100 = [
        c
        for c in result.candidates_for("new")
        if c.ladder.ranks and c.ladder.ranks[0].chain.environment == h100
    ]
    assert on_h100
    assert all(capacity(c.ladder) < need for c in on_h100)
    assert min(c.breach_probability for c in on_h100) < chosen.breach_probability


def test_a_newcomer_is_served_on_what_the_jobs_within_their_targets_leave() -> None:
    # Eight free L40S.  "hot" (120 req/s, a 1 ms TTFT bound) is hopeless and its best-effort
    # ladders are sized on all eight; "ok" (priority 1) is served within its target on two of
    # them first.  Without smaller fallbacks none of hot's ladders fit what ok leaves, and hot
    # was refused; now it is served on a smaller ladder.
    hot = _online("hot", ttft_ms=1.0, rate_rps=120.0)
    ok = _online("ok", priority=1, rate_rps=40.0)
    snapshot = ClusterSnapshot(600.0, [hot, ok], [Pool(ENV, 8)], [])
    result = _planner().tick(snapshot, launch=False)
    assert _risk(result, "hot") is Verdict.HOPELESS
    served, within = result.plan.action("hot"), result.plan.action("ok")
    assert within.kind is ActionKind.PLACE
    assert served.kind is ActionKind.PLACE
    assert 0 < served.ladder.gpus <= 8 - within.ladder.gpus
    offered = [c.ladder.gpus for c in result.candidates_for("hot") if "best-effort" in c.sources]
    assert max(offered) == 8


class _ReplayRejects:
    """An evaluator whose replayed predictions all breach: the closed form and the replay
    disagree on every ladder."""

    def __init__(self, inner: Evaluator) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def evaluate(self, job: Job, ladder: Ladder, **kw: object) -> Evaluated:
        ev = self._inner.evaluate(job, ladder, **kw)  # type: ignore[arg-type]
        if not kw.get("replay"):
            return ev
        return attrs.evolve(ev, candidate=None, report=attrs.evolve(ev.report, rejected="C3"))


def test_a_donor_spares_only_what_its_offered_scale_in_keeps_within_target() -> None:
    # A donor's spare is room a newcomer's ladder counts on; the scale-in that frees it is
    # offered replayed.  Where the replay rejects what the closed form passed, the donor
    # spares nothing: a spare no offered candidate frees left the newcomer's ladder
    # infeasible and the newcomer refused.
    old = _online("old")
    held = Ladder((Rank(CHAIN, 8),))
    snapshot = ClusterSnapshot(600.0, [old], [Pool(ENV, 8)], [ActiveDeployment("old", held)])
    evaluator = _effort_evaluator(old, snapshot, KoiConfig())
    assert _Spare(evaluator, {"old": {}}).of(old, held) == {0: 7}
    strict = _ReplayRejects(evaluator)
    assert _Spare(strict, {"old": {}}).of(old, held) == {}  # type: ignore[arg-type]


def test_refuse_policy_defers_a_hopeless_job() -> None:
    refuse = _online("new", ttft_ms=1.0, admission=AdmissionPolicy.REFUSE)
    snapshot = ClusterSnapshot(600.0, [refuse], [Pool(ENV, 8)], [])
    result = _planner().tick(snapshot, launch=False)
    assert result.plan.action("new").kind is ActionKind.DEFER
    risk = next(r for r in result.at_risk if r.job_id == "new")
    assert risk.verdict is Verdict.HOPELESS
    assert "refused" in risk.detail


def test_room_for_a_hopeless_job_only_to_carry_all_of_its_traffic() -> None:
    # The same full fleet as above; "old" could give up seven GPUs within its own target.
    # A hopeless newcomer (no ladder anywhere answers in 1 ms) is not simply refused — that
    # is an outage — but gets room only for a ladder that carries all of its traffic, and
    # only what the donor can give up within its target.
    snapshot = _full_fleet(_online("new", priority=1, ttft_ms=1.0))
    result = _planner().tick(snapshot, launch=False)
    new = result.plan.action("new")
    assert new.kind is ActionKind.PLACE
    assert "room made: old" in new.reason
    chosen = next(c for c in result.candidates_for("new") if c.chosen)
    assert "best-effort" in chosen.sources
    donor = next(c for c in result.candidates_for("old") if c.chosen)
    assert donor.breach_probability <= 0.3  # the donor stays within its own target
    risk = next(r for r in result.at_risk if r.job_id == "new")
    assert risk.verdict is Verdict.HOPELESS
    assert "served best effort" in risk.detail
    # Traffic nothing on the free GPUs plus the donor's spare carries: no room is taken
    # (C3 does not shrink a job within its target for a smaller breach).
    flood = _full_fleet(_online("new", priority=1, ttft_ms=1.0, rate_rps=400.0))
    flooded = _planner().tick(flood, launch=False)
    assert flooded.plan.action("new").kind is ActionKind.DEFER
    assert "for new" not in flooded.plan.action("old").reason
    # Without making room best effort uses only GPUs nobody holds: the newcomer waits.
    blocked = _planner(make_room=False).tick(snapshot, launch=False)
    assert blocked.plan.action("new").kind is ActionKind.DEFER
    assert "for new" not in blocked.plan.action("old").reason
    # On an empty pool the same job is served.
    spare = ClusterSnapshot(600.0, [_online("new", ttft_ms=1.0)], [Pool(ENV, 8)], [])
    assert _planner().tick(spare, launch=False).plan.action("new").kind is ActionKind.PLACE


def _batch(completed: int, *, deadline_s: float = 4200.0, total: int = 6000) -> Job:
    lengths = (LengthDist(512, 0.3, 2048), LengthDist(256, 0.3, 1024))
    return Job(
        "bulk",
        MODEL,
        "batch",
        WorkloadProfile(*lengths, total_requests=total),
        ServingTarget.batch(deadline_s=deadline_s),
        completed_requests=completed,
    )


def test_late_batch_jobs_are_judged_on_their_observed_rate() -> None:
    ladder = Ladder((Rank(CHAIN, 1),))
    before = {"bulk": Progress(600.0, 0, ladder)}

    def snap(completed: int, at: float = 900.0, running: Ladder = ladder) -> ClusterSnapshot:
        active = [ActiveDeployment("bulk", running)]
        return ClusterSnapshot(at, [_batch(completed)], [Pool(ENV, 8)], active)

    # 300 s for 300 requests: 5700 left need 5700 s, only 3300 s remain.
    slow = late_batch_jobs([_batch(300)], snap(300), before)
    assert "5700 s" in slow["bulk"]
    assert late_batch_jobs([_batch(3000)], snap(3000), before) == {}  # 10 req/s is on time
    assert "no progress" in late_batch_jobs([_batch(0)], snap(0), before)["bulk"]
    # A window in which the ladder changed says nothing about the rate.
    other = Ladder((Rank(CHAIN, 2),))
    assert late_batch_jobs([_batch(300)], snap(300, running=other), before) == {}


def test_a_late_batch_job_is_at_risk_and_resized() -> None:
    ladder = Ladder((Rank(CHAIN, 1),))
    pools = [Pool(ENV, 8)]

    def tick2(completed_at_900: int) -> TickResult:
        planner = _planner()
        first = ClusterSnapshot(600.0, [_batch(0)], pools, [ActiveDeployment("bulk", ladder)])
        planner.tick(first, launch=False)
        second = ClusterSnapshot(
            900.0, [_batch(completed_at_900)], pools, [ActiveDeployment("bulk", ladder)]
        )
        return planner.tick(second, launch=False)

    on_time = tick2(3000)
    assert _risk(on_time, "bulk") is None
    late = tick2(300)
    assert _risk(late, "bulk") is Verdict.DEADLINE
    grown = late.plan.action("bulk").ladder.replicas
    assert grown > on_time.plan.action("bulk").ladder.replicas


def test_deadline_slack_prices_deferring_a_batch_job() -> None:
    job = _batch(0, deadline_s=600.0 + 7200.0, total=1_000_000)
    snapshot = ClusterSnapshot(600.0, [job], [Pool(ENV, 8)], [])
    result = _planner().tick(snapshot, launch=False)
    defer = next(c for c in result.candidates_for("bulk") if c.kind is ActionKind.DEFER)
    # Two hours to the deadline is far from urgent by the clock alone; the work left is not.
    from koi.scoring import deferral_score

    by_clock = deferral_score(job, KoiConfig().scoring, now_s=600.0)
    assert defer.value < by_clock
    assert work_time_s(job, {}) == 0.0


def test_a_batch_job_only_admission_can_place_waits_at_its_deadline_price() -> None:
    # The fleet is full: the proposer offers the batch job nothing, and only the ladders
    # admission makes room for could place it.  Deferring it must still cost the slack its
    # work leaves at their rate, not the clock's slack alone.
    from koi.scoring import deferral_score

    job = attrs.evolve(_batch(0, deadline_s=600.0 + 7200.0, total=400_000), priority=1)
    result = _planner().tick(_full_fleet(job), launch=False)
    mine = result.candidates_for("bulk")
    placements = [c for c in mine if c.kind is ActionKind.PLACE]
    assert placements
    assert all("make-room" in c.sources for c in placements)
    defer = next(c for c in mine if c.kind is ActionKind.DEFER)
    assert defer.value < deferral_score(job, KoiConfig().scoring, now_s=600.0)


def test_a_batch_job_left_waiting_past_its_slack_is_at_risk() -> None:
    # No verdicts this tick (``make_room_jobs = 0``) and nothing free: the batch job waits.
    # Waiting is no risk while its work fits well before the deadline; once the slack its
    # work leaves is inside the urgency horizon, the plan says it is at risk of the deadline.
    def risk(deadline_in_s: float) -> list[str]:
        job = _batch(0, deadline_s=600.0 + deadline_in_s, total=20_000)
        result = _planner(make_room_jobs=0).tick(_full_fleet(job), launch=False)
        assert result.plan.action("bulk").kind is ActionKind.DEFER
        return [r.detail for r in result.at_risk if r.verdict is Verdict.DEADLINE]

    assert risk(6 * 3600.0) == []
    (detail,) = risk(1200.0)
    assert "not served" in detail
    assert "left to the deadline" in detail


@pytest.mark.parametrize("policy", list(AdmissionPolicy))
def test_admission_policy_round_trips(policy: AdmissionPolicy) -> None:
    from koi.types import from_json, to_json

    job = _online("x", admission=policy)
    assert from_json(to_json(job), Job) == job


@pytest.mark.parametrize("policy", list(AdmissionPolicy))
def test_a_serving_best_effort_online_job_is_not_stopped_for_a_newcomer(
    policy: AdmissionPolicy,
) -> None:
    # One GPU, held by "old" with a single replica (nothing to shrink); "new" outranks it.
    old = _online("old", admission=policy)
    held = ActiveDeployment("old", Ladder((Rank(CHAIN, 1),)))
    snapshot = ClusterSnapshot(600.0, [old, _online("new", priority=2)], [Pool(ENV, 1)], [held])
    result = _planner().tick(snapshot, launch=False)
    if policy is AdmissionPolicy.SERVE_BEST_EFFORT:
        assert result.plan.action("old").kind is ActionKind.KEEP
        assert result.plan.action("new").kind is ActionKind.DEFER
        assert _risk(result, "new") is Verdict.CAPACITY
    else:  # a job that accepts refusal can be stopped for a higher priority
        assert result.plan.action("old").kind is ActionKind.STOP
        assert result.plan.action("new").kind is ActionKind.PLACE
        assert "room made: old" in result.plan.action("new").reason


def test_best_effort_takes_only_what_jobs_within_their_target_leave() -> None:
    # One free GPU, wanted by a batch job that meets its deadline on it and by a hopeless
    # online job served best effort: the batch job gets it, the hopeless one waits at risk.
    bulk = _batch(0, deadline_s=600.0 + 3600.0)
    hopeless = _online("new", priority=3, ttft_ms=1.0)
    snapshot = ClusterSnapshot(600.0, [bulk, hopeless], [Pool(ENV, 1)], [])
    result = _planner().tick(snapshot, launch=False)
    assert result.plan.action("bulk").kind is ActionKind.PLACE
    assert result.plan.action("new").kind is ActionKind.DEFER
    assert _risk(result, "new") is Verdict.HOPELESS
    # Alone, the hopeless job is served on the same GPU.
    alone = ClusterSnapshot(600.0, [hopeless], [Pool(ENV, 1)], [])
    assert _planner().tick(alone, launch=False).plan.action("new").kind is ActionKind.PLACE


def _window(job_id: str, ttft_ms: float, *, completed: int = 600) -> Observation:
    return Observation(
        job_id=job_id,
        chain=CHAIN,
        start_s=300.0,
        end_s=600.0,
        requests=600,
        completed=completed,
        replicas_up=8,
        outcomes=Outcomes(0.1, ttft_ms, 20.0, 1000.0, 0.5),
        mediators=Mediators(0.5, 8.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.3, 0.5),
    )


def test_telemetry_near_the_bound_keeps_a_donor_from_shrinking() -> None:
    jobs = [_online("old"), _online("new", priority=1)]
    assert struggling([_window("old", 500.0)], jobs, 0.15) == frozenset()
    assert struggling([_window("old", 1900.0)], jobs, 0.15) == {"old"}  # bound 2000 ms
    assert struggling([_window("old", 500.0, completed=400)], jobs, 0.15) == {"old"}
    snapshot = _full_fleet(_online("new", priority=1))
    calm = _planner().tick(snapshot, [_window("old", 500.0)], launch=False)
    assert calm.plan.action("new").kind is ActionKind.PLACE
    # Only two thirds of the donor's requests completed: telemetry says it is not clear of its
    # target while its measured latencies (and so the corrected predictions of its smaller
    # ladders) are far inside the bounds.  Telemetry outranks the prediction: it gives nothing
    # up, and the newcomer, which one free GPU would serve, waits for capacity.
    short = _planner().tick(snapshot, [_window("old", 500.0, completed=400)], launch=False)
    assert short.plan.action("new").kind is ActionKind.DEFER
    assert _risk(short, "new") is Verdict.CAPACITY
    assert "made room" not in short.plan.action("old").reason
    # Nor does it shrink itself for cost: its smaller ladders are predictions its own
    # measurements contradict (it was failing on eight replicas).
    assert short.plan.action("old").kind is ActionKind.KEEP
    assert short.plan.action("old").ladder == snapshot.current_ladders["old"]
    # A measured TTFT at the bound: the learned correction carries it to every ladder of the
    # stratum, so the donor keeps all it holds and the newcomer is not placed either.
    tight = _planner().tick(snapshot, [_window("old", 1900.0)], launch=False)
    assert tight.plan.action("old").kind is ActionKind.KEEP
    assert tight.plan.action("new").kind is ActionKind.DEFER


def test_a_failing_job_may_stop_move_or_grow_but_not_only_shrink() -> None:
    other = Chain(MODEL, ENV, Config(tp=2, quant=Quant.BF16))
    current = Ladder((Rank(CHAIN, 4),))
    shrink = Ladder((Rank(CHAIN, 2),))
    grow = Ladder((Rank(CHAIN, 6),))
    move = Ladder((Rank(other, 1),))
    mixed = Ladder((Rank(CHAIN, 2), Rank(other, 1)))
    offered = [current, shrink, grow, move, mixed, Ladder()]
    kept = repairs_only(offered, current, on_over_pool=False)
    assert kept == [current, grow, move, mixed, Ladder()]
    # A pool shrunk under the job: shedding replicas is not a choice.
    assert repairs_only(offered, current, on_over_pool=True) == offered


@pytest.mark.parametrize("policy", list(AdmissionPolicy))
def test_a_running_hopeless_job_grows_into_free_gpus_best_effort(policy: AdmissionPolicy) -> None:
    # One replica serving far below its traffic, a target nothing meets, seven GPUs free.
    hot = _online("hot", ttft_ms=1.0, rate_rps=40.0, admission=policy)
    held = ActiveDeployment("hot", Ladder((Rank(CHAIN, 1),)))
    snapshot = ClusterSnapshot(600.0, [hot], [Pool(ENV, 8)], [held])
    result = _planner().tick(snapshot, launch=False)
    action = result.plan.action("hot")
    assert _risk(result, "hot") is Verdict.HOPELESS
    if policy is AdmissionPolicy.SERVE_BEST_EFFORT:  # the ladder that carries more traffic
        assert action.kind is ActionKind.RECONFIGURE
        assert action.ladder.gpus > 1
    else:
        assert action.kind is ActionKind.KEEP


def test_a_running_job_past_c3_may_take_any_change_no_worse_than_its_keep() -> None:
    # Ranked by the share of the demand carried: the first ``limit`` join as best effort, and
    # for a running job every other one worth more than its keep and no likelier to breach.
    def ev(value: float, breach: float) -> SimpleNamespace:
        return SimpleNamespace(report=SimpleNamespace(value=value, breach_probability=breach))

    ranked = [
        (0.9, ev(-10.0, 1.0)),
        (0.5, ev(-3.0, 1.0)),
        (0.4, ev(-2.0, 0.9)),
        (0.3, ev(-9.0, 1.0)),
    ]
    keep = SimpleNamespace(value=-5.0, breach_probability=0.95)
    picks = effort_picks(ranked, 1, keep)  # type: ignore[arg-type]
    assert [p[0] for p in picks] == [0.9, 0.4]  # -3.0 is likelier to breach, -9.0 worth less
    assert effort_picks(ranked, 1, None) == ranked[:1]  # type: ignore[arg-type]


def test_stuck_online_jobs_take_free_gpus_before_stuck_batch_jobs() -> None:
    # A service nothing serves within its target and a batch job that cannot meet its
    # deadline arrive together at eight free GPUs.  Both take best effort, the service first:
    # with the two in one stage the batch job's ladder was worth more, took all eight GPUs,
    # and the service was refused.
    hot = _online("hot", ttft_ms=1.0, rate_rps=5.0)
    bulk = _batch(0, deadline_s=600.0 + 1800.0, total=400_000)
    snapshot = ClusterSnapshot(600.0, [hot, bulk], [Pool(ENV, 8)], [])
    result = _planner().tick(snapshot, launch=False)
    assert _risk(result, "hot") is Verdict.HOPELESS
    assert _risk(result, "bulk") is Verdict.HOPELESS
    served = result.plan.action("hot")
    assert served.kind is ActionKind.PLACE
    assert served.ladder.gpus + result.plan.action("bulk").ladder.gpus <= 8


def test_a_job_no_single_gpu_type_carries_is_spread_over_several() -> None:
    # 100 req/s of 128 tokens (12,800 tok/s) and a 1 ms TTFT bound: hopeless.  Neither the
    # one free H100 nor the eight free L4s carry the traffic; together they carry more than
    # either, so best effort serves the job on both.
    h100, l4 = (
        next(e for e in CATALOG.environments(clouds=["aws"]) if e.id.endswith(suffix))
        for suffix in ("us-east-1/on_demand/p5.4xlarge", "us-east-1/on_demand/g6.xlarge")
    )
    job = _online("new", ttft_ms=1.0, rate_rps=100.0)
    snapshot = ClusterSnapshot(600.0, [job], [Pool(h100, 1), Pool(l4, 8)], [])
    # By default (spread_best_effort off) best effort keeps to one GPU type.
    single_type = _planner().tick(snapshot, launch=False).plan.action("new").ladder
    assert len({r.chain.environment.gpu for r in single_type.ranks}) == 1
    result = _planner(spread_best_effort=True).tick(snapshot, launch=False)
    assert _risk(result, "new") is Verdict.HOPELESS
    chosen = next(c for c in result.candidates_for("new") if c.chosen)
    assert "best-effort" in chosen.sources
    assert {r.chain.environment.gpu for r in chosen.ladder.ranks} == {"H100-SXM", "L4"}

    def capacity(ladder: Ladder) -> float:
        return sum(r.capacity_tok_s for r in SURROGATE.screen(job, ladder, now_s=600.0).ranks)

    single = [
        c
        for c in result.candidates_for("new")
        if c.ladder.ranks and len({r.chain.environment.gpu for r in c.ladder.ranks}) == 1
    ]
    assert single
    assert all(capacity(c.ladder) < job.required_output_tok_s(600.0) for c in single)
    assert capacity(chosen.ladder) > max(capacity(c.ladder) for c in single)


def test_a_hopeless_job_gives_way_to_a_newcomer_within_its_target() -> None:
    # Every GPU is held by a job nothing serves within its target (a 1 ms TTFT bound), served
    # best effort.  With spread_best_effort a newcomer of the same priority that one GPU
    # serves within its target takes it: the hopeless job is shrunk (it keeps serving on the
    # rest), not stopped.  By default the newcomer waits.
    old = _online("old", ttft_ms=1.0)
    held = ActiveDeployment("old", Ladder((Rank(CHAIN, 8),)))
    snapshot = ClusterSnapshot(600.0, [old, _online("new")], [Pool(ENV, 8)], [held])
    assert _planner().tick(snapshot, launch=False).plan.action("new").kind is ActionKind.DEFER
    result = _planner(spread_best_effort=True).tick(snapshot, launch=False)
    new, shrunk = result.plan.action("new"), result.plan.action("old")
    assert _risk(result, "old") is Verdict.HOPELESS
    assert new.kind is ActionKind.PLACE
    assert "room made: old" in new.reason
    assert shrunk.kind is ActionKind.RECONFIGURE
    assert 0 < shrunk.ladder.gpus < 8
    assert next(c for c in result.candidates_for("new") if c.chosen).breach_probability <= 0.3
    # Where the running job is within its own target it gives up only its spare, and a
    # hopeless newcomer gets no more than that (the converse, in the tests above).
    within = ClusterSnapshot(600.0, [_online("old"), _online("new")], [Pool(ENV, 8)], [held])
    kept = _planner(spread_best_effort=True).tick(within, launch=False)
    assert next(c for c in kept.candidates_for("old") if c.chosen).breach_probability <= 0.3


def test_a_yielding_job_gives_only_the_room_a_newcomer_takes() -> None:
    # A hopeless service holds all eight GPUs; a newcomer within its target needs one.  The
    # scale-in by one replica was already on the hopeless job's list as a best-effort ladder
    # and stayed in the best-effort stage, so stage one could free room only with its
    # one-replica make-room ladder: it gave up seven GPUs for a newcomer that took one.
    hot = _online("hot", ttft_ms=1.0, rate_rps=40.0)
    held = ActiveDeployment("hot", Ladder((Rank(CHAIN, 8),)))
    snapshot = ClusterSnapshot(600.0, [hot, _online("new")], [Pool(ENV, 8)], [held])
    result = _planner(spread_best_effort=True).tick(snapshot, launch=False)
    assert _risk(result, "hot") is Verdict.HOPELESS
    placed, donor = result.plan.action("new"), result.plan.action("hot")
    assert placed.kind is ActionKind.PLACE
    assert donor.ladder.gpus == 8 - placed.ladder.gpus
    assert "room made: hot" in placed.reason


def test_a_saturated_option_is_valued_by_the_share_it_carries() -> None:
    # Past its capacity a ladder's queue grows without bound: its predicted p99 TTFT (the age
    # of the queue after the closed form's horizon) does not enter its value; the share of
    # the demand it carries does, each share left unserved worth that share of refusing.
    job = _online("new", ttft_ms=1.0, rate_rps=60.0)
    cfg = KoiConfig()
    snapshot = ClusterSnapshot(600.0, [job], [Pool(ENV, 8)], [])
    evaluator = _effort_evaluator(job, snapshot, cfg)
    one = evaluator.evaluate(job, Ladder((Rank(CHAIN, 1),)), key="one", best_effort=True)
    assert one.prediction is not None
    slower = attrs.evolve(
        one,
        prediction=attrs.evolve(
            one.prediction,
            outcomes=attrs.evolve(
                one.prediction.outcomes, p99_ttft_ms=10 * one.prediction.outcomes.p99_ttft_ms
            ),
        ),
    )
    assert evaluator.saturated_value(job, one, 0.6) == evaluator.saturated_value(job, slower, 0.6)
    values = [evaluator.saturated_value(job, one, s) for s in (0.2, 0.4, 0.6, 0.8)]
    assert values == sorted(values)
    refused = evaluator.defer(job).report.value
    assert values[1] - values[0] == pytest.approx(-0.2 * refused)


def test_a_batch_jobs_deferral_keeps_its_price_beside_best_effort() -> None:
    # One GPU that breaches for sure (as if telemetry said so).  Refusing an online job is an
    # outage, so its deferral falls below the best effort; a batch job with slack may wait,
    # and it must: its stop is priced the same way the tick after it is placed, and a
    # placement stopped before it serves is a swap for nothing.
    cfg = KoiConfig()
    one = Ladder((Rank(CHAIN, 1),))
    bulk = _batch(0, deadline_s=600.0 + 6 * 3600.0, total=2_000_000)
    values = {}
    for job in (bulk, _online("new", ttft_ms=1.0)):
        snapshot = ClusterSnapshot(600.0, [job], [Pool(ENV, 1)], [])
        evaluator = _effort_evaluator(job, snapshot, cfg)
        mine = {
            Ladder(): evaluator.defer(job),
            one: evaluator.evaluate(job, one, key="one", breach_floor=1.0),
        }
        priced = mine[Ladder()].report.value
        assert mine[one].report.rejected.startswith("C3")
        generator = _NoProposals(SURROGATE)
        admit([job], {job.id: mine}, evaluator=evaluator, generator=generator, cfg=cfg)
        offered = mine[one].candidate
        assert offered is not None
        assert offered.best_effort
        values[job.is_online] = (priced, mine[Ladder()].report.value, mine[one].report.value)
    priced, deferred, effort = values[False]
    assert deferred == priced > effort  # the batch job waits
    priced, refused, effort = values[True]
    assert refused < effort < priced  # the service is served best effort


def test_a_batch_job_on_time_is_stopped_only_if_it_can_be_paused() -> None:
    # Two GPUs, both held by a batch job on time; a service of high priority could take them
    # if the batch job stopped, and deferring the service costs more than the stop.  The job
    # keeps its GPUs unless it has the slack to be paused (the donors' rule).
    from koi.planner._commit import selection_problem
    from koi.planner._stages import select_best_effort_last

    held = Ladder((Rank(CHAIN, 2),))
    new = _online("new", priority=5)
    cfg = KoiConfig()

    def chosen(deadline_s: float) -> dict[str, str]:
        bulk = _batch(0, deadline_s=deadline_s, total=20_000)
        active = [ActiveDeployment("bulk", held)]
        snapshot = ClusterSnapshot(600.0, [bulk, new], [Pool(ENV, 2)], active)
        evaluator = _effort_evaluator(bulk, snapshot, cfg)
        placed = evaluator.evaluate(new, held, key="place")
        candidates = {
            "bulk": {
                Ladder(): evaluator.defer(bulk),
                held: evaluator.evaluate(bulk, held, key="keep"),
            },
            "new": {Ladder(): evaluator.defer(new), held: placed},
        }
        assert candidates["bulk"][held].report.breach_probability <= cfg.planner.tau
        state = Planner.initial_state(cfg)
        problem = selection_problem(snapshot, state, [bulk, new], candidates, evaluator, cfg)
        return dict(select_best_effort_last(problem, cfg.selector, online=["new"]).chosen)

    assert chosen(600.0 + 2400.0) == {"bulk": "keep", "new": "defer"}
    assert chosen(600.0 + 6 * 3600.0) == {"bulk": "stop", "new": "place"}

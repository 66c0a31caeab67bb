"""S6: the joint selection under C1, C4 and C5, the plan and its reasons, and the launch.

The plan's actions come from the selector's choice; each names its runner-up.  After the
launchers report, the ledger stores the prediction of every rank that materialized, which S2
compares the next windows against.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import attrs

from koi.calibration import swap_budget
from koi.config import KoiConfig
from koi.planner._admission import BEST_EFFORT, Admission
from koi.planner._corrections import correction_fn
from koi.planner._evaluate import Evaluated, Evaluator
from koi.planner._learn import LearnReport
from koi.planner._progress import pausable, waits_past_its_slack
from koi.planner._report import AtRisk, CandidateReport, TickResult, Verdict
from koi.planner._safety import guarded_stop, safe_actions, shed_transient
from koi.planner._stages import select_best_effort_last
from koi.planner._state import LedgerEntry, PlannerState
from koi.plugins import LaunchBatch
from koi.selector import Candidate, SelectionProblem, pool_capacities
from koi.surrogate import Surrogate
from koi.types import (
    ActionKind,
    AdmissionPolicy,
    Chain,
    ClusterSnapshot,
    GpuSpec,
    Job,
    JobAction,
    Ladder,
    ModelSpec,
    Plan,
)

__all__ = [
    "fallback_result",
    "knobs",
    "ledger_after_launch",
    "ledger_entries",
    "select_plan",
    "selection_problem",
]


def selection_problem(
    snapshot: ClusterSnapshot,
    state: PlannerState,
    jobs: Sequence[Job],
    candidates: Mapping[str, Mapping[Ladder, Evaluated]],
    evaluator: Evaluator,
    cfg: KoiConfig,
    over: Mapping[str, int] | None = None,
    failing: Iterable[str] = (),
) -> SelectionProblem:
    """Every valid candidate of the tick, the pools, the swap budget, priorities and quotas.

    A finished job that is still deployed is stopped outside the selection: its GPUs stay
    taken for this tick (the host frees them when it applies the stop), so nothing placed now
    can collide with them.  ``jobs`` are the unfinished jobs.  A stop is guarded
    (:func:`guarded_stop`; a serving online job with the ``serve_best_effort`` policy gets none
    unless forced, :func:`serves_to_the_end`, nor does a batch job on time that cannot be
    paused, :func:`on_time_unpausable`) and, on pools shrunk under what holds them
    (``over``), a move is break-before-make (:func:`shed_transient`).  Each running job in
    ``failing`` (telemetry shows it missing its target) adds a repair to the swap budget.
    """
    over = over or {}
    repairs = set(failing) & {a.job_id for a in snapshot.active}
    planned = {j.id for j in jobs}
    held = {a.job_id: a.ladder.gpus_by_pool() for a in snapshot.active if a.job_id in planned}
    stopping: Counter[str] = Counter()
    for a in snapshot.active:
        if a.job_id not in planned:
            stopping.update(a.ladder.gpus_by_pool())
    pools = [
        attrs.evolve(p, capacity_gpus=max(p.capacity_gpus - stopping[p.pool_id], 0))
        for p in pool_capacities(snapshot)
    ]
    current, now = snapshot.current_ladders, snapshot.time_s
    valid: list[Candidate] = []
    for job in jobs:
        mine = candidates[job.id]
        kept = mine[current[job.id]] if job.id in current else None
        keep = kept.candidate if kept is not None else None
        for ev in mine.values():
            c = ev.candidate
            if c is None:
                continue
            if c.kind is ActionKind.STOP:
                on_over_pool = any(p in over for p in held.get(job.id, {}))
                if serves_to_the_end(job) and keep is not None and not on_over_pool:
                    continue  # its keep is always there; a stop would be an outage
                if (
                    kept is not None
                    and keep is not None
                    and not on_over_pool
                    and on_time_unpausable(job, kept.report, mine, now_s=now, cfg=cfg)
                ):
                    continue  # stopping it, for whatever gain elsewhere, makes it late
                c = guarded_stop(
                    c,
                    job=job,
                    keep=keep,
                    keep_infeasible=keep is None,
                    on_over_pool=on_over_pool,
                )
            valid.append(shed_transient(c, held.get(job.id, {}), over))
    return SelectionProblem(
        candidates=valid,
        pools=pools,
        exploration_weights=evaluator.exploration_weights(),
        swap_budget=swap_budget(
            state.calibration.regret, len(snapshot.active), cfg.calibration, repairs=len(repairs)
        ),
        priority={j.id: j.priority for j in jobs},
        quota_group={j.id: j.quota_group for j in jobs if j.quota_group is not None},
        quota_caps={q.group: q.max_gpus for q in snapshot.quotas},
        held_gpus=held,
    )


def on_time_unpausable(
    job: Job,
    keep: CandidateReport,
    mine: Mapping[Ladder, Evaluated],
    *,
    now_s: float,
    cfg: KoiConfig,
) -> bool:
    """A running batch job with a deadline whose ``keep`` is within C3 and that cannot be
    paused (:func:`koi.planner._progress.pausable`) is not stopped by choice: the rule that
    keeps a donor's scale-ins within its target holds for the selection's own stops too, so
    room for another job is not made by making this one late."""
    if job.is_online or job.target.deadline_s is None or keep.breach_probability > cfg.planner.tau:
        return False
    horizon = cfg.scoring.batch_urgency_horizon_s
    return not pausable(job, mine, now_s=now_s, horizon_s=horizon)


def serves_to_the_end(job: Job) -> bool:
    """A running online job whose policy is to serve best effort is never stopped by choice
    (only when its ladder fails C2 or its pool shrank under it): an online service stopped
    is an outage, and room for others is made by shrinking it within its target."""
    return job.is_online and job.admission is AdmissionPolicy.SERVE_BEST_EFFORT


def select_plan(
    snapshot: ClusterSnapshot,
    state: PlannerState,
    jobs: Sequence[Job],
    finished: Sequence[Job],
    candidates: Mapping[str, Mapping[Ladder, Evaluated]],
    problem: SelectionProblem,
    *,
    learned: LearnReport,
    cfg: KoiConfig,
    errors: Sequence[str],
    admission: Admission | None = None,
    late: Mapping[str, str] | None = None,
) -> TickResult:
    """Solve the joint selection and turn the choice into the plan with its reasons, and name
    the jobs at risk (``admission``'s verdicts, ``late`` batch jobs, ladders past C3)."""
    if jobs:
        online = [j.id for j in jobs if j.is_online]
        selection = select_best_effort_last(problem, cfg.selector, online=online)
        status, objective, gap = selection.status.value, selection.objective, selection.gap
        chosen, binding = dict(selection.chosen), selection.binding
    else:  # every job finished: nothing to choose
        status, objective, gap, chosen, binding = "empty", 0.0, 0.0, {}, ()
    actions: list[JobAction] = [
        JobAction(j.id, ActionKind.STOP, Ladder(), "finished") for j in finished
    ]
    reports: list[CandidateReport] = []
    picked: dict[str, Evaluated] = {}
    for job in jobs:
        pick = chosen[job.id]
        mine = candidates[job.id]
        for ev in mine.values():
            reports.append(attrs.evolve(ev.report, chosen=ev.report.key == pick))
        picked[job.id] = next(e for e in mine.values() if e.report.key == pick)
    room = made_room(snapshot, picked)
    horizon = cfg.scoring.batch_urgency_horizon_s
    waiting = {}
    for job in jobs:
        if picked[job.id].report.ladder.is_empty:
            why = waits_past_its_slack(
                job, candidates[job.id], now_s=snapshot.time_s, horizon_s=horizon
            )
            if why is not None:
                waiting[job.id] = why
    at_risk = jobs_at_risk(
        jobs, picked, admission or Admission(), {**waiting, **(late or {})}, tau=cfg.planner.tau
    )
    for job in jobs:
        ev = picked[job.id]
        reason = _reason(ev, candidates[job.id]) + room.get(job.id, "")
        actions.append(JobAction(job.id, ev.report.kind, ev.report.ladder, reason))
    diagnostics: dict[str, object] = {"selector": status, "gap": gap}
    if at_risk:
        diagnostics["at_risk"] = {r.job_id: r.verdict.value for r in at_risk}
    plan = Plan(
        time_s=snapshot.time_s,
        actions=tuple(sorted(actions, key=lambda a: a.job_id)),
        diagnostics=diagnostics,
    )
    learning = attrs.evolve(
        learned,
        mean_uncertainty=state.evidence.mean_uncertainty(),
        mechanisms=len(state.mechanisms),
    )
    return TickResult(
        plan=plan,
        candidates=tuple(reports),
        selector_status=status,
        objective=objective,
        gap=gap,
        binding=binding,
        knobs=knobs(state, problem.swap_budget),
        errors=tuple(errors),
        learning=learning,
        at_risk=at_risk,
    )


def made_room(snapshot: ClusterSnapshot, picked: Mapping[str, Evaluated]) -> dict[str, str]:
    """Reason suffixes naming what was moved for whom: a chosen scale-in or stop of a running
    job, and the placed or moved jobs that take more GPUs on the pools it frees than were free."""
    current = snapshot.current_ladders
    free = Counter({p.id: p.capacity_gpus for p in snapshot.pools})
    for ladder in current.values():
        free.subtract(ladder.gpus_by_pool())
    shrunk: dict[str, dict[str, int]] = {}
    for job_id, ev in picked.items():
        r = ev.report
        if job_id in current and (
            r.kind is ActionKind.STOP
            or (r.kind is ActionKind.RECONFIGURE and r.ladder.scales_in(current[job_id]))
        ):
            before = current[job_id].gpus_by_pool()
            after = r.ladder.gpus_by_pool()
            gone = {p: n - after.get(p, 0) for p, n in before.items() if n > after.get(p, 0)}
            if gone:
                shrunk[job_id] = gone
    if not shrunk:
        return {}
    takers: dict[str, list[str]] = {}
    for job_id, ev in picked.items():
        r = ev.report
        if job_id in shrunk or r.kind not in (ActionKind.PLACE, ActionKind.RECONFIGURE):
            continue
        held = current.get(job_id, Ladder()).gpus_by_pool()
        for pool, n in r.ladder.gpus_by_pool().items():
            if n - held.get(pool, 0) > max(free[pool], 0):
                takers.setdefault(pool, []).append(job_id)
    out: dict[str, str] = {}
    for donor, gone in sorted(shrunk.items()):
        for pool, n in sorted(gone.items()):
            whom = takers.get(pool, [])
            if not whom:
                continue
            out[donor] = out.get(donor, "") + (
                f"; made room: gave up {n} GPUs on {pool} for {', '.join(sorted(whom))}"
            )
            for taker in whom:
                out[taker] = out.get(taker, "") + f"; room made: {donor} gave up {n} GPUs on {pool}"
    return out


def jobs_at_risk(
    jobs: Sequence[Job],
    picked: Mapping[str, Evaluated],
    admission: Admission,
    late: Mapping[str, str],
    *,
    tau: float,
) -> tuple[AtRisk, ...]:
    """The jobs the plan may not serve within their target, and why."""
    out: list[AtRisk] = []
    for job in jobs:
        r = picked[job.id].report
        serving = not r.ladder.is_empty
        p = r.breach_probability if serving else 1.0
        verdict = admission.verdicts.get(job.id)
        if verdict is not None and (not serving or p > tau):
            how = (
                "served best effort"
                if BEST_EFFORT in r.sources
                else "served"
                if serving
                else "refused (admission policy)"
                if job.admission is AdmissionPolicy.REFUSE
                else "not served"
            )
            out.append(
                attrs.evolve(verdict, detail=f"{verdict.detail}; {how}", breach_probability=p)
            )
        elif job.id in late:
            out.append(AtRisk(job.id, Verdict.DEADLINE, late[job.id], p))
        elif serving and p > tau:
            out.append(
                AtRisk(job.id, Verdict.BREACH, f"breach probability {p:.2f} > τ {tau:.2f}", p)
            )
        elif not serving and job.is_online:
            # A refused service is an outage even when admission judged other stuck jobs
            # this tick (``make_room_jobs``) or the tick ran out of time before verdicts.
            out.append(_unserved(job.id, "no verdict this tick"))
    return tuple(out)


def _unserved(job_id: str, why: str) -> AtRisk:
    """An online job the plan leaves without a ladder, and why it has no other verdict."""
    return AtRisk(job_id, Verdict.UNSERVED, f"not served; {why}")


def fallback_result(
    snapshot: ClusterSnapshot, state: PlannerState, errors: Sequence[str]
) -> TickResult:
    """The safe plan (DESIGN §3 "safe fallback"): keep every active job, defer every pending
    one, stop finished jobs, and shed what no longer fits a shrunk pool.  The online jobs it
    leaves unserved are at risk."""
    actions = safe_actions(snapshot, "safe fallback")
    online = {j.id for j in snapshot.jobs if j.is_online}
    at_risk = tuple(
        _unserved(a.job_id, a.reason) for a in actions if a.job_id in online and a.ladder.is_empty
    )
    diagnostics: dict[str, object] = {"fallback": True}
    if at_risk:
        diagnostics["at_risk"] = {r.job_id: r.verdict.value for r in at_risk}
    plan = Plan(time_s=snapshot.time_s, actions=actions, diagnostics=diagnostics)
    return TickResult(
        plan=plan,
        candidates=(),
        selector_status="fallback",
        objective=math.nan,
        gap=math.nan,
        knobs=knobs(state, None),
        errors=tuple(errors),
        fallback=True,
        at_risk=at_risk,
    )


def knobs(state: PlannerState, swap: int | None) -> dict[str, float]:
    """The slow loop's knobs in force, for the report."""
    c = state.calibration
    return {
        "beta": c.beta,
        "lambda": c.lam,
        "regret": c.regret,
        "epsilon": state.epsilon.eps,
        "coverage": state.epsilon.coverage,
        "swap_budget": float(swap if swap is not None else math.inf),
    }


def ledger_entries(
    state: PlannerState,
    job: Job,
    ladder: Ladder,
    *,
    now_s: float,
    surrogate: Surrogate,
    gpus: Mapping[str, GpuSpec],
    models: Mapping[str, ModelSpec],
    cfg: KoiConfig,
) -> dict[tuple[str, Chain], LedgerEntry]:
    """The prediction, with the corrections in force, of each rank of ``ladder``."""
    corr = correction_fn(state, job, gpus=gpus, models=models, cfg=cfg)
    pred = surrogate.screen(job, ladder, now_s=now_s, corrections=corr)
    return {
        (job.id, rp.rank.chain): LedgerEntry(
            job_id=job.id,
            chain=rp.rank.chain,
            replicas=rp.rank.replicas,
            committed_s=now_s,
            outcomes=rp.outcomes,
            mediators=rp.mediators,
        )
        for rp in pred.ranks
    }


def ledger_after_launch(
    state: PlannerState,
    snapshot: ClusterSnapshot,
    plan: Plan,
    launched: LaunchBatch | None,
    *,
    surrogate: Surrogate,
    gpus: Mapping[str, GpuSpec],
    models: Mapping[str, ModelSpec],
    cfg: KoiConfig,
) -> dict[tuple[str, Chain], LedgerEntry]:
    """The ledger for the plan as it materialized: every placed or reconfigured job's ranks
    that came up get their prediction; kept jobs keep theirs; stopped and deferred lose it."""
    ledger = {k: v for k, v in state.ledger.items() if k[0] in plan.ladders}
    for action in plan.actions:
        if action.ladder.is_empty or action.kind is ActionKind.KEEP:
            continue
        ladder = action.ladder
        if launched is not None and any(r.job_id == action.job_id for r in launched.results):
            ladder = launched.materialized(action.job_id)
        if ladder.is_empty:
            continue
        job = snapshot.job(action.job_id)
        ledger = {k: v for k, v in ledger.items() if k[0] != job.id}
        ledger.update(
            ledger_entries(
                state,
                job,
                ladder,
                now_s=snapshot.time_s,
                surrogate=surrogate,
                gpus=gpus,
                models=models,
                cfg=cfg,
            )
        )
    return ledger


def _reason(chosen: Evaluated, candidates: Mapping[Ladder, Evaluated]) -> str:
    r = chosen.report
    others = sorted(
        (e.report for e in candidates.values() if e.report.key != r.key and not e.report.rejected),
        key=lambda c: -c.value,
    )
    text = f"value {r.value:.3f} (J {r.tchebycheff:.3f}, breach {r.breach_probability:.2f})"
    if others:
        text += f"; runner-up {others[0].key} value {others[0].value:.3f}"
    return text

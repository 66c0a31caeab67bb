"""Admission after S4/S5: make room for jobs nothing free can serve, serve the hopeless ones
best effort, and say which jobs are at risk.

A job is *stuck* when none of its candidates is within C3's risk bound on what is free now (a
running job whose keep ladder is past the bound counts).  For a stuck job:

1. **Verdict.**  The built-in generator proposes for it on the whole fleet, as if no other job
   held a GPU.  If none of those ladders passes C2 and C3, no candidate anywhere in the fleet can
   meet the job's target: it is *hopeless*.  Otherwise it is blocked by *capacity*.
2. **Make room** (capacity).  Every running job of no higher priority says how many replicas
   each of its ranks could give up while still passing C3 and staying clear of its bounds by
   the proposer's risk margin (its *spare*, found by bisection on the scale-in and checked on
   the scale-in as it is offered, replayed); a batch job
   with at least the urgency horizon of deadline slack whose predicted work fits in half the
   time left, or an online job that accepts refusal, can give everything (its stop candidate
   is the move).  The
   generator proposes ladders for the stuck job on free GPUs plus that spare (outside its
   budget book, so a GPU type that meets the target but is not the cheapest counts), and the
   donors get their scale-in ladders as candidates.  Nothing is decided here:
   the joint selection takes the newcomer's ladder only with enough donors' smaller ladders,
   which C1 already expresses (a scale-in frees its GPUs at once).
3. **Best effort** (policy ``serve_best_effort``; pending jobs and running online ones):
   serve as much of the offered traffic as possible.  The generator also proposes for the
   job on what is free, on any GPU type, sized for its rate with the most headroom; its
   ladders that C3 rejected and that fit what is free now (with what the job holds) enter as
   best-effort candidates, those predicted to carry the largest share of the demand first
   (:func:`served_fraction`), then the least likely to breach.  Each loses
   ``refusal_margin`` times the share it cannot carry from its value, and so does a running
   job's keep (:func:`_effort_value`).  Together they may use, beyond what their own jobs
   hold, only GPUs nobody holds now and what the donors' room-freeing scale-ins give up (the
   selector's ``free`` rows; donors are chosen before best effort is on the table), so C3
   never takes capacity from a job within its target to give a stuck one a smaller breach.
   A hopeless job that nothing free serves in full is also offered the ladders that carry
   all of its traffic on free GPUs plus the donors' spare, and the donors their scale-ins.
   Refusing an online job is then worth ``refusal_margin`` less than the worst of them; a
   batch job's deferral keeps its price, the deadline slack (waiting is no outage).  A
   pending job's first pick also comes smaller, so that it is still served when stage one of
   the selection takes some of the free GPUs it counted on.

   With ``spread_best_effort`` best effort is elastic: when no ladder on what is free carries
   all of a job's demand, ladders spread over several GPU types join them (:func:`_spreads`);
   an option that carries a share of the demand is valued by that share; and a running job
   judged hopeless is a donor of everything but one replica to a job blocked by capacity
   (step 2), whatever its telemetry says — its best effort is no guarantee to keep.

Longer than most modules: the three steps are one decision about the same stuck jobs, on the
same evaluations and proposal context, and splitting them would pass that state around.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, MutableMapping, Sequence

import attrs

from koi.candidates import CandidateGenerator, ProposalContext, at_risk_outcomes, free_gpus
from koi.config import KoiConfig
from koi.planner._evaluate import Evaluated, Evaluator
from koi.planner._progress import pausable
from koi.planner._report import AtRisk, CandidateReport, Verdict
from koi.types import (
    ActionKind,
    AdmissionPolicy,
    ClusterSnapshot,
    Job,
    Ladder,
    Observation,
    Outcome,
    Rank,
)

__all__ = [
    "BEST_EFFORT",
    "MAKE_ROOM",
    "Admission",
    "admit",
    "effort_picks",
    "served_fraction",
    "struggling",
    "stuck",
]

#: The source tag of make-room ladders (the newcomer's and the donors' scale-ins).
MAKE_ROOM = "make-room"
#: The source tag of best-effort ladders.
BEST_EFFORT = "best-effort"
# Make-room ladders per stuck job, best value first.
_ROOM_LADDERS = 3


@attrs.frozen
class Admission:
    """What admission found: a verdict per stuck job (the plan's reasons say which donors
    gave up what, from the selection)."""

    verdicts: Mapping[str, AtRisk] = attrs.field(factory=dict)


def struggling(
    observations: Iterable[Observation], jobs: Iterable[Job], margin: float
) -> frozenset[str]:
    """Online jobs whose last window says they are not clear of their target: a measured p99
    TTFT or TPOT within ``margin`` of its bound (or past it), or fewer than ``1 - margin`` of
    their requests completed.  Telemetry outranks the prediction: such a job gives nothing up
    to make room, whatever the surrogate says its smaller ladder would do."""
    by_id = {j.id: j for j in jobs if j.is_online}
    requests: Counter[str] = Counter()
    completed: Counter[str] = Counter()
    out: set[str] = set()
    for o in observations:
        job = by_id.get(o.job_id)
        if job is None:
            continue
        requests[o.job_id] += o.requests
        completed[o.job_id] += o.completed
        for outcome, bound in (
            (Outcome.TTFT, job.target.p99_ttft_ms),
            (Outcome.TPOT, job.target.p99_tpot_ms),
        ):
            y = o.measured(outcome)
            if bound is not None and y is not None and y >= (1 - margin) * bound:
                out.add(o.job_id)
    out.update(j for j, n in requests.items() if completed[j] < (1 - margin) * n)
    return frozenset(out)


def stuck(job: Job, mine: Mapping[Ladder, Evaluated], tau: float) -> bool:
    """No candidate of ``job`` is a change that passed C3, and it does not run within C3."""
    for ev in mine.values():
        if ev.candidate is None:
            continue
        kind = ev.report.kind
        if kind in (ActionKind.PLACE, ActionKind.RECONFIGURE):
            return False
        if kind is ActionKind.KEEP and ev.report.breach_probability <= tau:
            return False
    return True


def _order(jobs: Iterable[Job]) -> list[Job]:
    return sorted(jobs, key=lambda j: (-j.priority, j.arrival_s, j.id))


def _most(hi: int, fits: Callable[[int], bool]) -> int:
    """The largest ``k`` in ``[0, hi]`` with ``fits(k)``, by bisection (``fits`` is monotone:
    fewer replicas given up is never riskier; 0 always fits)."""
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _scaled_in(ladder: Ladder, index: int, k: int) -> Ladder:
    ranks = list(ladder.ranks)
    r = ranks[index]
    if r.replicas - k <= 0:
        del ranks[index]
    else:
        ranks[index] = Rank(r.chain, r.replicas - k)
    return Ladder(tuple(ranks))


class _Spare:
    """Per running job and rank: the most replicas it can give up and still pass C3 (and the
    evaluations made finding out).  Computed once per tick, only for the donors asked for.

    A ``yielding`` job (hopeless, served best effort; ``spread_best_effort``) can give up
    everything but its last replica: its best effort is no guarantee to keep.  Its scale-ins
    are past C3 like its keep, and are valued like it, by the share of the demand they carry
    (:func:`_effort_value`)."""

    def __init__(
        self,
        evaluator: Evaluator,
        candidates: MutableMapping[str, dict[Ladder, Evaluated]],
        yielding: Collection[str] = (),
    ):
        self.evaluator = evaluator
        self.candidates = candidates
        self.yielding = yielding
        self._spare: dict[str, dict[int, int]] = {}
        self._shrunk: dict[tuple[str, int, int], Evaluated] = {}
        self._replayed: dict[tuple[str, int, int], Evaluated] = {}

    def _evaluate(self, job: Job, current: Ladder, index: int, k: int) -> Evaluated:
        key = (job.id, index, k)
        hit = self._shrunk.get(key)
        if hit is None:
            ladder = _scaled_in(current, index, k)
            hit = self.candidates[job.id].get(ladder)
            if hit is None or (job.id in self.yielding and hit.candidate is None):
                hit = self._room(job, ladder, key=f"room{len(self._shrunk)}", sources=(MAKE_ROOM,))
            self._shrunk[key] = hit
        return hit

    def _offered(self, job: Job, current: Ladder, index: int, k: int) -> Evaluated:
        """The scale-in as :meth:`offer` puts it on the donor's list: replayed, as its keep
        was (S5)."""
        key = (job.id, index, k)
        hit = self._replayed.get(key)
        if hit is None:
            r = self._evaluate(job, current, index, k).report
            hit = self._room(job, r.ladder, key=r.key, sources=r.sources, replay=True)
            self._replayed[key] = hit
        return hit

    def _room(
        self, job: Job, ladder: Ladder, *, key: str, sources: tuple[str, ...], replay: bool = False
    ) -> Evaluated:
        """The donor's scale-in ``ladder`` evaluated.  A yielding job's is past C3 like the
        keep it shrinks (evaluated as best effort) but enters the selection's first stage,
        where it frees room for a job within its target, valued like its keep."""
        yielding = job.id in self.yielding
        ev = self.evaluator.evaluate(
            job, ladder, key=key, sources=sources, replay=replay, best_effort=yielding
        )
        if not yielding or ev.candidate is None:
            return ev
        freeing = attrs.evolve(ev.candidate, best_effort=False)
        return _revalued(
            attrs.evolve(ev, candidate=freeing), _effort_value(job, ev, self.evaluator)
        )

    def of(self, job: Job, current: Ladder) -> dict[int, int]:
        """Rank index → replicas it can give up within C3 (bisection: fewer removed is never
        riskier)."""
        hit = self._spare.get(job.id)
        if hit is not None:
            return hit
        out: dict[int, int] = {}
        if self._pausable(job):  # all of it: its stop candidate frees every GPU
            out = {i: r.replicas for i, r in enumerate(current.ranks)}
            self._spare[job.id] = out
            return out
        if job.id in self.yielding:  # all but one replica: it keeps serving what it can
            kept = 1 if len(current.ranks) == 1 else 0
            out = {i: r.replicas - kept for i, r in enumerate(current.ranks) if r.replicas > kept}
            self._spare[job.id] = out
            return out
        for i, r in enumerate(current.ranks):
            hi = r.replicas if len(current.ranks) > 1 else r.replicas - 1
            lo = _most(hi, functools.partial(self._fits, self._evaluate, job, current, i))
            # The scale-in offered is the replayed one: a spare only the closed form vouches
            # for is room a newcomer's ladder counts on and no donor candidate frees.
            offered = functools.partial(self._fits, self._offered, job, current, i)
            if lo > 0 and not offered(lo):
                lo = _most(lo - 1, offered)
            if lo > 0:
                out[i] = lo
        self._spare[job.id] = out
        return out

    def _fits(
        self,
        evaluate: Callable[[Job, Ladder, int, int], Evaluated],
        job: Job,
        current: Ladder,
        index: int,
        k: int,
    ) -> bool:
        """Whether giving up ``k`` replicas of rank ``index`` leaves the donor within its
        target, as ``evaluate`` (the closed form, or the scale-in as offered) predicts it."""
        return self._within_target(job, evaluate(job, current, index, k))

    def _pausable(self, job: Job) -> bool:
        """A job that may be stopped to make room: a batch job whose deadline slack (at the
        best rate on offer) is at least the urgency horizon and whose predicted work fits in
        half the time left, or an online job that accepts refusal."""
        if job.is_online:
            return job.admission is AdmissionPolicy.REFUSE
        return pausable(
            job,
            self.candidates[job.id],
            now_s=self.evaluator.snapshot.time_s,
            horizon_s=self.evaluator.cfg.scoring.batch_urgency_horizon_s,
        )

    def _within_target(self, job: Job, ev: Evaluated) -> bool:
        """A donor gives up only what leaves it inside C3 and clear of its bounds by the
        proposer's risk margin: a shrink to the edge of C3 turns the surrogate's optimism
        into the donor's outage."""
        if ev.candidate is None or ev.prediction is None:
            return False
        margin = self.evaluator.cfg.proposer.risk_margin
        return not at_risk_outcomes(job, ev.prediction.outcomes, margin)

    def offer(self, job: Job, current: Ladder, index: int, amounts: Iterable[int]) -> None:
        """Put the scale-ins of ``amounts`` replicas on the donor's candidate list, marked as
        freeing room (what they give up is free to best-effort candidates)."""
        mine = self.candidates[job.id]
        for k in sorted(set(amounts)):
            if _scaled_in(current, index, k).is_empty:
                continue  # that is its stop, already a candidate
            shrunk = self._evaluate(job, current, index, k)
            if shrunk.candidate is None:
                continue
            known = mine.get(shrunk.report.ladder)
            if known is not None and known.candidate is not None:  # it now also frees room
                # A yielding job's scale-in frees room in stage one (as :meth:`_room` puts
                # it), even when it was already on its list as a best-effort ladder.
                effort = known.candidate.best_effort and job.id not in self.yielding
                freeing = attrs.evolve(known.candidate, frees_room=True, best_effort=effort)
                mine[known.report.ladder] = attrs.evolve(known, candidate=freeing)
                continue
            if known is not None and job.id not in self.yielding:
                continue
            # Replayed, as its keep was (S5); a yielding job's own rejected ladder is replaced.
            r = shrunk.report
            ev = self._offered(job, current, index, k)
            if ev.candidate is None:
                mine[r.ladder] = ev
                continue
            src = ev.report.sources if MAKE_ROOM in ev.report.sources else (MAKE_ROOM,)
            mine[r.ladder] = attrs.evolve(
                ev,
                report=attrs.evolve(ev.report, sources=src),
                candidate=attrs.evolve(ev.candidate, frees_room=True),
            )


def admit(
    jobs: Sequence[Job],
    candidates: MutableMapping[str, dict[Ladder, Evaluated]],
    *,
    evaluator: Evaluator,
    generator: CandidateGenerator,
    cfg: KoiConfig,
    deadline_passed: bool = False,
    unsafe_donors: Collection[str] = (),
) -> Admission:
    """Verdicts, make-room and best-effort candidates for the stuck jobs (in place).

    ``unsafe_donors`` give nothing up: jobs telemetry shows struggling (:func:`struggling`)
    and batch jobs late at their current rate."""
    snapshot = evaluator.snapshot
    tau = cfg.planner.tau
    current = snapshot.current_ladders
    stuck_jobs = [job for job in _order(jobs) if stuck(job, candidates[job.id], tau)]
    verdicts: dict[str, AtRisk] = {}
    if not deadline_passed:
        for job in stuck_jobs[: cfg.planner.make_room_jobs]:
            verdicts[job.id] = _verdict(job, snapshot, evaluator, generator, cfg)
    # A running job nothing in the fleet serves within its target gives way to jobs that
    # can be served within theirs: its best effort is no guarantee to keep.
    yielding = frozenset(
        j
        for j, v in verdicts.items()
        if cfg.planner.spread_best_effort and v.verdict is Verdict.HOPELESS and j in current
    )
    by_id = {
        j.id: j
        for j in jobs
        if j.id not in unsafe_donors or j.id not in current or j.id in yielding
    }
    spare = _Spare(evaluator, candidates, yielding)
    within = {k: v for k, v in by_id.items() if k not in yielding}  # a hopeless job's donors
    for job in stuck_jobs:
        mine = candidates[job.id]
        verdict = verdicts.get(job.id)
        if verdict is not None and verdict.verdict is Verdict.CAPACITY and cfg.planner.make_room:
            donors = _Donors(job, by_id, current, spare)
            _make_room(job, mine, donors, evaluator, generator, cfg)
        if job.admission is AdmissionPolicy.SERVE_BEST_EFFORT and (
            job.id not in current or job.is_online
        ):
            hopeless = verdict is not None and verdict.verdict is Verdict.HOPELESS
            room = None
            if hopeless and cfg.planner.make_room:  # from jobs within their targets only
                room = _Donors(job, within, current, spare)
            _best_effort(job, mine, evaluator, generator, cfg, room)
    return Admission(verdicts=verdicts)


def _context(
    job: Job,
    snapshot: ClusterSnapshot,
    evaluator: Evaluator,
    cfg: KoiConfig,
    reclaimable: Mapping[str, int],
    *,
    rnd: int = 0,
) -> ProposalContext:
    """The whole fleet (no budget book), with ``reclaimable`` GPUs counted as free, sized with
    the corrections the evaluator judges by."""
    return ProposalContext(
        snapshot=snapshot,
        gpus=evaluator.gpus,
        models=evaluator.models,
        incumbent=snapshot.current_ladders.get(job.id),
        max_candidates=cfg.planner.max_candidates,
        reclaimable=reclaimable,
        round=rnd,
        corrections=evaluator.corrections(job),
    )


def _verdict(
    job: Job,
    snapshot: ClusterSnapshot,
    evaluator: Evaluator,
    generator: CandidateGenerator,
    cfg: KoiConfig,
) -> AtRisk:
    """Hopeless (nothing in the whole fleet passes C2 and C3) or blocked by capacity."""
    held: Counter[str] = Counter()
    for a in snapshot.active:
        if a.job_id != job.id:
            held.update(a.ladder.gpus_by_pool())
    # With the most headroom the search rounds give: hopeless means no sizing helps.
    rnd = cfg.planner.search_rounds - 1
    ladders = generator.propose(job, _context(job, snapshot, evaluator, cfg, held, rnd=rnd))
    best = math.inf
    for n, ladder in enumerate(ladders):
        ev = evaluator.evaluate(job, ladder, key=f"fleet{n}")
        if ev.candidate is not None:
            return AtRisk(job.id, Verdict.CAPACITY, "no ladder within its target fits what is free")
        if ev.prediction is not None and ev.prediction.feasible:
            best = min(best, ev.report.breach_probability)
    what = "deadline" if not job.is_online else "SLO"
    detail = f"no ladder in this fleet meets its {what}"
    if math.isfinite(best):
        detail += f" (least breach probability {best:.2f})"
    return AtRisk(job.id, Verdict.HOPELESS, detail)


class _Donors:
    """The running jobs of no higher priority than a stuck job, what they can spare (within
    their targets, or all but a replica for a yielding one: :class:`_Spare`), and the offers
    of their scale-ins that free the GPUs a ladder lacks."""

    def __init__(
        self, job: Job, jobs: Mapping[str, Job], current: Mapping[str, Ladder], spare: _Spare
    ):
        self.current = current
        self.spare = spare
        self.jobs = [
            jobs[jid]
            for jid in current
            if jid != job.id and jid in jobs and jobs[jid].priority <= job.priority
        ]

    def reclaimable(self) -> Counter[str]:
        """GPUs per pool the donors could give up together."""
        out: Counter[str] = Counter()
        for d in self.jobs:
            ladder = self.current[d.id]
            for i, k in self.spare.of(d, ladder).items():
                r = ladder.ranks[i]
                out[r.chain.environment.id] += k * r.chain.gpus
        return out

    def offer(self, deficit: Mapping[str, int]) -> None:
        """Offer the scale-ins that cover ``deficit`` (GPUs per pool), donors in
        :func:`_donor_order`."""
        for pool, short in deficit.items():
            left = short
            for d in _donor_order(self.jobs, self.current, pool):
                ladder = self.current[d.id]
                for i, k in self.spare.of(d, ladder).items():
                    r = ladder.ranks[i]
                    if r.chain.environment.id != pool:
                        continue
                    need = math.ceil(left / r.chain.gpus)
                    self.spare.offer(d, ladder, i, (min(k, need), k, 1))
                    left -= min(k, need) * r.chain.gpus
                if left <= 0:
                    break


def _room_ladders(
    job: Job,
    mine: dict[Ladder, Evaluated],
    donors: _Donors,
    evaluator: Evaluator,
    generator: CandidateGenerator,
    cfg: KoiConfig,
    *,
    rnd: int = 0,
) -> list[Evaluated]:
    """``job``'s ladders on free GPUs plus what the donors can spare (proposal round
    ``rnd``), evaluated and kept in ``mine``; none when the donors can spare nothing."""
    reclaim = donors.reclaimable()
    if not reclaim:
        return []
    context = _context(job, evaluator.snapshot, evaluator, cfg, reclaim, rnd=rnd)
    out = []
    for ladder in generator.propose(job, context):
        ev = mine.get(ladder)
        if ev is None:
            ev = evaluator.evaluate(job, ladder, key=f"room{len(mine)}", sources=(MAKE_ROOM,))
            mine[ladder] = ev
        out.append(ev)
    return out


def _make_room(
    job: Job,
    mine: dict[Ladder, Evaluated],
    donors: _Donors,
    evaluator: Evaluator,
    generator: CandidateGenerator,
    cfg: KoiConfig,
) -> None:
    """Ladders for ``job`` on free GPUs plus what donors can spare, and the donors' scale-ins
    that free the GPUs each of the best ladders needs."""
    free = free_gpus(evaluator.snapshot, except_job=job.id)
    held = donors.current.get(job.id, Ladder()).gpus_by_pool()
    room = [
        ev
        for ev in _room_ladders(job, mine, donors, evaluator, generator, cfg)
        if ev.candidate is not None and _deficit(ev.report.ladder, free, held)
    ]
    room.sort(key=lambda e: -e.report.value)
    best = room[:_ROOM_LADDERS]
    for ev in _replayed(job, best, mine, evaluator) if job.id in donors.current else best:
        donors.offer(_deficit(ev.report.ladder, free, held))


def _effort_room(
    job: Job,
    mine: dict[Ladder, Evaluated],
    donors: _Donors,
    free: Mapping[str, int],
    evaluator: Evaluator,
    generator: CandidateGenerator,
    cfg: KoiConfig,
) -> list[tuple[float, Evaluated]]:
    """A hopeless job's C3-rejected ladders that carry all of its demand on free GPUs plus
    what donors can spare (within their own targets), the least likely to breach first."""
    rnd = cfg.planner.search_rounds - 1  # the most headroom, as best effort's own proposals
    out = [
        (served, ev)
        for ev in _room_ladders(job, mine, donors, evaluator, generator, cfg, rnd=rnd)
        if ev.candidate is None
        and ev.report.rejected.startswith("C3")
        and _deficit(ev.report.ladder, free, {})
        and (served := served_fraction(job, ev, evaluator)) >= 1.0
    ]
    out.sort(key=lambda se: (se[1].report.breach_probability, -se[1].report.value))
    return out[:_ROOM_LADDERS]


def _replayed(
    job: Job, evs: Sequence[Evaluated], mine: dict[Ladder, Evaluated], evaluator: Evaluator
) -> list[Evaluated]:
    """``evs`` re-predicted with the replay engine's p99s, as a running job's keep was (S5):
    a ladder that enters the selection here competes with the keep at its fidelity, not with
    the closed form's, which near saturation can be far more optimistic.  (A pending job
    stuck in S5 has no replayed candidate: its admission ladders compete with each other, at
    the closed form's.)  Those still valid, in order; ``mine`` holds the replayed
    evaluations."""
    out = []
    for ev in evs:
        r = ev.report
        fresh = evaluator.evaluate(job, r.ladder, key=r.key, sources=r.sources, replay=True)
        mine[r.ladder] = fresh
        if fresh.candidate is not None:
            out.append(fresh)
    return out


def _deficit(ladder: Ladder, free: Mapping[str, int], held: Mapping[str, int]) -> dict[str, int]:
    """GPUs per pool ``ladder`` needs beyond what is free (and what its job holds there)."""
    out = {}
    for pool, n in ladder.gpus_by_pool().items():
        short = n - max(free.get(pool, 0), 0) - held.get(pool, 0)
        if short > 0:
            out[pool] = short
    return out


def _donor_order(donors: Sequence[Job], current: Mapping[str, Ladder], pool: str) -> list[Job]:
    """Who gives first: batch jobs (deadline slack), lower priority, more GPUs on the pool."""
    on_pool = [d for d in donors if pool in current[d.id].gpus_by_pool()]
    return sorted(
        on_pool,
        key=lambda d: (d.is_online, d.priority, -current[d.id].gpus_by_pool()[pool], d.id),
    )


def served_fraction(job: Job, ev: Evaluated, evaluator: Evaluator) -> float:
    """The share of ``job``'s demand ``ev``'s ladder is predicted to carry, in [0, 1].

    Online: the ladder's saturation capacity (each rank's, scaled by the throughput correction
    in force for its chain) over the forecast offered output rate; batch: its predicted
    throughput over the rate that finishes by the deadline.  A deployment below the rate it
    is offered does not serve that fraction well: its queue grows without bound and every
    request waits behind it — which is why best effort ranks by this first."""
    if ev.prediction is None or not ev.prediction.feasible:
        return 0.0
    need = job.required_output_tok_s(evaluator.snapshot.time_s)
    if need <= 0:
        return 1.0
    if job.is_online:
        have = evaluator.capacity_tok_s(job, ev.prediction)
    else:
        have = ev.prediction.outcomes.throughput_tok_s
    return min(1.0, max(have, 0.0) / need)


def _best_effort(
    job: Job,
    mine: dict[Ladder, Evaluated],
    evaluator: Evaluator,
    generator: CandidateGenerator,
    cfg: KoiConfig,
    room: _Donors | None = None,
) -> None:
    """The job's C3-rejected ladders that fit what is free, as best-effort candidates: those
    predicted to keep up with the job's traffic first, then the least likely to breach.  A
    best-effort candidate's value loses ``refusal_margin`` times the share of the demand it
    cannot carry, and refusing an online job then scores below every one of them (a batch
    job's deferral keeps its price).

    With ``room`` (a hopeless job) and nothing free that carries all of its traffic, ladders
    that do carry it on what donors can spare join them (:func:`_effort_room`), and the
    donors' scale-ins are offered.  A pending job's first pick also comes smaller
    (:func:`_smaller`), so that it is served on what stage one of the selection leaves."""
    limit = cfg.planner.best_effort_candidates
    if limit == 0:
        return
    snapshot = evaluator.snapshot
    # Ladders sized for the rate on what is free, with the most headroom the rounds give and
    # on any GPU type: the job's own proposals keep to its budget book, which may hold only
    # types it cannot keep up on.
    rnd = cfg.planner.search_rounds - 1
    for n, ladder in enumerate(
        generator.propose(job, _context(job, snapshot, evaluator, cfg, {}, rnd=rnd))
    ):
        if ladder not in mine:
            mine[ladder] = evaluator.evaluate(job, ladder, key=f"effort{n}", sources=(BEST_EFFORT,))
    free = free_gpus(snapshot, except_job=job.id)
    rejected = [
        (served_fraction(job, ev, evaluator), ev)
        for ev in mine.values()
        if ev.candidate is None
        and ev.report.rejected.startswith("C3")
        and not _deficit(ev.report.ladder, free, {})
    ]
    spreads = []
    if cfg.planner.spread_best_effort and rejected and all(s < 1.0 for s, _ in rejected):
        spreads = _c3_rejected(job, _spreads(rejected, free), mine, evaluator, "spread")
    if room is not None and all(served < 1.0 for served, _ in rejected):
        rejected += _effort_room(job, mine, room, free, evaluator, generator, cfg)
    rejected.sort(key=lambda se: (-se[0], se[1].report.breach_probability, -se[1].report.value))
    keep = mine.get(snapshot.current_ladders.get(job.id, Ladder()))  # a running job's keep
    if keep is not None and (keep.candidate is None or keep.report.kind is not ActionKind.KEEP):
        keep = None
    margin = cfg.planner.refusal_margin
    running = job.id in snapshot.current_ladders  # its keep was replayed (S5)
    picked = []
    offered = effort_picks(rejected, limit, None if keep is None else keep.report)
    if offered and not running:  # a pending job's first pick, smaller (:func:`_smaller`)
        have = {ev.report.ladder for _, ev in offered}
        smaller = _smaller(offered[0][1].report.ladder)
        offered += _c3_rejected(job, smaller, mine, evaluator, "smaller", skip=have)
    for served, ev in [*offered, *spreads]:
        r = ev.report
        sources = r.sources if BEST_EFFORT in r.sources else (*r.sources, BEST_EFFORT)
        best = evaluator.evaluate(
            job, r.ladder, key=r.key, sources=sources, best_effort=True, replay=running
        )
        if best.candidate is not None:
            best = _revalued(best, _effort_value(job, best, evaluator, served))
            mine[r.ladder] = best
            picked.append(best)
            if room is not None and (deficit := _deficit(r.ladder, free, {})):
                room.offer(deficit)
    if not picked:
        return
    if keep is not None:
        # A running job's keep is judged like its best-effort options: by the share it carries.
        mine[keep.report.ladder] = _revalued(keep, _effort_value(job, keep, evaluator))
    defer = mine.get(Ladder())
    if defer is None or not job.is_online:
        # A batch job's deferral keeps its price (its deadline slack): waiting is no outage,
        # and the tick after it is placed its stop is priced that way.  Lowered, the job was
        # placed on ladders the next tick stopped before they served.
        return
    worst = min(e.report.value for e in picked)
    value = min(defer.report.value, worst - margin)
    if defer.candidate is not None and value < defer.report.value:
        mine[Ladder()] = _revalued(defer, value)


def _c3_rejected(
    job: Job,
    ladders: Sequence[Ladder],
    mine: dict[Ladder, Evaluated],
    evaluator: Evaluator,
    tag: str,
    *,
    skip: Collection[Ladder] = (),
) -> list[tuple[float, Evaluated]]:
    """``ladders`` (but ``skip``) evaluated once, kept in ``mine``; those C3 rejected as
    ``(served, evaluation)`` pairs, best-effort options."""
    out = []
    for n, ladder in enumerate(ladders):
        if ladder in skip:
            continue
        ev = mine.get(ladder)
        if ev is None:
            ev = evaluator.evaluate(job, ladder, key=f"{tag}{n}", sources=(BEST_EFFORT,))
            mine[ladder] = ev
        if ev.candidate is None and ev.report.rejected.startswith("C3"):
            out.append((served_fraction(job, ev, evaluator), ev))
    return out


def _effort_value(
    job: Job, ev: Evaluated, evaluator: Evaluator, served: float | None = None
) -> float:
    """A best-effort option's value: as scored, less ``refusal_margin`` times the share of the
    demand it cannot carry; with ``spread_best_effort``, one that cannot carry all of it is
    valued by the share it carries instead (:meth:`Evaluator.saturated_value`)."""
    if served is None:
        served = served_fraction(job, ev, evaluator)
    planner = evaluator.cfg.planner
    if served >= 1.0 or not planner.spread_best_effort:
        return ev.report.value - planner.refusal_margin * (1.0 - served)
    return evaluator.saturated_value(job, ev, served)


def _smaller(ladder: Ladder) -> list[Ladder]:
    """``ladder`` with a quarter of its replicas fewer each time, down to one (several ranks:
    its prefixes, longest first): fallbacks for when the jobs planned within their targets
    take some of the free GPUs it counted on — a switch holds its old and its new GPUs while
    it runs — since serving part of the traffic beats refusing all of it."""
    if len(ladder.ranks) > 1:
        return [Ladder(ladder.ranks[:k]) for k in range(len(ladder.ranks) - 1, 0, -1)]
    if not ladder.ranks:
        return []
    (rank,) = ladder.ranks
    out = []
    n = rank.replicas
    while n > 1:
        n = min(n - 1, n * 3 // 4)
        out.append(Ladder((Rank(rank.chain, n),)))
    return out


def _spreads(ranked: Sequence[tuple[float, Evaluated]], free: Mapping[str, int]) -> list[Ladder]:
    """Ladders over several GPU types, for a job no single one carries on what is free: the
    ranks of ``ranked`` (``(served, evaluation)`` pairs), those carrying the most first, joined
    on pools nothing joined before uses until together they carry the demand.  Every prefix
    of two ladders or more is offered, so that one still fits when the jobs planned within
    their targets take some of those pools first."""
    left = dict(free)
    ranks: list[Rank] = []
    out: list[Ladder] = []
    carried = 0.0
    for served, ev in sorted(ranked, key=lambda se: -se[0]):
        ladder = ev.report.ladder
        use = ladder.gpus_by_pool()
        joined = {r.chain for r in ranks}
        if any(n > left.get(p, 0) for p, n in use.items()) or any(
            r.chain in joined for r in ladder.ranks
        ):
            continue
        for p, n in use.items():
            left[p] -= n
        ranks.extend(ladder.ranks)
        carried += served
        if len(ranks) > len(ladder.ranks):
            out.append(Ladder(tuple(ranks)))
        if carried >= 1.0:
            break
    return out


def effort_picks(
    ranked: Sequence[tuple[float, Evaluated]], limit: int, keep: CandidateReport | None
) -> list[tuple[float, Evaluated]]:
    """The C3-rejected ladders that join as best effort: the first ``limit`` of ``ranked``
    (most of the demand carried first), and, for a running job, every other one worth more
    than its keep and no likelier to breach — the keep is past C3's bound too (a running
    ladder is never rejected for risk), so such a change is no worse a bet."""
    return [
        *ranked[:limit],
        *(
            (served, ev)
            for served, ev in ranked[limit:]
            if keep is not None
            and ev.report.value > keep.value
            and ev.report.breach_probability <= keep.breach_probability
        ),
    ]


def _revalued(ev: Evaluated, value: float) -> Evaluated:
    """``ev`` worth ``value`` in its report and in the selector."""
    candidate = None if ev.candidate is None else attrs.evolve(ev.candidate, value=value)
    return attrs.evolve(ev, report=attrs.evolve(ev.report, value=value), candidate=candidate)

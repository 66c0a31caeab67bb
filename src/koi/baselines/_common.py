"""What every baseline shares: the surrogate toolkit, placement, and the safety checks.

The toolkit gives a baseline exactly what koi's planner has — the surrogate, the default
proposer's screened and sized configurations (with the proposer's later-round headroom), the
scoring functions, and the telemetry koi sizes with: an online job whose observed request rate
or output length exceeds its declaration by more than koi's drift tolerance is planned for
what was observed, by koi's own rules (:func:`koi.candidates.with_observed`) — but none of
koi's evidence, risk band or exploration.  :func:`safe_plan` replays the host's admission
checks (C1 capacity in whole instances, C2 feasibility with the job's precision policy, one
chain per ladder, the job's own model) in the host's order, so a baseline never sends an
action the simulated fleet would reject.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

import attrs

from koi.candidates import (
    CandidateGenerator,
    ObservedRates,
    OutputLengths,
    ProposalContext,
    ProposerConfig,
    SizedOption,
    fits_shape,
    place,
    risk_price,
    with_observed,
)
from koi.scoring import (
    JobTerms,
    Normalizer,
    ScoringConfig,
    deferral_score,
    ideal_point,
    in_flight_requests,
    job_terms,
    switching_cost,
)
from koi.surrogate import Prediction, RankCorrection, Surrogate
from koi.types import (
    ActionKind,
    Chain,
    ClusterSnapshot,
    Environment,
    GpuSpec,
    Job,
    JobAction,
    Ladder,
    ModelSpec,
    Observation,
    Plan,
)

__all__ = [
    "DRIFT_TOLERANCE",
    "Toolkit",
    "base_actions",
    "host_order",
    "safe_plan",
]

#: koi's default (``PlannerConfig.drift_tolerance``): an observed rate this far above the
#: declared one is planned for.
DRIFT_TOLERANCE = 0.15


def host_order(
    jobs: Iterable[Job],
    actions: Mapping[str, JobAction] | None = None,
    current: Mapping[str, Ladder] | None = None,
) -> list[Job]:
    """The order a host checks actions in: stops and scale-ins of running jobs first (they
    free GPUs at once), then priority (high first), arrival and id."""
    actions, current = actions or {}, current or {}

    def releases(job: Job) -> bool:
        act, now = actions.get(job.id), current.get(job.id, Ladder())
        if act is None or now.is_empty:
            return False
        return act.kind in (ActionKind.DEFER, ActionKind.STOP) or act.ladder.scales_in(now)

    return sorted(jobs, key=lambda j: (not releases(j), -j.priority, j.arrival_s, j.id))


def _finished(job: Job) -> bool:
    return not job.is_online and job.remaining_requests <= 0


def base_actions(snapshot: ClusterSnapshot) -> dict[str, JobAction]:
    """Keep every active job, defer every pending one, stop finished batch jobs."""
    current = snapshot.current_ladders
    out: dict[str, JobAction] = {}
    for job in snapshot.jobs:
        ladder = current.get(job.id)
        if ladder is None:
            out[job.id] = JobAction(job.id, ActionKind.DEFER, reason="waiting")
        elif _finished(job):
            out[job.id] = JobAction(job.id, ActionKind.STOP, reason="finished")
        else:
            out[job.id] = JobAction(job.id, ActionKind.KEEP, ladder, "keep")
    return out


def _pool_use(ladders: Iterable[Ladder]) -> Counter[str]:
    use: Counter[str] = Counter()
    for ladder in ladders:
        use.update(ladder.gpus_by_pool())
    return use


def safe_plan(
    snapshot: ClusterSnapshot,
    actions: Mapping[str, JobAction],
    surrogate: Surrogate,
    *,
    diagnostics: Mapping[str, object] | None = None,
) -> Plan:
    """The plan with every action the host would reject turned into keep/defer.

    Jobs are visited in :func:`host_order`; a stop frees its GPUs from then on, a change must
    fit every pool it touches in whole instances given everything decided before it (C1), and
    each chain must be feasible (C2, including the job's precision policy), distinct, and run
    the job's model.
    """
    pools = {p.id: p for p in snapshot.pools}
    current = snapshot.current_ladders
    use = _pool_use(current.values())
    out: list[JobAction] = []
    repaired = 0
    for job in host_order(snapshot.jobs, actions, current):
        now = current.get(job.id, Ladder())
        act = actions.get(job.id)
        if act is None:
            act = (
                JobAction(job.id, ActionKind.KEEP, now, "keep")
                if not now.is_empty
                else JobAction(job.id, ActionKind.DEFER, reason="waiting")
            )
        if act.kind in (ActionKind.DEFER, ActionKind.STOP):
            use.subtract(now.gpus_by_pool())
            out.append(act)
            continue
        if act.ladder == now:
            out.append(JobAction(job.id, ActionKind.KEEP, now, act.reason))
            continue
        trial = Counter(use)
        trial.subtract(now.gpus_by_pool())
        trial.update(act.ladder.gpus_by_pool())
        if _ladder_ok(job, act.ladder, surrogate) and all(
            pid in pools
            and math.ceil(max(trial[pid], 0) / pools[pid].environment.gpus_per_instance)
            <= pools[pid].capacity_instances
            for pid in act.ladder.gpus_by_pool()
        ):
            use = trial
            kind = ActionKind.PLACE if now.is_empty else ActionKind.RECONFIGURE
            out.append(JobAction(job.id, kind, act.ladder, act.reason))
            continue
        repaired += 1
        if now.is_empty:
            out.append(JobAction(job.id, ActionKind.DEFER, reason="did not fit"))
        else:
            out.append(JobAction(job.id, ActionKind.KEEP, now, "change did not fit"))
    diag = dict(diagnostics or {})
    diag["repaired"] = repaired
    return Plan(snapshot.time_s, sorted(out, key=lambda a: a.job_id), diag)


def _ladder_ok(job: Job, ladder: Ladder, surrogate: Surrogate) -> bool:
    chains = [r.chain for r in ladder.ranks]
    if len(set(chains)) != len(chains) or job.precision_problem(ladder) is not None:
        return False
    return all(c.model == job.model and surrogate.feasibility(c).ok for c in chains)


@attrs.define
class Toolkit:
    """The surrogate, the default proposer and the scoring, as every baseline uses them.

    ``calls`` counts ladder predictions (the evaluation budget an evolutionary search is held
    to).  :meth:`observe` records the telemetry's request rates; ``corrections`` (per chain) are
    applied to every prediction (the ``feedback-milp`` baseline's learned factors).
    """

    gpus: Mapping[str, GpuSpec]
    models: Mapping[str, ModelSpec]
    surrogate: Surrogate
    scoring: ScoringConfig = attrs.field(factory=ScoringConfig)
    proposer_cfg: ProposerConfig = attrs.field(factory=ProposerConfig)
    generator: CandidateGenerator = attrs.field(init=False)
    calls: int = 0
    drift_tolerance: float = DRIFT_TOLERANCE
    observed_rps: ObservedRates = attrs.field(factory=ObservedRates)
    output_lengths: OutputLengths = attrs.field(factory=OutputLengths)
    corrections: Callable[[Chain], RankCorrection] | None = None

    def __attrs_post_init__(self) -> None:
        self.generator = CandidateGenerator(self.surrogate, self.proposer_cfg)

    @classmethod
    def build(cls, gpus: Mapping[str, GpuSpec], models: Mapping[str, ModelSpec]) -> Toolkit:
        return cls(gpus, models, Surrogate(gpus, models))

    # ---- telemetry ------------------------------------------------------------------------
    def observe(
        self, snapshot: ClusterSnapshot, observations: Sequence[Observation]
    ) -> ClusterSnapshot:
        """Record the window's request rates and output lengths; the snapshot with every
        online job planned for what it was observed to carry (koi's drift rules,
        :func:`koi.candidates.with_observed`)."""
        self.observed_rps.update(observations)
        self.output_lengths.update(observations)
        jobs = [
            with_observed(
                j,
                self.observed_rps.get(j.id),
                self.output_lengths.mean(j.id),
                tolerance=self.drift_tolerance,
            )
            for j in snapshot.jobs
        ]
        if all(a is b for a, b in zip(jobs, snapshot.jobs, strict=True)):
            return snapshot
        return attrs.evolve(snapshot, jobs=jobs)

    # ---- configurations -------------------------------------------------------------------
    def environments(self, snapshot: ClusterSnapshot) -> list[Environment]:
        return [p.environment for p in snapshot.pools if p.environment.gpu in self.gpus]

    def headroom(self, search_round: int) -> float:
        """The proposer's per-replica headroom in search round ``search_round`` (koi's rule:
        a later round comes because the earlier one found no improvement)."""
        return float(self.proposer_cfg.retry_headroom**search_round)

    def options(
        self, job: Job, snapshot: ClusterSnapshot, *, search_round: int = 0
    ) -> list[SizedOption]:
        """Every feasible (GPU type, config) for ``job``, sized for its demand and screened."""
        return self.generator.screener.sized_options(
            job,
            self.environments(snapshot),
            self.gpus,
            now_s=snapshot.time_s,
            headroom=self.headroom(search_round),
        )

    def cheapest_gpu_price(self, snapshot: ClusterSnapshot) -> dict[str, float]:
        """Per GPU type, the lowest price per GPU-hour among pools that have GPUs now."""
        out: dict[str, float] = {}
        for p in snapshot.pools:
            if p.capacity_gpus <= 0:
                continue
            price = p.environment.price_usd_per_gpu_h
            out[p.environment.gpu] = min(price, out.get(p.environment.gpu, price))
        return out

    def option_cost(self, sized: SizedOption, cheapest: Mapping[str, float]) -> float:
        """Predicted cost per Mtok of an option priced at the cheapest pool of its GPU type."""
        shape = sized.option.shape
        price = shape.price_usd_per_gpu_h
        ratio = cheapest.get(shape.gpu, price) / price if price > 0 else 1.0
        return sized.prediction.outcomes.cost_per_mtok_usd * ratio

    def reference_cost(self, options: Iterable[SizedOption], snapshot: ClusterSnapshot) -> float:
        """The cheapest cost per Mtok any option offers (the Tchebycheff cost scale), on GPU
        types some pool has now (the rule of koi's own cost scale)."""
        cheapest = self.cheapest_gpu_price(snapshot)
        costs = [self.option_cost(o, cheapest) for o in options if o.option.gpu in cheapest]
        best = min((c for c in costs if 0 < c < math.inf), default=math.inf)
        return best if best < math.inf else 1.0

    def ranked(
        self, options: Iterable[SizedOption], snapshot: ClusterSnapshot
    ) -> list[SizedOption]:
        """Options meeting the target first, then by predicted cost per token."""
        cheapest = self.cheapest_gpu_price(snapshot)
        return sorted(
            options,
            key=lambda o: (not o.meets_target, self.option_cost(o, cheapest), o.replicas),
        )

    def place(
        self,
        job: Job,
        sized: SizedOption,
        snapshot: ClusterSnapshot,
        free: Mapping[str, int],
        *,
        replicas: int | None = None,
        cheapest_first: bool = True,
        partial: bool = False,
        pool_ids: Collection[str] | None = None,
    ) -> Ladder | None:
        """``replicas`` of ``sized``'s config on pools of its GPU type with room.

        One pool if one has room (the cheapest, risk-weighted, or the first in snapshot order),
        else split over several; with ``partial`` as many as fit; only ``pool_ids`` if given.
        ``None`` if nothing fits.
        """
        n = sized.replicas if replicas is None else replicas
        config = sized.option.config
        envs = [
            p.environment
            for p in snapshot.pools
            if p.environment.gpu == sized.option.gpu
            and fits_shape(p.environment, config.gpus)
            and (pool_ids is None or p.id in pool_ids)
        ]
        if cheapest_first:
            envs.sort(key=lambda e: (risk_price(e), e.id))
        return place(job.model, config, n, envs, free, partial=partial)

    def proposals(
        self, job: Job, snapshot: ClusterSnapshot, max_candidates: int, *, search_round: int = 0
    ) -> list[Ladder]:
        """The default proposer's short list for ``job`` in search round ``search_round`` (no
        exploration candidates)."""
        context = ProposalContext(
            snapshot=snapshot,
            gpus=self.gpus,
            models=self.models,
            deadline_s=math.inf,  # the benchmark's plans must not depend on machine speed
            incumbent=snapshot.current_ladders.get(job.id),
            max_candidates=max_candidates,
            round=search_round,
        )
        return self.generator.propose(job, context)

    # ---- scoring ----------------------------------------------------------------------------
    def predict(self, job: Job, ladder: Ladder, snapshot: ClusterSnapshot) -> Prediction:
        self.calls += 1
        return self.surrogate.predict(
            job, ladder, now_s=snapshot.time_s, corrections=self.corrections
        )

    def terms(
        self, job: Job, ladder: Ladder, snapshot: ClusterSnapshot, reference_cost: float
    ) -> JobTerms | None:
        """``J_i`` and ``Switch_i`` of ``ladder`` for ``job``; ``None`` if infeasible (C2, the
        job's precision policy included).

        No risk band and no exploration: the baselines score what the surrogate predicts.
        """
        if job.precision_problem(ladder) is not None:
            return None
        pred = self.predict(job, ladder, snapshot)
        if not pred.feasible:
            return None
        cfg = self.scoring
        scales = Normalizer.for_job(
            job, reference_cost_per_mtok=reference_cost, now_s=snapshot.time_s, cfg=cfg
        )
        current = snapshot.current_ladders.get(job.id)
        switch = None
        if current is not None and current != ladder:
            now_pred = self.surrogate.predict(
                job, current, now_s=snapshot.time_s, corrections=self.corrections
            )
            switch = switching_cost(
                current,
                ladder,
                model=self.models[job.model],
                breach_probability=0.0,
                in_flight_requests=in_flight_requests(job, now_pred),
                cfg=cfg,
            )
        return job_terms(
            job,
            pred.outcomes,
            scales=scales,
            z_star=ideal_point(job, scales),
            switch=switch,
            cfg=cfg,
        )

    def value(
        self, job: Job, ladder: Ladder, snapshot: ClusterSnapshot, reference_cost: float
    ) -> float | None:
        """``J_i − λ Switch_i`` (γ = 0: no risk term) of ``ladder``; ``None`` if infeasible."""
        if ladder.is_empty:
            return self.defer_value(job, snapshot)
        t = self.terms(job, ladder, snapshot, reference_cost)
        return None if t is None else t.value(self.scoring)

    def defer_value(self, job: Job, snapshot: ClusterSnapshot) -> float:
        return deferral_score(job, self.scoring, now_s=snapshot.time_s)

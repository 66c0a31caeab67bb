"""S5: turn one candidate ladder into a scored, validated selector candidate.

For a ladder: C2 feasibility and the prediction come from the surrogate (with the residual
corrections in force); the DRO band and breach probability from the stratum's residual history
and the ladder's edge uncertainty (C3); ``J_i`` from the Tchebycheff scorer; the switching cost
from the job's current ladder; the exploration items from the (edge, stratum) pairs and
mechanisms it exercises.

Longer than most modules: the evaluation and the evaluator's per-tick memos (corrections,
current predictions, band quantiles, exploration items) read the same inputs, and the
evaluation memo's key (:mod:`koi.planner._evaluation_memo`) must name exactly those; kept
together, a new input of the evaluation is next to the key that has to carry it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence

import attrs

from koi.beliefs import EdgeKey, Stratum
from koi.config import KoiConfig
from koi.dag import CausalDag, Mechanism, RankContext, exercised_keys
from koi.planner._corrections import Callbacks, SharedCorrections, tried
from koi.planner._evaluation_memo import Effects, EvaluationMemo
from koi.planner._report import CandidateReport
from koi.planner._state import PlannerState
from koi.planner._strata import band_stratum, stratum_for
from koi.risk import RiskBand, band, breach_probability, combine_breach
from koi.scoring import (
    JobTerms,
    Normalizer,
    candidate_value,
    deferral_score,
    exploration_weights,
    ideal_point,
    in_flight_requests,
    job_terms,
    switching_cost,
    tchebycheff,
)
from koi.selector import Candidate
from koi.surrogate import Prediction, RankCorrection, Surrogate
from koi.types import (
    ActionKind,
    Chain,
    ClusterSnapshot,
    GpuSpec,
    Job,
    Ladder,
    Market,
    ModelSpec,
    Outcome,
    Rank,
)

__all__ = [
    "Evaluated",
    "EvaluationMemo",
    "Evaluator",
    "ExplorationItem",
    "replay_short_lists",
    "short_list",
]

ExplorationItem = Hashable


@attrs.frozen
class Evaluated:
    """A candidate's report, and its selector form unless it was rejected."""

    report: CandidateReport
    candidate: Candidate | None
    prediction: Prediction | None = None
    terms: JobTerms | None = None


class Evaluator:
    """Scores candidates for one tick; holds the tick's frozen inputs and small caches."""

    def __init__(
        self,
        *,
        snapshot: ClusterSnapshot,
        state: PlannerState,
        surrogate: Surrogate,
        gpus: Mapping[str, GpuSpec],
        models: Mapping[str, ModelSpec],
        dag: CausalDag,
        cfg: KoiConfig,
        reference_cost: Mapping[str, float],
        exercised: dict[Ladder, frozenset[tuple[EdgeKey, Stratum]]] | None = None,
        shared_corrections: SharedCorrections | None = None,
        memo: EvaluationMemo | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.state = state
        self.surrogate = surrogate
        self.gpus = gpus
        self.models = models
        self.dag = dag
        self.cfg = cfg
        self.reference_cost = reference_cost
        self.current = snapshot.current_ladders
        # U per exploration item seen this tick: (edge, stratum) items scaled per edge, and
        # the mechanisms' own U (``mechanism_items``), weighed by ω_m in Φ.
        self.uncertainty: dict[ExplorationItem, float] = {}
        self.mechanism_items: set[ExplorationItem] = set()
        # Per tick: each job's corrections callbacks (all; outcome and step only), and the
        # (edge, stratum) keys per ladder that both C3's prior and exploration need.
        self._corrections: dict[str, Callbacks] = {}
        # A pure function of the ladder: the planner may lend a memo that outlives the tick.
        self._keys: dict[Ladder, frozenset[tuple[EdgeKey, Stratum]]] = (
            {} if exercised is None else exercised
        )
        self._now: dict[str, Prediction] = {}
        self._prior: dict[frozenset[tuple[EdgeKey, Stratum]], float] = {}
        self._unit_bands: dict[tuple[Stratum, Outcome, float], RiskBand] = {}
        self._scopes: dict[RankContext, tuple[Mechanism, ...]] = {}
        self._tried_chains: dict[tuple[str, Chain], bool] = {}
        # The planner may lend a memo of the corrections that outlives the tick.
        self._shared = shared_corrections or SharedCorrections()
        # ... and one of evaluated candidates, valid while the tick's global inputs are.
        self._memo = memo
        if memo is not None:
            memo.begin(
                (
                    snapshot.time_s,
                    state.evidence,
                    state.residuals,
                    state.epsilon.eps,  # ε and λ only: their counters move every tick
                    state.calibration.lam,
                    state.mechanisms,
                    cfg,
                    dag,
                    len(dag),
                    gpus,
                    models,
                )
            )

    def corrections(self, job: Job) -> Callable[[Chain], RankCorrection]:
        """The residual corrections in force for ``job`` this tick, for scoring candidates.

        Mediator corrections only rescale the predicted mediators, which scoring does not
        read; leaving them out keeps a mediator-only change from invalidating every cached
        screen of the job (the outcomes are exactly the same).
        """
        return self._callbacks(job)[1]

    def _full_corrections(self, job: Job) -> Callable[[Chain], RankCorrection]:
        return self._callbacks(job)[0]

    def _callbacks(self, job: Job) -> Callbacks:
        fns = self._corrections.get(job.id)
        if fns is None:
            fns = self._corrections[job.id] = self._shared.functions(
                self.state, job, gpus=self.gpus, models=self.models, cfg=self.cfg
            )
        return fns

    def exercised(self, ladder: Ladder) -> frozenset[tuple[EdgeKey, Stratum]]:
        """The (edge, stratum) pairs ``ladder`` exercises (empty without the causal graph)."""
        if not self.cfg.planner.causal_graph:
            return frozenset()
        keys = self._keys.get(ladder)
        if keys is None:
            keys = self._keys[ladder] = exercised_keys(ladder, self.models, dag=self.dag)
        return keys

    def _current_prediction(self, job: Job, current: Ladder) -> Prediction:
        hit = self._now.get(job.id)
        if hit is None:
            # With the mediators corrected: a batch job's requests in flight come from its
            # predicted mean batch size.
            hit = self.surrogate.screen(
                job, current, now_s=self.snapshot.time_s, corrections=self._full_corrections(job)
            )
            self._now[job.id] = hit
        return hit

    def _prior_uncertainty(self, keys: frozenset[tuple[EdgeKey, Stratum]]) -> float:
        """Mean U of the exercised (edge, stratum) pairs; many ladders share one key set."""
        if not keys:
            return 1.0
        u = self._prior.get(keys)
        if u is None:
            evidence = self.state.evidence
            u = self._prior[keys] = sum(evidence.uncertainty(e, s) for e, s in keys) / len(keys)
        return u

    def _band(self, y: float, stratum: Stratum, outcome: Outcome, prior_u: float) -> RiskBand:
        """The DRO band around ``y``.  It is affine in the prediction (``ŷ ± |ŷ|·q``), so the
        residual quantiles are taken once per (stratum, outcome, prior) and tick, not once per
        candidate."""
        key = (stratum, outcome, prior_u)
        unit = self._unit_bands.get(key)
        if unit is None:
            residuals = self.state.residuals.get(stratum, outcome.value)
            unit = band(
                1.0, residuals, self.state.epsilon.eps, prior_uncertainty=prior_u, cfg=self.cfg.risk
            )
            self._unit_bands[key] = unit
        scale = abs(y)
        return RiskBand(
            lower=y + scale * (unit.lower - 1.0), upper=y + scale * (unit.upper - 1.0), center=y
        )

    # ---- exploration ----------------------------------------------------------------------
    def exploration_weights(self) -> dict[ExplorationItem, float]:
        """β·U per exploration item seen this tick (edges normalized per stratum, DESIGN §5.3)."""
        return exploration_weights(
            self.uncertainty,
            mechanisms=self.mechanism_items,
            beta=self.state.calibration.beta,
            omega_m=self.cfg.scoring.omega_m,
        )

    def _covers(self, job: Job, ladder: Ladder) -> tuple[frozenset[ExplorationItem], Effects]:
        """(edge, stratum) pairs and mechanisms the ladder exercises, with their U recorded
        (:meth:`_record`; also returned, in order, for the evaluation memo to replay).

        Edge uncertainty is divided by the number of registered edges so that a wholly untested
        stratum is worth β (not β·|E|); mechanisms weigh ω_m times their own U
        (:func:`koi.scoring.exploration_weights`).
        """
        if not self.cfg.planner.causal_graph:
            return frozenset(), ()
        evidence = self.state.evidence
        per_edge = 1.0 / max(len(self.dag), 1)
        items: set[ExplorationItem] = set()
        effects: list[tuple[ExplorationItem, float, bool]] = []
        for edge, stratum in self.exercised(ladder):
            item: ExplorationItem = ("edge", edge, stratum.key)
            items.add(item)
            u = self.uncertainty.get(item)  # one value per tick: the evidence is the tick's
            if u is None:
                u = per_edge * evidence.uncertainty(edge, stratum)
            effects.append((item, u, False))
        for rank in ladder.ranks:
            ctx = self._context(job, rank)
            if ctx is None:
                continue
            for m in self._applying(ctx):
                mech_item: ExplorationItem = ("mechanism", m.id)
                items.add(mech_item)
                effects.append((mech_item, m.belief.uncertainty, True))
        recorded = tuple(effects)
        self._record(recorded)
        return frozenset(items), recorded

    def _record(self, effects: Effects) -> None:
        """Note the U of each exploration item a candidate covers: an edge's the first time
        this tick (one value per tick), a mechanism's every time."""
        for item, u, mechanism in effects:
            if mechanism:
                self.uncertainty[item] = u
                self.mechanism_items.add(item)
            elif item not in self.uncertainty:
                self.uncertainty[item] = u

    def _applying(self, ctx: RankContext) -> tuple[Mechanism, ...]:
        """The mechanisms whose scope covers ``ctx``, in the state's order (once per tick:
        tenants' copies of a job share their contexts)."""
        hit = self._scopes.get(ctx)
        if hit is None:
            hit = self._scopes[ctx] = tuple(m for m in self.state.mechanisms if m.applies_to(ctx))
        return hit

    def _context(self, job: Job, rank: Rank) -> RankContext | None:
        spec = self.models.get(rank.chain.model)
        gpu = self.gpus.get(rank.chain.environment.gpu)
        if spec is None or gpu is None:
            return None
        return RankContext.from_rank(rank, spec, gpu, job)

    # ---- risk -----------------------------------------------------------------------------
    def breach(self, job: Job, ladder: Ladder, pred: Prediction) -> float:
        """``p_i = 1 - Π_j (1 - p_j)`` over the job's SLO-constrained objectives (paper §2.4).

        Online jobs: p99 TTFT and TPOT against their bounds, and the ranks' capacity against
        the forecast rate (:meth:`capacity_tok_s`); batch jobs: throughput against the rate
        that finishes the remaining work by the deadline.  Spot ranks add the chance of a
        preemption within ``planner.preemption_horizon_s``, weighted by their traffic share.
        """
        main = max(pred.ranks, key=lambda r: r.traffic_share).rank if pred.ranks else None
        if main is None:
            return 1.0
        spec = self.models[main.chain.model]
        stratum = stratum_for(main.chain, spec, self.cfg)
        # A running job's move to a chain it never ran on is predicted with borrowed
        # corrections: banded by what those got wrong on first windows, not by the stratum's
        # settled chains, so that a keep telemetry vouches for is not traded for a guess.  A
        # pending job has no keep: every chain is new to it, and the stratum bands them all.
        untried = job.id in self.current and not self._tried(job, main.chain)
        stratum = band_stratum(stratum, untried=untried, cfg=self.cfg)
        keys = self.exercised(ladder)
        prior_u = self._prior_uncertainty(keys)
        risk = self.cfg.risk
        ps: list[float] = []

        def objective(
            outcome: Outcome, bound: float, *, upper_is_bad: bool, y: float | None = None
        ) -> None:
            y = pred.outcomes.get(outcome) if y is None else y
            if not math.isfinite(y):
                ps.append(1.0 if upper_is_bad else 0.0)
                return
            b = self._band(y, stratum, outcome, min(prior_u, 1.0))
            ps.append(
                breach_probability(
                    b, bound, upper_is_bad=upper_is_bad, coverage=risk.target_coverage
                )
            )

        t = job.target
        need = job.required_output_tok_s(self.snapshot.time_s)
        if job.is_online:
            objective(Outcome.TTFT, t.p99_ttft_ms or math.inf, upper_is_bad=True)
            objective(Outcome.TPOT, t.p99_tpot_ms or math.inf, upper_is_bad=True)
            # Both p99s assume the ranks keep up with the traffic; past capacity the queue and
            # every latency grow without bound, which a band around a finite p99 cannot show.
            if need > 0:
                objective(
                    Outcome.THROUGHPUT, need, upper_is_bad=False, y=self.capacity_tok_s(job, pred)
                )
        else:
            objective(Outcome.THROUGHPUT, need, upper_is_bad=False)
        horizon_h = self.cfg.planner.preemption_horizon_s / 3600.0
        for rp in pred.ranks:
            env = rp.rank.chain.environment
            if env.market is Market.SPOT and env.preemption_per_h > 0:
                p_any = 1.0 - math.exp(-env.preemption_per_h * horizon_h * rp.rank.replicas)
                ps.append(rp.traffic_share * p_any)
        return combine_breach(ps)

    def _tried(self, job: Job, chain: Chain) -> bool:
        """Has ``job`` run on ``chain`` (once per tick: its candidates share chains)?"""
        hit = self._tried_chains.get((job.id, chain))
        if hit is None:
            skey = stratum_for(chain, self.models[chain.model], self.cfg).key
            hit = tried(self.state.corrections, chain, skey, job.id, self.cfg.corrections)
            self._tried_chains[(job.id, chain)] = hit
        return hit

    def capacity_tok_s(self, job: Job, pred: Prediction) -> float:
        """The output rate ``pred``'s ranks can carry at most: each rank's saturation
        capacity, scaled by the throughput correction in force for its chain."""
        correct = self.corrections(job)
        return sum(
            rp.capacity_tok_s * correct(rp.rank.chain).outcome(Outcome.THROUGHPUT)
            for rp in pred.ranks
        )

    def saturated_value(self, job: Job, ev: Evaluated, served: float) -> float:
        """``ev``'s value when it carries only ``served`` of the demand: its queue then grows
        without bound, so its p99 TTFT is scored at the cap (the closed form's is the age of
        the queue after its horizon, not a latency to compare), and each share of the demand
        left unserved is worth that share of refusing the job."""
        if ev.prediction is None or ev.terms is None:
            return ev.report.value
        cfg = self.cfg.scoring
        scales, z_star = self._reference(job)
        unbounded = attrs.evolve(
            ev.prediction.outcomes,
            p99_ttft_ms=math.inf,
            slo_margin=min(ev.prediction.outcomes.slo_margin, -cfg.max_ratio),
        )
        j = tchebycheff(job, unbounded, z_star=z_star, scales=scales, rho=cfg.rho, cfg=cfg)
        t = ev.terms
        value = candidate_value(
            j, t.breach_probability, t.switch_score, cfg=cfg, lam=self.state.calibration.lam
        )
        refused = deferral_score(job, cfg, now_s=self.snapshot.time_s)
        return value + (1.0 - served) * refused

    # ---- candidates -----------------------------------------------------------------------
    def _reference(self, job: Job) -> tuple[Normalizer, dict[Outcome, float]]:
        """The job's scales and reference point: the ideal point, learned values over it."""
        scales = self._normalizer(job)
        return scales, {**ideal_point(job, scales), **self.state.z_star.get(job.id, {})}

    def _normalizer(self, job: Job) -> Normalizer:
        return Normalizer.for_job(
            job,
            reference_cost_per_mtok=self.reference_cost.get(job.id, 1.0),
            now_s=self.snapshot.time_s,
            cfg=self.cfg.scoring,
        )

    def defer(self, job: Job, *, work_s: float = 0.0) -> Evaluated:
        """The empty ladder: defer a pending job, stop an active one.  ``work_s``: how long a
        batch job's remaining work takes at the best rate on offer (its deadline slack)."""
        active = job.id in self.current
        kind = ActionKind.STOP if active else ActionKind.DEFER
        j = deferral_score(job, self.cfg.scoring, now_s=self.snapshot.time_s, work_s=work_s)
        held = self.current.get(job.id)
        report = CandidateReport(
            job_id=job.id, key=kind.value, kind=kind, ladder=Ladder(), tchebycheff=j, value=j
        )
        candidate = Candidate(
            job_id=job.id,
            key=kind.value,
            kind=kind,
            value=j,
            gpus_by_pool={},
            covers=frozenset(),
            changes=active and held is not None,
        )
        return Evaluated(report, candidate, terms=JobTerms(j))

    def evaluate(
        self,
        job: Job,
        ladder: Ladder,
        *,
        key: str,
        sources: tuple[str, ...] = (),
        replay: bool = False,
        best_effort: bool = False,
        breach_floor: float = 0.0,
    ) -> Evaluated:
        """Predict, validate (C2, C3) and score one ladder for ``job``.

        C2 includes the job's precision policy (:meth:`~koi.types.Job.precision_problem`): a
        ladder the owner does not accept is rejected before it is predicted.

        Candidates are screened with the surrogate's closed form; ``replay`` re-predicts with
        the replay engine (the planner does that for each job's short list).  A
        ``best_effort`` candidate is not rejected by C3: it is marked for the selector, which
        lets best-effort candidates use only the GPUs nobody holds (or donors give up).
        ``breach_floor`` is what telemetry already says about the ladder (a batch job late at
        its current rate: 1).

        With an :class:`EvaluationMemo`, a candidate evaluated before with the same inputs is
        taken from it, its exploration items recorded as evaluating it would.
        """
        if self._memo is None:
            return self._evaluate(job, ladder, key, sources, replay, best_effort, breach_floor)[0]
        entry = self._entry_key(job, ladder, key, sources, replay, best_effort, breach_floor)
        hit = self._memo.get(entry)
        if hit is not None:
            self._record(hit[1])
            return hit[0]
        fresh = self._evaluate(job, ladder, key, sources, replay, best_effort, breach_floor)
        self._memo.put(entry, fresh)
        return fresh[0]

    def _entry_key(
        self,
        job: Job,
        ladder: Ladder,
        key: str,
        sources: tuple[str, ...],
        replay: bool,
        best_effort: bool,
        breach_floor: float,
    ) -> tuple[object, ...]:
        """What one evaluation reads of its job (:class:`EvaluationMemo` has the rest)."""
        current = self.current.get(job.id)
        outcome_corr = self.corrections(job)
        full_corr = self._full_corrections(job)  # the current ladder's in-flight requests
        z_star = self.state.z_star.get(job.id)
        return (
            job,
            ladder,
            key,
            sources,
            replay,
            best_effort,
            breach_floor,
            current,
            tuple(outcome_corr(r.chain) for r in ladder.ranks),
            # Only a running job's band reads whether it ran on the chain.
            tuple(self._tried(job, r.chain) for r in ladder.ranks) if current is not None else (),
            None if current is None else tuple(full_corr(r.chain) for r in current.ranks),
            self.reference_cost.get(job.id, 1.0),
            None if z_star is None else tuple(z_star.items()),
        )

    def _evaluate(
        self,
        job: Job,
        ladder: Ladder,
        key: str,
        sources: tuple[str, ...],
        replay: bool,
        best_effort: bool,
        breach_floor: float,
    ) -> tuple[Evaluated, Effects]:
        """:meth:`evaluate` without the memo; with what it recorded of exploration items."""
        current = self.current.get(job.id)
        if current is None:
            kind = ActionKind.PLACE
        elif ladder == current:
            kind = ActionKind.KEEP
        else:
            kind = ActionKind.RECONFIGURE
        base = CandidateReport(job_id=job.id, key=key, kind=kind, ladder=ladder, sources=sources)
        policy = job.precision_problem(ladder)
        if policy is not None:  # the owner's call, whatever the surrogate would say
            return Evaluated(attrs.evolve(base, rejected=f"C2: {policy}"), None), ()
        corrections = self.corrections(job)
        predict = self.surrogate.predict if replay else self.surrogate.screen
        pred = predict(job, ladder, now_s=self.snapshot.time_s, corrections=corrections)
        if not pred.feasible:
            return Evaluated(attrs.evolve(base, rejected=f"C2: {pred.reason}"), None, pred), ()
        p = max(self.breach(job, ladder, pred), breach_floor)
        scales, z_star = self._reference(job)
        switch = None
        if current is not None and kind is not ActionKind.KEEP:
            switch = switching_cost(
                current,
                ladder,
                model=self.models[job.model],
                breach_probability=p,
                in_flight_requests=in_flight_requests(job, self._current_prediction(job, current)),
                cfg=self.cfg.scoring,
            )
        terms = job_terms(
            job,
            pred.outcomes,
            scales=scales,
            z_star=z_star,
            breach_probability=p,
            switch=switch,
            cfg=self.cfg.scoring,
        )
        value = terms.value(self.cfg.scoring, lam=self.state.calibration.lam)
        covers, effects = self._covers(job, ladder)
        report = attrs.evolve(
            base,
            outcomes=pred.outcomes,
            breach_probability=p,
            tchebycheff=terms.j,
            switch_usd=switch.total_usd if switch is not None else 0.0,
            value=value,
            exploration_items=len(covers),
        )
        tau = self.cfg.planner.tau
        if p > tau and kind is not ActionKind.KEEP and not best_effort:
            # C3.  A running ladder is never rejected for risk: stopping it breaches for sure.
            reason = f"C3: breach {p:.2f} > τ {tau:.2f}"
            return Evaluated(attrs.evolve(report, rejected=reason), None, pred, terms), effects
        candidate = Candidate(
            job_id=job.id,
            key=key,
            kind=kind,
            value=value,
            gpus_by_pool=ladder.gpus_by_pool(),
            covers=covers,
            changes=kind is ActionKind.RECONFIGURE,
            # What the host holds while it switches: added replicas beside the old ones,
            # removed ones stopped at once, a new chain beside the one it replaces.
            transient_gpus_by_pool=(
                ladder.switch_peak_by_pool(current)
                if current is not None and kind is ActionKind.RECONFIGURE
                else None
            ),
            best_effort=best_effort,
        )
        return Evaluated(report, candidate, pred, terms), effects


def replay_short_lists(
    jobs: Sequence[Job], candidates: dict[str, dict[Ladder, Evaluated]], evaluator: Evaluator
) -> None:
    """Re-predict each job's short list with the replay engine's p99s (in place)."""
    top = evaluator.cfg.planner.replay_top
    for job in jobs:
        mine = candidates[job.id]
        for ladder in short_list(mine, top):
            ev = mine[ladder]
            mine[ladder] = evaluator.evaluate(
                job, ladder, key=ev.report.key, sources=ev.report.sources, replay=True
            )


def short_list(candidates: Mapping[Ladder, Evaluated], top: int) -> list[Ladder]:
    """The keep ladder and the ``top`` best valid changes of one job."""
    changes = sorted(
        (
            (ev.report.value, ladder)
            for ladder, ev in candidates.items()
            if ev.candidate is not None
            and ev.report.kind in (ActionKind.PLACE, ActionKind.RECONFIGURE)
        ),
        key=lambda vl: -vl[0],
    )
    keep = [lad for lad, ev in candidates.items() if ev.report.kind is ActionKind.KEEP]
    return keep + [lad for _, lad in changes[:top]]

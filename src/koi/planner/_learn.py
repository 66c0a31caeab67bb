"""S2 and S3: compare observations with predictions and update the evidence state.

Predictions are re-evaluated at the *observed* conditions before they are compared: the
replicas that actually came up and the traffic the window actually carried.  A prediction
stamped at the committed load and compared against another load would blame the surrogate for
the host's traffic (a trap DESIGN §14 names).  The committed prediction stays in the ledger for
audit; length drift, slow replicas and engine changes still show up as residuals.

Longer than most modules: S3 consumes S2's comparison in the same tick, and the detectors,
correction samples and residuals it resets or records are the ones S2 stepped and collected;
kept together, the order of those steps (a reset before this tick's samples are recorded) is
visible in one place.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from koi.beliefs import EdgeKey, Quadrant, Stratum, Verdict, invariance_verdicts
from koi.beliefs import update_mechanism as _update_mechanism
from koi.calibration import ideal_point_update
from koi.config import KoiConfig
from koi.cusum import Detector, classify
from koi.dag import CausalDag, RankContext, exercised_decisions, node_name
from koi.planner._corrections import (
    DECODE_TIME,
    PREFILL_TIME,
    CorrectionStore,
    compared_pairs,
    correction_fn,
    correction_key,
    correction_moved,
    correction_samples,
    correction_signature,
    job_key,
    observed_value,
)
from koi.planner._regime import Regime, compared_on, window_regime
from koi.planner._report import LearnReport
from koi.planner._state import DetectorKey, PlannerState
from koi.planner._strata import FIRST_WINDOWS, band_stratum, stratum_for
from koi.risk import ResidualHistory, band, relative_residual
from koi.surrogate import RankCorrection, RankPrediction, Surrogate
from koi.types import (
    Chain,
    ClusterSnapshot,
    GpuSpec,
    Job,
    Ladder,
    ModelSpec,
    Observation,
    Outcome,
    Outcomes,
    Rank,
)

__all__ = ["Comparison", "LearnReport", "QuadrantRule", "compare", "learn", "update"]

# Residuals of unbounded observations (an overloaded queue) are capped: they still read as a
# large, persistent miss without poisoning σ̂ with infinities.
_RESIDUAL_CAP = 10.0
# The outcomes the risk band covers, and which direction breaches.
BAND_OUTCOMES = (Outcome.TTFT, Outcome.TPOT, Outcome.THROUGHPUT)
_STEP_OUTCOMES = frozenset(o.value for o in BAND_OUTCOMES)


@attrs.frozen
class Comparison:
    """S2's result: each observation paired with its re-prediction, as residuals per
    (stratum, variable), correction samples, band coverage and the detectors they stepped."""

    compared: int
    skipped: tuple[str, ...]
    detectors: Mapping[DetectorKey, Detector]
    touched: frozenset[DetectorKey]
    signatures: Mapping[str, tuple[float, ...]]
    residuals: tuple[tuple[Stratum, str, float], ...]
    samples: tuple[tuple[str, str, float, float, float], ...]
    covered: tuple[bool, ...]
    evaluated: tuple[tuple[Stratum, RankContext, Rank], ...]
    z_star: Mapping[str, Mapping[Outcome, float]]


@attrs.frozen
class QuadrantRule:
    """Paper §2.3's quadrants from this tick's CUSUM verdicts.

    A (stratum, variable) detector has diverged (True), matches (False) or is undecided
    (None).  It matches only after ``decide_after`` quiet samples since its last reset: one
    large residual is not yet evidence either way (it may be an isolated deviation).  A
    mediator star or mechanism gets a quadrant only when every variable it names is decided.
    """

    detectors: Mapping[DetectorKey, Detector]
    touched: frozenset[DetectorKey]
    diverged: frozenset[DetectorKey]
    decide_after: int

    def status(self, stratum: Stratum, node: str) -> bool | None:
        key = (stratum.key, _var(node))
        if key not in self.touched:
            return None
        if key in self.diverged:
            return True
        return False if self.detectors[key].state.n >= self.decide_after else None

    def quadrant(
        self, stratum: Stratum, mediators: Iterable[str], outcomes: Iterable[str]
    ) -> Quadrant | None:
        med = [self.status(stratum, v) for v in mediators]
        out = [self.status(stratum, y) for y in outcomes]
        if None in med or None in out or not med or not out:
            return None
        return classify(any(med), any(out))


def learn(
    state: PlannerState,
    snapshot: ClusterSnapshot,
    observations: Sequence[Observation],
    *,
    surrogate: Surrogate,
    gpus: Mapping[str, GpuSpec],
    models: Mapping[str, ModelSpec],
    dag: CausalDag,
    cfg: KoiConfig,
) -> tuple[PlannerState, LearnReport]:
    """Run S2 (compare) and S3 (update) for one tick's observations."""
    comparison = compare(
        state, snapshot, observations, surrogate=surrogate, gpus=gpus, models=models, cfg=cfg
    )
    return update(state, comparison, dag=dag, cfg=cfg)


def compare(
    state: PlannerState,
    snapshot: ClusterSnapshot,
    observations: Sequence[Observation],
    *,
    surrogate: Surrogate,
    gpus: Mapping[str, GpuSpec],
    models: Mapping[str, ModelSpec],
    cfg: KoiConfig,
) -> Comparison:
    """S2: pair each observation with the prediction at its observed conditions, step the
    CUSUM detectors with the residuals, and collect correction samples and band coverage."""
    jobs = {j.id: j for j in snapshot.jobs}
    by_job: dict[str, list[Observation]] = defaultdict(list)
    skipped: list[str] = []
    for o in observations:
        if o.job_id not in jobs:
            skipped.append(f"{o.job_id}: observation for an unknown job")
        elif (o.job_id, o.chain) not in state.ledger:
            skipped.append(f"{o.job_id}: no stored prediction for {o.chain.environment.id}")
        elif o.replicas_up == 0 or _served(o, jobs[o.job_id], cfg) == 0:
            skipped.append(f"{o.job_id}: no traffic served on {o.chain.environment.id}")
        else:
            by_job[o.job_id].append(o)

    detectors = dict(state.detectors)
    signatures = dict(state.signatures)
    new_residuals: list[tuple[Stratum, str, float]] = []
    samples: list[tuple[str, str, float, float, float]] = []
    covered: list[bool] = []
    touched: dict[DetectorKey, bool] = {}
    evaluated: list[tuple[Stratum, RankContext, Rank]] = []
    z_star = dict(state.z_star)
    compared = 0

    for job_id, obs in sorted(by_job.items()):
        job = jobs[job_id]
        corrections_in_force = correction_fn(state, job, gpus=gpus, models=models, cfg=cfg)
        predicted = _predict_observed(job, obs, surrogate, corrections_in_force)
        job_outcomes = _job_outcomes(obs)
        if job_outcomes is not None:
            z_star[job_id] = ideal_point_update(
                state.z_star.get(job_id), job_outcomes, cfg.calibration
            )
        for o in obs:
            rp = predicted.get(o.chain)
            spec = models.get(o.chain.model)
            gpu = gpus.get(o.chain.environment.gpu)
            if rp is None or spec is None or gpu is None:
                skipped.append(f"{job_id}: cannot re-predict {o.chain.environment.id}")
                continue
            compared += 1
            stratum = stratum_for(o.chain, spec, cfg)
            skey = stratum.key
            in_force = corrections_in_force(o.chain)
            signature = correction_signature(in_force)
            ckey = correction_key(o.chain, skey)
            jkey = job_key(ckey, job_id)  # the job's own on the chain: what was in force for it
            previous = signatures.get(jkey, signatures.get(ckey, signature))
            for key in [k for k in detectors if k[0] == skey and k not in touched]:
                if correction_moved(previous, signature, key[1], cfg.corrections.recalibration):
                    # This variable's predictor was just recalibrated: residuals of the old one
                    # must not accumulate against the new one (that would read as a change).
                    detectors[key] = detectors[key].reset()
            signatures[ckey] = signatures[jkey] = signature
            batch = _learns_batch_windows(job, cfg)
            regime = window_regime(o, cfg.corrections.backlog_tolerance, batch=batch)
            # A window on a chain the job had not run on also measures how far borrowed
            # corrections carry: pooled with the other first windows, it bands untried chains.
            untried = not state.corrections.has_evidence(jkey, cfg.corrections)
            banded = band_stratum(stratum, untried=untried, cfg=cfg)
            for variable, observed, pred in compared_pairs(o, rp, regime):
                r = _residual(variable, observed, pred)
                key = (skey, variable)
                detectors[key] = detectors.get(key, Detector(cfg=cfg.cusum)).step(r)
                touched[key] = True
                new_residuals.append((stratum, variable, r))
                if banded is not stratum:
                    new_residuals.append((banded, variable, r))
            covered.extend(_covered(o, rp.outcomes, state, banded, cfg, regime))
            entry = state.ledger[(job_id, o.chain)]
            # Unchanged through the window: committed before it, and no replica came up during
            # it (fewer up than committed is a rank that never got the rest: its capacity is
            # still that of the replicas up; before, such a rank never gave a capacity sample).
            settled = entry.committed_s < o.start_s and o.replicas_up <= entry.replicas
            chain = o.chain

            def capacity_of(
                c: RankCorrection, chain: Chain = chain, job: Job = job
            ) -> float | None:
                return surrogate.capacity(job, chain, corrections=lambda _c: c)

            def tpot_of(c: RankCorrection, o: Observation = o, job: Job = job) -> float | None:
                return _rank_tpot(surrogate, job, o, c, served=True)

            def tpot_at(c: RankCorrection, o: Observation = o, job: Job = job) -> float | None:
                return _rank_tpot(surrogate, job, o, c, served=False)

            mine = correction_samples(
                skey,
                o,
                rp,
                in_force,
                regime=regime,
                settled=settled,
                capacity_of=capacity_of,
                tpot_of=tpot_of,
                tpot_at=tpot_at,
                max_factor=cfg.corrections.max_factor,
                overload_step=cfg.corrections.overload_step,
            )
            samples.extend(mine)
            if ckey != skey:  # and the chain's own (koi.planner._corrections.correction_key)
                samples.extend((ckey, *sample[1:]) for sample in mine)
            if jkey != ckey:  # and the job's own on the chain (koi.planner._corrections.job_key)
                samples.extend((jkey, *sample[1:]) for sample in mine)
            rank = Rank(o.chain, max(o.replicas_up, 1))
            evaluated.append((stratum, RankContext.from_rank(rank, spec, gpu, job), rank))
    return Comparison(
        compared=compared,
        skipped=tuple(skipped),
        detectors=detectors,
        touched=frozenset(touched),
        signatures=signatures,
        residuals=tuple(new_residuals),
        samples=tuple(samples),
        covered=tuple(covered),
        evaluated=tuple(evaluated),
        z_star=z_star,
    )


def update(
    state: PlannerState, comparison: Comparison, *, dag: CausalDag, cfg: KoiConfig
) -> tuple[PlannerState, LearnReport]:
    """S3: CUSUM verdicts → quadrants → Beta beliefs (edges and mechanisms); corrections and
    residual histories, with what a divergence made stale dropped; ε."""
    c = comparison
    detectors = dict(c.detectors)
    residuals = state.residuals.add_residuals(c.residuals)
    diverged = frozenset(k for k in c.touched if detectors[k].diverged)
    rule = QuadrantRule(detectors, c.touched, diverged, cfg.planner.decide_after)

    evidence_updates: list[tuple[tuple[EdgeKey, Stratum], tuple[float, float]]] = []
    quadrant_counts: dict[str, int] = defaultdict(int)
    table = cfg.beliefs.table
    verdict_cache: dict[EdgeKey, Verdict] = {}

    def verdicts_for(edges: Iterable[EdgeKey]) -> dict[EdgeKey, Verdict]:
        need = [e for e in edges if e not in verdict_cache]
        if need:
            by_edge = {e: _child_residuals(residuals, e) for e in need}
            verdict_cache.update(invariance_verdicts(by_edge, cfg=cfg.beliefs.invariance))
        return {e: verdict_cache[e] for e in edges}

    graph = cfg.planner.causal_graph
    evaluated = c.evaluated if graph else ()
    for stratum, _ctx, rank in evaluated:
        for v_node, edges, outcomes in _mediator_stars(dag, rank):
            q = rule.quadrant(stratum, (v_node,), outcomes)
            if q is None:
                continue
            quadrant_counts[q.value] += 1
            verdicts = verdicts_for(edges) if q in (Quadrant.Q2, Quadrant.Q3) else {}
            for e in edges:
                amount = table.amounts(q, verdicts.get(e, Verdict.UNDECIDED))
                evidence_updates.append(((e, stratum), amount))

    mechanisms = list(state.mechanisms)
    mechanism_strata = {k: tuple(v) for k, v in state.mechanism_strata.items()}
    for idx, m in enumerate(mechanisms):
        for stratum, ctx, _rank in evaluated:
            if not m.applies_to(ctx):
                continue
            q = rule.quadrant(stratum, m.mediators, m.outcomes)
            if q is None:
                continue
            quadrant_counts[q.value] += 1
            verdicts = verdicts_for(m.edges) if q in (Quadrant.Q2, Quadrant.Q3) else {}
            for e in m.edges:
                amount = table.amounts(q, verdicts.get(e, Verdict.UNDECIDED))
                evidence_updates.append(((e, stratum), amount))
            mechanisms[idx] = m = m.with_belief(
                _update_mechanism(m.belief, q, verdicts.values(), table=table)
            )
            seen = mechanism_strata.get(m.id, ())
            if stratum.key not in seen:
                mechanism_strata[m.id] = (*seen, stratum.key)

    # Divergence means the world changed: drop stale corrections and restart the detectors.
    stale: set[tuple[str, str]] = set()
    for skey, variable in diverged:
        stale.add((skey, variable))
        if variable in _STEP_OUTCOMES:
            # Latency and throughput all derive from step times: a persistent change in any
            # of them means the step-time corrections of the stratum are stale.
            stale.update(
                (skey, v)
                for v in (DECODE_TIME, PREFILL_TIME, Outcome.TTFT.value, Outcome.TPOT.value)
            )
        detectors[(skey, variable)] = detectors[(skey, variable)].reset()
    # What is stale is the evidence from before the change; this tick's samples measure the
    # world after it, so they are recorded after the reset.  Recorded before it, a divergence
    # also dropped the sample that explained it, and the next tick planned on the prior: on
    # homo-12h a stratum's decode correction (4-8x, from capacity) was wiped every third tick
    # by the throughput miss it was learned from, and C3 alternated between two wrong pictures.
    corrections: CorrectionStore = state.corrections.reset(stale).record(c.samples, cfg.corrections)
    # Residuals from before the change describe a world that is gone.
    residuals = residuals.forget((Stratum.from_key(s), v) for s, v in diverged)

    decided = sum(quadrant_counts.values())
    q1_rate = quadrant_counts.get(Quadrant.Q1.value, 0) / decided if decided else None
    covered = list(c.covered)
    epsilon = state.epsilon.update(covered, cfg.risk) if covered else state.epsilon
    new_state = attrs.evolve(
        state,
        evidence=state.evidence.apply_many(evidence_updates),
        mechanisms=tuple(mechanisms),
        mechanism_strata=mechanism_strata,
        detectors=detectors,
        signatures=c.signatures,
        residuals=residuals,
        corrections=corrections,
        epsilon=epsilon,
        z_star=c.z_star,
    )
    report = LearnReport(
        compared=c.compared,
        skipped=c.skipped,
        divergences=tuple(f"{s}:{v}" for s, v in sorted(diverged)),
        quadrants=dict(quadrant_counts),
        q1_rate=q1_rate,
        coverage=sum(covered) / len(covered) if covered else None,
        diverged=tuple(sorted(diverged)),
        examples={s.key: rank for s, _ctx, rank in c.evaluated},
    )
    return new_state, report


# ---- helpers ----------------------------------------------------------------------------
def _learns_batch_windows(job: Job, cfg: KoiConfig) -> bool:
    """A batch job whose windows are compared (``corrections.batch_windows``)."""
    return not job.is_online and cfg.corrections.batch_windows


def _served(o: Observation, job: Job, cfg: KoiConfig) -> int:
    """Requests ``o``'s window served: its arrivals, and a batch job's completions when its
    windows are learned from (its work is queued, not arriving: a window of it may report no
    arrivals)."""
    return max(o.requests, o.completed) if _learns_batch_windows(job, cfg) else o.requests


def _predict_observed(
    job: Job,
    obs: Sequence[Observation],
    surrogate: Surrogate,
    corrections: Callable[[Chain], RankCorrection],
) -> dict[Chain, RankPrediction]:
    """Re-predict the job on the ranks that served, at the traffic they carried."""
    ladder = Ladder(tuple(Rank(o.chain, o.replicas_up) for o in obs))
    window = max(max(o.end_s for o in obs) - min(o.start_s for o in obs), 1e-9)
    observed_job = job
    if job.is_online:
        rate = sum(o.requests for o in obs) / window
        observed_job = attrs.evolve(
            job, workload=attrs.evolve(job.workload, rate_rps=max(rate, 1e-6))
        )
    pred = surrogate.screen(
        observed_job, ladder, now_s=min(o.start_s for o in obs), corrections=corrections
    )
    if not pred.feasible:
        return {}
    return {rp.rank.chain: rp for rp in pred.ranks}


def _rank_tpot(
    surrogate: Surrogate, job: Job, o: Observation, c: RankCorrection, *, served: bool
) -> float | None:
    """p99 TPOT of ``o``'s rank alone under ``c``, at the rate its window offered it, or with
    ``served`` at the rate it served (an overloaded window: arrivals beyond what it completed
    only queued)."""
    if job.is_online:
        done = min(o.requests, o.completed) if served else o.requests
        rate = done / max(o.end_s - o.start_s, 1e-9)
        job = attrs.evolve(job, workload=attrs.evolve(job.workload, rate_rps=max(rate, 1e-6)))
    ladder = Ladder((Rank(o.chain, max(o.replicas_up, 1)),))
    pred = surrogate.screen(job, ladder, now_s=o.start_s, corrections=lambda _c: c)
    return pred.outcomes.p99_tpot_ms if pred.feasible else None


def _residual(variable: str, observed: float, predicted: float) -> float:
    """Relative residual, capped; the SLO margin is already relative, so its plain difference."""
    if variable == Outcome.SLO_MARGIN.value and math.isfinite(observed + predicted):
        return max(-_RESIDUAL_CAP, min(_RESIDUAL_CAP, observed - predicted))
    if not math.isfinite(observed):
        return _RESIDUAL_CAP
    if not math.isfinite(predicted):
        return -_RESIDUAL_CAP
    return max(-_RESIDUAL_CAP, min(_RESIDUAL_CAP, relative_residual(observed, predicted, 1e-3)))


def _covered(
    observed: Observation,
    predicted: Outcomes,
    state: PlannerState,
    stratum: Stratum,
    cfg: KoiConfig,
    regime: Regime,
) -> list[bool]:
    """Was each banded outcome inside the band built from the history before this tick (the
    residuals of ``stratum``: the window's own, or the first windows' on a chain new to the job)?

    Outcomes the observation did not measure, or its regime cannot compare, do not count."""
    out = []
    for oc in (oc for oc in BAND_OUTCOMES if compared_on(regime, oc.value)):
        yhat = predicted.get(oc)
        y = observed_value(observed, oc.value, yhat)
        if y is None:
            continue
        if not (math.isfinite(y) and math.isfinite(yhat)):
            out.append(False)
            continue
        b = band(yhat, state.residuals.get(stratum, oc.value), state.epsilon.eps, cfg=cfg.risk)
        out.append(b.contains(y))
    return out


def _job_outcomes(obs: Sequence[Observation]) -> dict[Outcome, float] | None:
    """The job-level outcomes this window achieved (for the ideal point).

    An outcome that some rank did not measure is left out: a job-level p99 or throughput over
    part of the ranks would flatter the job."""
    if not any(o.completed for o in obs):
        return None

    def all_measured(oc: Outcome) -> bool:
        return all(oc.value not in o.missing for o in obs)

    out: dict[Outcome, float] = {}
    tput = sum(o.outcomes.throughput_tok_s for o in obs)
    if all_measured(Outcome.THROUGHPUT):
        out[Outcome.THROUGHPUT] = tput
        if all_measured(Outcome.COST):
            cost_parts = [
                o.outcomes.cost_per_mtok_usd * o.outcomes.throughput_tok_s
                for o in obs
                if math.isfinite(o.outcomes.cost_per_mtok_usd)
            ]
            out[Outcome.COST] = sum(cost_parts) / tput if tput > 0 else math.inf
    if all_measured(Outcome.TTFT):
        out[Outcome.TTFT] = max(o.outcomes.p99_ttft_ms for o in obs)
    if all_measured(Outcome.TPOT):
        out[Outcome.TPOT] = max(o.outcomes.p99_tpot_ms for o in obs)
    if all_measured(Outcome.SLO_MARGIN):
        out[Outcome.SLO_MARGIN] = min(o.outcomes.slo_margin for o in obs)
    return out


def _mediator_stars(
    dag: CausalDag, rank: Rank
) -> list[tuple[str, tuple[EdgeKey, ...], tuple[str, ...]]]:
    """Per mediator the rank's exercised decisions reach: (V, its edges, its outcomes)."""
    into: dict[str, list[EdgeKey]] = defaultdict(list)
    for decision in exercised_decisions(rank.chain, rank.replicas):
        x = node_name(decision)
        for v in dag.children(x):
            into[v].append((x, v))
    out = []
    for v, xv in sorted(into.items()):
        ys = tuple(sorted(dag.children(v)))
        edges = (*xv, *((v, y) for y in ys))
        out.append((v, edges, ys))
    return out


def _var(node: str) -> str:
    """``v:queue_depth`` -> ``queue_depth``."""
    return node.split(":", 1)[1]


def _child_residuals(residuals: ResidualHistory, edge: EdgeKey) -> dict[str, list[float]]:
    """The child's residuals per stratum, for the invariance test of ``edge`` (the pooled
    first windows are no environment of their own: each is in its stratum's too)."""
    child = _var(edge[1])
    return {
        stratum.key: list(series)
        for stratum, variable in residuals.keys()  # noqa: SIM118 (a method, not a dict)
        if variable == child
        and stratum != FIRST_WINDOWS
        and (series := residuals.get(stratum, variable))
    }

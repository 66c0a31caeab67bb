"""S2 and S3: compare observations with predictions and update the evidence state.

Predictions are re-evaluated at the *observed* conditions before they are compared: the
replicas that actually came up and the traffic the window actually carried.  A prediction
stamped at the committed load and compared against another load would blame the surrogate for
the host's traffic (a trap DESIGN §14 names).  The committed prediction stays in the ledger for
audit; length drift, slow replicas and engine changes still show up as residuals.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from koi.beliefs import EdgeKey, Quadrant, Stratum, Verdict, invariance_verdicts
from koi.beliefs import update_mechanism as _update_mechanism
from koi.calibration import ideal_point_update
from koi.config import KoiConfig
from koi.cusum import Detector, classify
from koi.dag import CausalDag, RankContext, exercised_decisions, node_name
from koi.planner._corrections import DECODE_TIME, CorrectionStore
from koi.planner._state import DetectorKey, PlannerState
from koi.planner._strata import stratum_for
from koi.risk import ResidualHistory, band, relative_residual
from koi.surrogate import RankCorrection, RankPrediction, Surrogate
from koi.types import (
    Chain,
    ClusterSnapshot,
    GpuSpec,
    Job,
    Ladder,
    Mediator,
    ModelSpec,
    Observation,
    Outcome,
    Outcomes,
    Rank,
)

__all__ = ["LearnReport", "correction_fn", "learn"]

# Residuals of unbounded observations (an overloaded queue) are capped: they still read as a
# large, persistent miss without poisoning σ̂ with infinities.
_RESIDUAL_CAP = 10.0
# The outcomes the risk band covers, and which direction breaches.
BAND_OUTCOMES = (Outcome.TTFT, Outcome.TPOT, Outcome.THROUGHPUT)
_STEP_OUTCOMES = frozenset(o.value for o in BAND_OUTCOMES)


@attrs.frozen
class LearnReport:
    """What S2/S3 did this tick (goes into the tick report)."""

    compared: int = 0
    skipped: tuple[str, ...] = ()
    divergences: tuple[str, ...] = ()
    quadrants: Mapping[str, int] = attrs.field(factory=dict)
    q1_rate: float | None = None
    coverage: float | None = None
    diverged: tuple[tuple[str, str], ...] = ()
    examples: Mapping[str, Rank] = attrs.field(factory=dict)


def correction_fn(
    state: PlannerState,
    job: Job,
    *,
    gpus: Mapping[str, GpuSpec],
    models: Mapping[str, ModelSpec],
    cfg: KoiConfig,
) -> Callable[[Chain], RankCorrection]:
    """The residual corrections in force for ``job``, as the surrogate's per-chain callback.

    A stratum's own corrections win.  A stratum with no evidence of its own borrows step-time
    corrections through admitted mechanisms (DESIGN §4.5.1): every mechanism whose belief has
    reached ``planner.mechanism_min_confidence`` and whose scope covers the chain lends the
    median correction of the strata it was tested in.
    """
    cache: dict[Chain, RankCorrection] = {}
    store, cc = state.corrections, cfg.corrections
    confident = [
        m for m in state.mechanisms if m.belief.confidence >= cfg.planner.mechanism_min_confidence
    ]

    def borrowed(chain: Chain, spec: ModelSpec, variable: str) -> float:
        gpu = gpus.get(chain.environment.gpu)
        if gpu is None or not confident:
            return 1.0
        ctx = RankContext.from_rank(Rank(chain, 1), spec, gpu, job)
        factors = [
            f
            for m in confident
            if m.applies_to(ctx)
            for skey in state.mechanism_strata.get(m.id, ())
            if (f := store.factor(skey, variable, cc)) is not None
        ]
        return statistics.median(factors) if factors else 1.0

    def correct(chain: Chain) -> RankCorrection:
        hit = cache.get(chain)
        if hit is not None:
            return hit
        spec = models.get(chain.model)
        if spec is None:
            return RankCorrection()
        key = stratum_for(chain, spec, cfg).key

        def factor(variable: str) -> float:
            own = store.factor(key, variable, cc)
            return own if own is not None else borrowed(chain, spec, variable)

        mediators = {
            m: _quantized(f, cc.quantum)
            for m in Mediator
            if (f := store.factor(key, m.value, cc)) is not None
        }
        # Hysteresis: keep the step corrections in force unless the estimate really moved, so
        # predictions stay cached across ticks and CUSUM is not restarted by noise.
        held = state.signatures.get(key)
        ttft = _quantized(factor(Outcome.TTFT.value), cc.quantum)
        decode = _quantized(factor(DECODE_TIME), cc.quantum)
        if held is not None:
            ttft = _sticky(held[0], ttft, cc.hysteresis)
            decode = _sticky(held[1], decode, cc.hysteresis)
        result = RankCorrection(
            decode_time=decode, outcomes={Outcome.TTFT: ttft}, mediators=mediators
        )
        cache[chain] = result
        return result

    return correct


def _sticky(held: float, estimate: float, band: float) -> float:
    return held if abs(math.log(estimate / held)) <= band else estimate


def _quantized(factor: float, quantum: float) -> float:
    """Round a correction to a relative grid: predictions with equal corrections share the
    surrogate's cache across ticks, and a 2 % step is well below telemetry noise."""
    if factor == 1.0 or quantum <= 0:
        return factor
    return math.exp(round(math.log(factor) / quantum) * quantum)


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
    jobs = {j.id: j for j in snapshot.jobs}
    by_job: dict[str, list[Observation]] = defaultdict(list)
    skipped: list[str] = []
    for o in observations:
        if o.job_id not in jobs:
            skipped.append(f"{o.job_id}: observation for an unknown job")
        elif (o.job_id, o.chain) not in state.ledger:
            skipped.append(f"{o.job_id}: no stored prediction for {o.chain.environment.id}")
        elif o.replicas_up == 0 or o.requests == 0:
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
            signature = _signature(in_force)
            previous = signatures.get(skey, signature)
            for key in [k for k in detectors if k[0] == skey and k not in touched]:
                if _moved(previous, signature, key[1], cfg.corrections.recalibration):
                    # This variable's predictor was just recalibrated: residuals of the old one
                    # must not accumulate against the new one (that would read as a change).
                    detectors[key] = detectors[key].reset()
            signatures[skey] = signature
            pairs = _pairs(o, rp)
            for variable, observed, pred in pairs:
                r = _residual(variable, observed, pred)
                key = (skey, variable)
                detectors[key] = detectors.get(key, Detector(cfg=cfg.cusum)).step(r)
                touched[key] = True
                new_residuals.append((stratum, variable, r))
            covered.extend(_covered(o.outcomes, rp.outcomes, state, stratum, cfg))
            samples.extend(_correction_samples(skey, o, rp, in_force))
            rank = Rank(o.chain, max(o.replicas_up, 1))
            evaluated.append((stratum, RankContext.from_rank(rank, spec, gpu, job), rank))

    residuals = state.residuals.add_residuals(new_residuals)
    # CUSUM verdicts this tick -> quadrants -> beliefs.
    diverged = {k for k in touched if detectors[k].diverged}

    def status(stratum: Stratum, node: str) -> bool | None:
        """Diverged (True), matching (False), or undecided (None) this tick.

        A detector matches only after ``decide_after`` quiet samples since its last reset: one
        large residual is not yet evidence either way (it may be an isolated deviation).
        """
        key = (stratum.key, _var(node))
        if key not in touched:
            return None
        if key in diverged:
            return True
        return False if detectors[key].state.n >= cfg.planner.decide_after else None

    def quadrant(
        stratum: Stratum, mediators: Iterable[str], outcomes: Iterable[str]
    ) -> Quadrant | None:
        med = [status(stratum, v) for v in mediators]
        out = [status(stratum, y) for y in outcomes]
        if None in med or None in out or not med or not out:
            return None
        return classify(any(med), any(out))

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
    for stratum, _ctx, rank in evaluated if graph else ():
        for v_node, edges, outcomes in _mediator_stars(dag, rank):
            q = quadrant(stratum, (v_node,), outcomes)
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
        for stratum, ctx, _rank in evaluated if graph else ():
            if not m.applies_to(ctx):
                continue
            q = quadrant(stratum, m.mediators, m.outcomes)
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
    corrections: CorrectionStore = state.corrections.record(samples, cfg.corrections)
    stale: set[tuple[str, str]] = set()
    for skey, variable in diverged:
        stale.add((skey, variable))
        if variable in _STEP_OUTCOMES:
            # Latency and throughput all derive from step times: a persistent change in any
            # of them means the step-time corrections of the stratum are stale.
            stale.update(((skey, DECODE_TIME), (skey, Outcome.TTFT.value)))
        detectors[(skey, variable)] = detectors[(skey, variable)].reset()
    corrections = corrections.reset(stale)
    # Residuals from before the change describe a world that is gone.
    residuals = residuals.forget((Stratum.from_key(s), v) for s, v in diverged)

    decided = sum(quadrant_counts.values())
    q1_rate = quadrant_counts.get(Quadrant.Q1.value, 0) / decided if decided else None
    epsilon = state.epsilon.update(covered, cfg.risk) if covered else state.epsilon
    new_state = attrs.evolve(
        state,
        evidence=state.evidence.apply_many(evidence_updates),
        mechanisms=tuple(mechanisms),
        mechanism_strata=mechanism_strata,
        detectors=detectors,
        signatures=signatures,
        residuals=residuals,
        corrections=corrections,
        epsilon=epsilon,
        z_star=z_star,
    )
    report = LearnReport(
        compared=compared,
        skipped=tuple(skipped),
        divergences=tuple(f"{s}:{v}" for s, v in sorted(diverged)),
        quadrants=dict(quadrant_counts),
        q1_rate=q1_rate,
        coverage=sum(covered) / len(covered) if covered else None,
        diverged=tuple(sorted(diverged)),
        examples={s.key: rank for s, _ctx, rank in evaluated},
    )
    return new_state, report


# ---- helpers ----------------------------------------------------------------------------
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


def _signature(c: RankCorrection) -> tuple[float, ...]:
    """The correction in force, as the comparable tuple the state remembers per stratum."""
    return (c.outcome(Outcome.TTFT), c.decode_time, *(c.mediator(m) for m in Mediator))


_MEDIATOR_INDEX = {m.value: 2 + k for k, m in enumerate(Mediator)}


def _moved(a: Sequence[float], b: Sequence[float], variable: str, threshold: float) -> bool:
    """Did a correction that ``variable``'s prediction depends on move by more than
    ``threshold`` (relative)?  Every variable depends on the decode-step and TTFT factors
    (index 0 and 1); a mediator also on its own factor."""
    index = [0, 1]
    if variable in _MEDIATOR_INDEX:
        index.append(_MEDIATOR_INDEX[variable])
    return any(abs(math.log(b[i] / a[i])) > threshold for i in index)


def _pairs(o: Observation, rp: RankPrediction) -> list[tuple[str, float, float]]:
    out = [(oc.value, o.outcomes.get(oc), rp.outcomes.get(oc)) for oc in Outcome]
    out.extend((m.value, o.mediators.get(m), rp.mediators.get(m)) for m in Mediator)
    return out


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
    observed: Outcomes,
    predicted: Outcomes,
    state: PlannerState,
    stratum: Stratum,
    cfg: KoiConfig,
) -> list[bool]:
    """Was each banded outcome inside the band built from the history before this tick?"""
    out = []
    for oc in BAND_OUTCOMES:
        y, yhat = observed.get(oc), predicted.get(oc)
        if not (math.isfinite(y) and math.isfinite(yhat)):
            out.append(False)
            continue
        b = band(yhat, state.residuals.get(stratum, oc.value), state.epsilon.eps, cfg=cfg.risk)
        out.append(b.contains(y))
    return out


def _correction_samples(
    skey: str, o: Observation, rp: RankPrediction, in_force: RankCorrection
) -> list[tuple[str, str, float, float, float]]:
    """Implied correction samples from one observation (see :mod:`._corrections`)."""
    samples = [
        (skey, DECODE_TIME, in_force.decode_time, o.outcomes.p99_tpot_ms, rp.outcomes.p99_tpot_ms)
    ]
    # p99 TTFT mixes prefill with queueing behind decode steps, so no single step-time factor
    # explains it; it gets a direct outcome factor (the prediction scales with it exactly).
    ttft = (o.outcomes.p99_ttft_ms, rp.outcomes.p99_ttft_ms)
    samples.append((skey, Outcome.TTFT.value, in_force.outcome(Outcome.TTFT), *ttft))
    for m in Mediator:
        samples.append(
            (skey, m.value, in_force.mediator(m), o.mediators.get(m), rp.mediators.get(m))
        )
    return samples


def _job_outcomes(obs: Sequence[Observation]) -> Outcomes | None:
    """The job-level outcome this window achieved (for the ideal point)."""
    if not any(o.completed for o in obs):
        return None
    tput = sum(o.outcomes.throughput_tok_s for o in obs)
    cost_parts = [
        o.outcomes.cost_per_mtok_usd * o.outcomes.throughput_tok_s
        for o in obs
        if math.isfinite(o.outcomes.cost_per_mtok_usd)
    ]
    cost = sum(cost_parts) / tput if tput > 0 else math.inf
    return Outcomes(
        cost_per_mtok_usd=cost,
        p99_ttft_ms=max(o.outcomes.p99_ttft_ms for o in obs),
        p99_tpot_ms=max(o.outcomes.p99_tpot_ms for o in obs),
        throughput_tok_s=tput,
        slo_margin=min(o.outcomes.slo_margin for o in obs),
    )


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
    """The child's residuals per stratum, for the invariance test of ``edge``."""
    child = _var(edge[1])
    return {
        stratum.key: list(series)
        for stratum, variable in residuals.keys()  # noqa: SIM118 (a method, not a dict)
        if variable == child and (series := residuals.get(stratum, variable))
    }

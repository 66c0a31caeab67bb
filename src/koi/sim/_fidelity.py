"""How far the surrogate's prior is from the simulated truth, and whether one factor per koi
stratum could close the gap (docs/evaluation.md, "The surrogate is not the truth")."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping

import attrs
import numpy as np

from koi.sim._capacity import replica_capacity
from koi.sim._runner import build_world
from koi.sim._scenario import Scenario
from koi.sim._world import World
from koi.surrogate.replay import ReplayEngine, ReplicaSpec, StepTimeModel, sample_requests
from koi.types import Chain, Config, Job, Ladder, Quant, Rank

__all__ = ["StratumFit", "SurrogateError", "stratum_fit", "surrogate_error"]

_METRICS = ("tpot", "ttft", "capacity")


@attrs.frozen
class SurrogateError:
    """Relative errors ``|predicted - true| / true`` of the surrogate against the truth.

    One sample per (online job, GPU type of the fleet) at the first feasible single-replica
    chain that starts under the truth, loaded at ``load`` times the surrogate's own capacity
    estimate.  ``by_gpu[gpu][metric]`` is the median for one GPU type (metrics ``tpot``,
    ``ttft``, ``capacity`` and ``all``); ``bias_by_gpu[gpu]`` the median of
    ``ln(true / predicted)`` capacity (negative: the truth serves less than koi expects).
    """

    median_ape: float
    median_ape_tpot: float
    median_ape_ttft: float
    median_ape_capacity: float
    samples: int
    pairs: tuple[tuple[str, str, float, float], ...]  # (job, gpu, predicted, true) p99 TPOT
    by_gpu: Mapping[str, Mapping[str, float]] = attrs.field(factory=dict)
    bias_by_gpu: Mapping[str, float] = attrs.field(factory=dict)


def _chains(world: World, job: Job, gpu: str) -> Iterator[Chain]:
    """The C2-feasible single-replica chains of ``job`` on ``gpu`` (TP 1-8, the job's precisions
    among BF16/FP8/INT4)."""
    seen: set[tuple[str, str, Config]] = set()
    for pool in world.pools():
        env = pool.environment
        if env.gpu != gpu:
            continue
        for tp in (1, 2, 4, 8):
            for quant in (Quant.BF16, Quant.FP8, Quant.INT4):
                if not job.accepts(quant):  # the owner's precision policy is part of C2
                    continue
                chain = Chain(job.model, env, Config(tp=tp, quant=quant))
                key = (env.cloud, env.instance_type, chain.config)
                if key in seen or not world._feasibility(chain).ok:
                    continue
                seen.add(key)
                yield chain


def _true(world: World, chain: Chain) -> tuple[ReplicaSpec, Config] | None:
    spec = world._spec(chain, 1.0)
    if spec is None:
        return None
    return spec, world._true_config(chain, spec)


def surrogate_error(
    scenario: Scenario | str,
    *,
    seed: int = 0,
    load: float = 0.5,
    horizon_s: float = 120.0,
    gpus_per_job: int | None = None,
) -> SurrogateError:
    """Median relative error of :class:`koi.surrogate.Surrogate` against the truth.

    For each online job and each GPU type of the fleet, the first feasible one-replica chain
    that starts under the truth is predicted by the surrogate at ``load`` × its own saturation
    estimate, and replayed under the truth at the same arrival rate for ``horizon_s``; p99
    TPOT, p99 TTFT and saturation capacity are compared.  ``median_ape`` is the median over
    all three.  ``gpus_per_job`` limits the GPU types tried per job (alphabetical order).
    """
    from koi.surrogate import Surrogate

    world = build_world(scenario, seed=seed)
    sur = Surrogate(world.gpus, world.models)
    gpu_types = sorted({p.environment.gpu for p in world.pools()})
    errs: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    bias: dict[str, list[float]] = defaultdict(list)
    pairs: list[tuple[str, str, float, float]] = []
    for job in world.scenario.online_jobs:
        for gpu_name in gpu_types[: gpus_per_job or len(gpu_types)]:
            found = next(
                ((c, tr) for c in _chains(world, job, gpu_name) if (tr := _true(world, c))), None
            )
            if found is None:
                continue
            chain, (spec, true_cfg) = found
            fe = world._feasibility(chain)
            gpu, model = world.gpus[gpu_name], world.models[job.model]
            prior, _ = sur.step_model(gpu, model, chain.config)
            _, cap_pred = replica_capacity(prior, fe.kv_capacity_tokens, chain.config, job.workload)
            _, cap_true = replica_capacity(
                spec.step_model, spec.kv_capacity_tokens, true_cfg, job.workload
            )
            rate = load * cap_pred / job.workload.output_len.mean
            probe = attrs.evolve(job, workload=attrs.evolve(job.workload, rate_rps=rate))
            pred = sur.predict(probe, Ladder((Rank(chain, 1),)))
            if not pred.feasible:
                continue
            rng = np.random.default_rng([seed, len(pairs)])
            eng = ReplayEngine([spec], chain.config.routing)
            eng.submit(sample_requests(probe.workload, rng, 0.0, horizon_s))
            st = eng.advance(horizon_s * 3)
            if not len(st.tpot_ms):
                continue
            t_true, t_pred = st.p99(st.tpot_ms), pred.outcomes.p99_tpot_ms
            f_true, f_pred = st.p99(st.ttft_ms), pred.outcomes.p99_ttft_ms
            row = errs[gpu_name]
            for metric, p, t in (("tpot", t_pred, t_true), ("ttft", f_pred, f_true)):
                if t > 0 and math.isfinite(p):
                    row[metric].append(abs(p - t) / t)
            row["capacity"].append(abs(cap_pred - cap_true) / cap_true)
            bias[gpu_name].append(math.log(cap_true / cap_pred))
            pairs.append((job.id, gpu_name, t_pred, t_true))

    def med(x: list[float]) -> float:
        return float(np.median(x)) if x else math.nan

    every = {m: [e for row in errs.values() for e in row[m]] for m in _METRICS}
    by_gpu = {
        g: {**{m: med(row[m]) for m in _METRICS}, "all": med([e for m in _METRICS for e in row[m]])}
        for g, row in sorted(errs.items())
    }
    return SurrogateError(
        median_ape=med(every["tpot"] + every["ttft"] + every["capacity"]),
        median_ape_tpot=med(every["tpot"]),
        median_ape_ttft=med(every["ttft"]),
        median_ape_capacity=med(every["capacity"]),
        samples=len(pairs),
        pairs=tuple(pairs),
        by_gpu=by_gpu,
        bias_by_gpu={g: med(v) for g, v in sorted(bias.items())},
    )


@attrs.frozen
class StratumFit:
    """How much of the surrogate's squared log error one multiplier per stratum removes.

    ``total`` is the sum over probes of ``ln(true / predicted)^2``; ``removed`` the share a
    least-squares multiplier per koi stratum (GPU × engine × model class) takes away;
    ``removed_tp`` the share with one multiplier per stratum × TP; ``probes`` the number of
    (configuration, quantity) pairs; ``configs`` the feasible configurations.
    """

    total: float
    removed: float
    removed_tp: float
    probes: int
    configs: int


# Operating points compared per configuration: decode steps (sequences, context per sequence)
# and one prefill step of 2,048 prompt tokens; plus the saturated capacity of the job's mix.
_DECODE = ((1, 1024), (16, 2048), (128, 2048))
_PREFILL = 2048


def _probe(step: StepTimeModel) -> list[float]:
    out = []
    for n, ctx in _DECODE:
        out.append(
            step.step(
                prefill_tokens=0, prefill_pairs=0.0, decode_seqs=n, decode_context_tokens=n * ctx
            ).time_s
        )
    t = _PREFILL
    out.append(
        step.step(
            prefill_tokens=t, prefill_pairs=t * t / 2.0, decode_seqs=0, decode_context_tokens=0
        ).time_s
    )
    return out


def stratum_fit(scenario: Scenario | str, *, seed: int = 0) -> StratumFit:
    """Fit one multiplier per koi stratum to the prior's error over the scenario's feasible
    configurations (every job × instance type × TP 1-8 × the job's precisions that passes C2 and
    starts under the truth; the planners' engine, vLLM) and report the share of the squared
    log error it removes.  Quantities compared: three decode steps, one prefill step
    (:data:`_DECODE`, :data:`_PREFILL`) and the saturated capacity of the job's workload.
    """
    from koi.surrogate import Surrogate

    world = build_world(scenario, seed=seed)
    sur = Surrogate(world.gpus, world.models)
    gpu_types = sorted({p.environment.gpu for p in world.pools()})
    rows: list[tuple[tuple[str, str, str], int, float]] = []
    configs = 0
    seen: set[tuple[str, str, str, str, Config]] = set()
    for job in world.scenario.jobs:
        model = world.models[job.model]
        for gpu_name in gpu_types:
            gpu = world.gpus[gpu_name]
            for chain in _chains(world, job, gpu_name):
                env = chain.environment
                key = (job.id, gpu_name, env.cloud, env.instance_type, chain.config)
                if key in seen:
                    continue
                seen.add(key)
                true = _true(world, chain)
                if true is None:
                    continue
                spec, true_cfg = true
                fe = world._feasibility(chain)
                prior, _ = sur.step_model(gpu, model, chain.config)
                logs = [
                    math.log(t / p)
                    for p, t in zip(_probe(prior), _probe(spec.step_model), strict=True)
                ]
                kv_p = fe.kv_capacity_tokens
                _, cap_p = replica_capacity(prior, kv_p, chain.config, job.workload)
                _, cap_t = replica_capacity(
                    spec.step_model, spec.kv_capacity_tokens, true_cfg, job.workload
                )
                logs.append(math.log(cap_p / cap_t))  # slower truth: positive, like the steps
                stratum = (gpu_name, chain.config.engine, model.size_class)
                configs += 1
                rows.extend((stratum, chain.config.tp, e) for e in logs)
    errs = np.asarray([e for _, _, e in rows])
    total = float((errs**2).sum())

    def residual(keys: list[object]) -> float:
        groups: dict[object, list[float]] = defaultdict(list)
        for k, e in zip(keys, errs.tolist(), strict=True):
            groups[k].append(e)
        return sum(float(((np.asarray(v) - np.mean(v)) ** 2).sum()) for v in groups.values())

    by_stratum = residual([s for s, _, _ in rows])
    by_tp = residual([(s, tp) for s, tp, _ in rows])
    return StratumFit(
        total=total,
        removed=1.0 - by_stratum / total if total > 0 else 0.0,
        removed_tp=1.0 - by_tp / total if total > 0 else 0.0,
        probes=len(rows),
        configs=configs,
    )

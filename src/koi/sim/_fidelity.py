"""How far the surrogate's prior is from the simulated truth (the "surrogate is not the truth"
check of issue 7)."""

from __future__ import annotations

import math

import attrs
import numpy as np

from koi.sim._capacity import replica_capacity
from koi.sim._runner import build_world
from koi.sim._scenario import Scenario
from koi.sim._world import World
from koi.surrogate.replay import ReplayEngine, sample_requests
from koi.types import Chain, Config, Job, Ladder, Quant, Rank

__all__ = ["SurrogateError", "surrogate_error"]


@attrs.frozen
class SurrogateError:
    """Relative errors ``|predicted - true| / true`` of the surrogate against the truth.

    One sample per (online job, GPU type of the fleet) at the first feasible single-replica
    chain, loaded at ``load`` times the surrogate's own capacity estimate.
    """

    median_ape: float
    median_ape_tpot: float
    median_ape_ttft: float
    median_ape_capacity: float
    samples: int
    pairs: tuple[tuple[str, str, float, float], ...]  # (job, gpu, predicted, true) p99 TPOT


def _first_chain(world: World, job: Job, gpu: str) -> Chain | None:
    for pool in world.pools():
        env = pool.environment
        if env.gpu != gpu:
            continue
        for tp in (1, 2, 4, 8):
            for quant in (Quant.BF16, Quant.FP8):
                chain = Chain(job.model, env, Config(tp=tp, quant=quant))
                if world._feasibility(chain).ok:
                    return chain
    return None


def surrogate_error(
    scenario: Scenario | str,
    *,
    seed: int = 0,
    load: float = 0.5,
    horizon_s: float = 120.0,
    gpus_per_job: int | None = None,
) -> SurrogateError:
    """Median relative error of :class:`koi.surrogate.Surrogate` against the truth.

    For each online job and each GPU type of the fleet, the first feasible one-replica chain is
    predicted by the surrogate at ``load`` × its own saturation estimate, and replayed under the
    truth at the same arrival rate for ``horizon_s``; p99 TPOT, p99 TTFT and saturation
    capacity are compared.  ``median_ape`` is the median over all three.  ``gpus_per_job``
    limits the GPU types tried per job (alphabetical order) to keep the check short.
    """
    from koi.surrogate import OperatorModel, Surrogate

    world = build_world(scenario, seed=seed)
    sur = Surrogate(world.gpus, world.models)
    gpu_types = sorted({p.environment.gpu for p in world.pools()})
    tpot_err: list[float] = []
    ttft_err: list[float] = []
    cap_err: list[float] = []
    pairs: list[tuple[str, str, float, float]] = []
    for job in world.scenario.online_jobs:
        for gpu_name in gpu_types[: gpus_per_job or len(gpu_types)]:
            chain = _first_chain(world, job, gpu_name)
            if chain is None:
                continue
            fe = world._feasibility(chain)
            gpu, model = world.gpus[gpu_name], world.models[job.model]
            prior = OperatorModel(gpu, model, chain.config)
            _, cap_pred = replica_capacity(prior, fe.kv_capacity_tokens, chain.config, job.workload)
            spec = world._spec(chain, 1.0)
            _, cap_true = replica_capacity(
                spec.step_model, spec.kv_capacity_tokens, chain.config, job.workload
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
            for errs, p, t in ((tpot_err, t_pred, t_true), (ttft_err, f_pred, f_true)):
                if t > 0 and math.isfinite(p):
                    errs.append(abs(p - t) / t)
            cap_err.append(abs(cap_pred - cap_true) / cap_true)
            pairs.append((job.id, gpu_name, t_pred, t_true))
    every = tpot_err + ttft_err + cap_err

    def med(x: list[float]) -> float:
        return float(np.median(x)) if x else math.nan

    return SurrogateError(
        median_ape=med(every),
        median_ape_tpot=med(tpot_err),
        median_ape_ttft=med(ttft_err),
        median_ape_capacity=med(cap_err),
        samples=len(pairs),
        pairs=tuple(pairs),
    )

"""The root planner's default budget books (paper §2.6, DESIGN §6).

For every job, the candidate screen gives the cheapest sized option per GPU type;
priced per pool, that is how many GPUs of the pool serve the job and what the job gains per GPU
there (its Tchebycheff score over deferral).  The selector's LP spreads the fleet over
the jobs; each job's book lists the pools it got plus the next best few.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from koi.candidates import Corrections, Screener
from koi.scoring import Normalizer, ScoringConfig, deferral_score, ideal_point, tchebycheff
from koi.selector import JobDemand
from koi.types import ClusterSnapshot, GpuSpec, Job, Outcomes, Pool

__all__ = ["job_demand", "reference_cost"]


def job_demand(
    job: Job,
    snapshot: ClusterSnapshot,
    screener: Screener,
    gpus: Mapping[str, GpuSpec],
    *,
    reference_cost_per_mtok: float,
    scoring: ScoringConfig,
    corrections: Corrections | None = None,
) -> JobDemand | None:
    """GPUs needed and value per GPU in every pool that can serve ``job``, sized with the
    residual ``corrections`` in force (the proposals are)."""
    envs = [p.environment for p in snapshot.pools if p.environment.gpu in gpus]
    best: dict[str, tuple[int, Outcomes, float]] = {}
    # Per GPU type, the sized option with the fewest GPUs that meets the target (the first
    # such): only the options that can be it are screened.
    for sized in screener.fewest_gpus(
        job, envs, gpus, now_s=snapshot.time_s, corrections=corrections
    ):
        need = sized.replicas * sized.option.config.gpus
        best[sized.option.gpu] = (
            need,
            sized.prediction.outcomes,
            sized.option.shape.price_usd_per_gpu_h,
        )
    if not best:
        return None
    scales = Normalizer.for_job(
        job, reference_cost_per_mtok=reference_cost_per_mtok, now_s=snapshot.time_s, cfg=scoring
    )
    z = ideal_point(job, scales)
    j_defer = deferral_score(job, scoring, now_s=snapshot.time_s)
    needed: dict[str, float] = {}
    value: dict[str, float] = {}
    for pool in snapshot.pools:
        env = pool.environment
        if env.gpu not in best or pool.capacity_gpus == 0:
            continue
        need, outcomes, shape_price = best[env.gpu]
        # Same performance, this pool's price.
        ratio = env.price_usd_per_gpu_h / shape_price if shape_price > 0 else 1.0
        priced = Outcomes(
            cost_per_mtok_usd=outcomes.cost_per_mtok_usd * ratio,
            p99_ttft_ms=outcomes.p99_ttft_ms,
            p99_tpot_ms=outcomes.p99_tpot_ms,
            throughput_tok_s=outcomes.throughput_tok_s,
            slo_margin=outcomes.slo_margin,
        )
        j = tchebycheff(job, priced, z_star=z, scales=scales, rho=scoring.rho, cfg=scoring)
        needed[pool.id] = float(need)
        value[pool.id] = max(j - j_defer, 0.0) / need
    if not needed:
        return None
    return JobDemand(job_id=job.id, gpus_needed=needed, value_per_gpu=value)


def reference_cost(
    job: Job,
    pools: Sequence[Pool],
    screener: Screener,
    gpus: Mapping[str, GpuSpec],
    *,
    now_s: float,
) -> float:
    """The cheapest cost per Mtok any of ``pools`` offers ``job`` (the cost scale).

    On the prior, uncorrected: a scale that moved with every learned correction would move
    every score with it."""
    envs = [p.environment for p in pools if p.environment.gpu in gpus]
    cheapest_per_gpu: dict[str, float] = {}
    for env in envs:
        price = env.price_usd_per_gpu_h
        cheapest_per_gpu[env.gpu] = min(price, cheapest_per_gpu.get(env.gpu, price))
    best = screener.cheapest_cost(job, envs, gpus, now_s=now_s, price_per_gpu=cheapest_per_gpu)
    return best if best < float("inf") and best > 0 else 1.0

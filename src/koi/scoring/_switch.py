"""Switching cost ``Switch_i = C_cold + C_parallel + C_kill + C_risk`` (paper §2.4)."""

from __future__ import annotations

import math
from collections import Counter

import attrs

from koi.errors import InvalidInput
from koi.scoring._config import ScoringConfig
from koi.surrogate import Prediction
from koi.types import Chain, Job, Ladder, ModelSpec

__all__ = ["SwitchCost", "in_flight_requests", "switching_cost"]

_DEFAULT = ScoringConfig()
_S_PER_H = 3600.0


@attrs.frozen
class SwitchCost:
    """The four switching components of one job, in US dollars."""

    cold_usd: float = 0.0
    parallel_usd: float = 0.0
    kill_usd: float = 0.0
    risk_usd: float = 0.0

    @property
    def total_usd(self) -> float:
        return self.cold_usd + self.parallel_usd + self.kill_usd + self.risk_usd

    def score(self, cfg: ScoringConfig = _DEFAULT) -> float:
        """``Switch_i`` in score units: dollars divided by ``cfg.usd_per_score_unit``."""
        return self.total_usd / cfg.usd_per_score_unit


def in_flight_requests(job: Job, prediction: Prediction) -> float:
    """Requests in flight on a job's current deployment, which a kill would lose: Little's law
    on the prediction for an online job, the predicted running batches for a batch job."""
    if not prediction.feasible:
        return 0.0
    if job.is_online:
        rate = job.workload.rate_rps or 0.0
        o = prediction.outcomes
        latency_s = (o.p99_ttft_ms + job.workload.output_len.mean * o.p99_tpot_ms) / 1000.0
        return rate * latency_s if math.isfinite(latency_s) else 0.0
    return sum(rp.mediators.mean_batch_size * rp.rank.replicas for rp in prediction.ranks)


def _replicas(ladder: Ladder) -> Counter[Chain]:
    count: Counter[Chain] = Counter()
    for rank in ladder.ranks:
        count[rank.chain] += rank.replicas
    return count


def _cold_start_s(chain: Chain, model: ModelSpec, cfg: ScoringConfig) -> float:
    # Every GPU of the chain reads its shard of the weights in parallel.
    shard_gb = model.params_b * chain.config.quant.bytes_per_param / chain.gpus
    return shard_gb / cfg.load_bandwidth(chain.environment.gpu) + cfg.warmup_s


def switching_cost(
    old: Ladder,
    new: Ladder,
    *,
    model: ModelSpec,
    breach_probability: float,
    in_flight_requests: float,
    cfg: ScoringConfig = _DEFAULT,
) -> SwitchCost:
    r"""Dollar cost of moving a job from ladder ``old`` to ladder ``new``.

    Ladders are compared replica by replica (a chain present in both keeps its common replicas);
    ``A`` are the added replicas, ``R`` the removed ones, ``π(·)`` their price per hour.

    .. math::

        C_\mathrm{cold} &= \sum_{a\in A} \pi(a)\,t_a, \quad
            t_a = \frac{\text{weight bytes per GPU}}{\text{load bandwidth}} + t_\mathrm{warm} \\
        C_\mathrm{parallel} &= \pi(R)\,\max_{a\in A} t_a \\
        C_\mathrm{kill} &= \pi(R)\,t_\mathrm{drain} + n_\mathrm{in\,flight}\,\phi\,c_\mathrm{req}
            \,\frac{|R|_\mathrm{GPU}}{|\mathrm{old}|_\mathrm{GPU}} \\
        C_\mathrm{risk} &= p^\mathrm{brk}(\mathrm{new})\,\pi(\mathrm{new})\,t_\mathrm{transient}
            \,m_\mathrm{breach}

    Make-before-break: the retired replicas keep running (and are paid for) until the slowest new
    replica is warm, then drain. All four are exactly zero when nothing changes.
    """
    if not (0.0 <= breach_probability <= 1.0):
        raise InvalidInput(f"breach_probability: must be in [0, 1], got {breach_probability!r}")
    if not (math.isfinite(in_flight_requests) and in_flight_requests >= 0):
        raise InvalidInput(f"in_flight_requests: must be >= 0, got {in_flight_requests!r}")
    before, after = _replicas(old), _replicas(new)
    added = after - before
    removed = before - after
    if not added and not removed:
        return SwitchCost()
    cold = 0.0
    overlap_s = 0.0
    for chain, n in added.items():
        t = _cold_start_s(chain, model, cfg)
        cold += n * chain.price_usd_per_h * t / _S_PER_H
        overlap_s = max(overlap_s, t)
    removed_price = sum(n * chain.price_usd_per_h for chain, n in removed.items())
    removed_gpus = sum(n * chain.gpus for chain, n in removed.items())
    parallel = removed_price * overlap_s / _S_PER_H
    share = removed_gpus / old.gpus if old.gpus else 0.0
    lost = in_flight_requests * cfg.lost_request_fraction * cfg.usd_per_lost_request * share
    kill = removed_price * cfg.drain_s / _S_PER_H + lost
    risk = (
        breach_probability
        * new.price_usd_per_h
        * cfg.transient_s
        / _S_PER_H
        * cfg.breach_usd_multiplier
    )
    return SwitchCost(cold, parallel, kill, risk)

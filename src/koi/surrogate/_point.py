"""One deployment under one fixed load: what ``koi predict`` prints."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.surrogate._analytic import estimate_closed_loop, estimate_open_loop, saturation
from koi.surrogate._config import SurrogateConfig
from koi.surrogate._memory import feasibility, node_gpu
from koi.surrogate._predict import mediators_of, rank_load, workload_lengths
from koi.surrogate._protocol import LoadProtocol
from koi.surrogate._replay_adapter import overload_horizon, replay_horizon, replay_protocol
from koi.surrogate._substitute import ProfileSource, select_step_model
from koi.types import Config, Environment, GpuSpec, ModelSpec

__all__ = ["ServingPrediction", "predict_serving"]


@attrs.frozen
class ServingPrediction:
    """Latency, throughput and mediators of ``replicas`` copies of one chain under one load.

    Latencies in ms; ``throughput_tok_s`` is output tokens per second over all replicas;
    ``cost_per_mtok_usd`` is None when no price is known.  ``mean_ttft_ms`` and
    ``mean_tpot_ms`` are means over the protocol's run (burst included when it has one): what
    benchmark tools report as "mean" or "avg".
    """

    feasible: bool
    reason: str
    p50_ttft_ms: float
    p99_ttft_ms: float
    p50_tpot_ms: float
    p99_tpot_ms: float
    throughput_tok_s: float
    kv_capacity_tokens: int
    mediators: dict[str, float]
    cost_per_mtok_usd: float | None = None
    weights_gib: float = 0.0
    substituted_from: str | None = None
    mean_ttft_ms: float = float("nan")
    mean_tpot_ms: float = float("nan")

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


_MAX_REPLAYED_REPLICAS = 64


def predict_serving(
    gpu: GpuSpec,
    model: ModelSpec,
    config: Config,
    *,
    isl: int,
    osl: int,
    replicas: int = 1,
    rate_rps: float | None = None,
    concurrency: int | None = None,
    price_usd_per_gpu_h: float | None = None,
    cfg: SurrogateConfig | None = None,
    replay: bool | None = None,
    profiles: ProfileSource | None = None,
    candidates: Iterable[ModelSpec] = (),
    environment: Environment | None = None,
    protocol: LoadProtocol | None = None,
) -> ServingPrediction:
    """Predict one deployment at a fixed request shape (``isl`` in, ``osl`` out tokens).

    The load is a :class:`LoadProtocol` (``protocol``), or exactly one of ``rate_rps`` (open
    loop, Poisson arrivals) or ``concurrency`` (closed loop over all replicas: the clients
    start together and run ``10 · concurrency`` fixed-length requests).  Every TTFT carries
    the engine's per-request floor (``EngineProfile.request_floor_ms``).  Infeasible
    deployments come back with ``feasible=False`` and a reason, never an exception.  With
    ``profiles`` (e.g. the ``aic`` backend) measured step times are used where covered, with
    nearest-architecture substitution among ``candidates`` (``substituted_from`` names the
    stand-in).  With an ``environment`` the GPUs talk over that instance type's interconnect
    (e.g. PCIe without peer-to-peer) instead of the GPU's catalog link.
    """
    cfg = cfg or SurrogateConfig()
    if protocol is not None and (rate_rps is not None or concurrency is not None):
        raise InvalidInput("load: give a protocol or rate_rps/concurrency, not both")
    if protocol is not None:
        rate_rps, concurrency = protocol.rate_rps, protocol.concurrency
    if (rate_rps is None) == (concurrency is None):
        raise InvalidInput("load: give exactly one of rate_rps or concurrency")
    for name, value in (("isl", isl), ("osl", osl), ("replicas", replicas)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInput(f"{name}: must be an integer >= 1, got {value!r}")
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise InvalidInput(f"concurrency: must be an integer >= 1, got {concurrency!r}")
    if rate_rps is not None and not (math.isfinite(rate_rps) and rate_rps > 0):
        raise InvalidInput(f"rate_rps: must be > 0, got {rate_rps!r}")
    gpu = node_gpu(gpu, environment)
    longest = isl + osl
    if protocol is not None:
        longest = math.floor(protocol.length_range[1] * isl) + math.floor(
            protocol.length_range[1] * osl
        )
    feas = feasibility(
        gpu, model, config, cfg=cfg, seq_tokens=isl + osl, max_request_tokens=longest
    )
    if not feas.ok:
        inf = float("inf")
        return ServingPrediction(
            feasible=False,
            reason=feas.reason,
            p50_ttft_ms=inf,
            p99_ttft_ms=inf,
            p50_tpot_ms=inf,
            p99_tpot_ms=inf,
            throughput_tok_s=0.0,
            kv_capacity_tokens=0,
            mediators={},
            weights_gib=feas.weights_gib,
        )
    inp, out = workload_lengths(isl, osl)
    step, substituted = select_step_model(
        gpu, model, config, profiles=profiles, candidates=candidates, cfg=cfg
    )
    load = rank_load(step, feas.kv_capacity_tokens, config, isl, inp, out, cfg)
    use_replay = cfg.use_replay if replay is None else replay
    # The replay simulates every replica; past a few dozen, routing pools nothing more and the
    # closed form answers a million replicas in the time of one.
    use_replay = use_replay and replicas <= _MAX_REPLAYED_REPLICAS
    floor = cfg.engine_profile(config.engine).request_floor_ms
    if protocol is None:
        protocol = (
            LoadProtocol.open_loop(rate_rps)
            if rate_rps is not None
            else LoadProtocol.closed_loop(int(concurrency or 1))
        )
    if use_replay:
        run = replay_protocol(load, config.routing, replicas, protocol, cfg, floor_ms=floor)
        est, mean_ttft, mean_tpot = run.estimate, run.mean_ttft_ms, run.mean_tpot_ms
    else:
        if rate_rps is not None:
            per_replica = rate_rps / replicas
            sat = saturation(load)
            capacity_rps = sat[1] / max(load.output_len.mean, 1.0)
            horizon = (
                overload_horizon(capacity_rps * replicas, cfg)
                if per_replica > capacity_rps > 0
                else replay_horizon(rate_rps, cfg)
            )
            est = estimate_open_loop(load, per_replica, horizon, sat=sat)
        else:
            assert concurrency is not None
            est = estimate_closed_loop(load, concurrency / replicas)
        est = attrs.evolve(
            est, p50_ttft_ms=est.p50_ttft_ms + floor, p99_ttft_ms=est.p99_ttft_ms + floor
        )
        mean_ttft, mean_tpot = est.p50_ttft_ms, est.p50_tpot_ms
    tput = est.throughput_tok_s * replicas
    cost = None
    if price_usd_per_gpu_h is not None and tput > 0:
        cost = price_usd_per_gpu_h * config.gpus * replicas / 3600.0 / tput * 1e6
    med = {m.value: v for m, v in mediators_of(est, feas).as_dict().items()}
    return ServingPrediction(
        feasible=True,
        reason="",
        p50_ttft_ms=est.p50_ttft_ms,
        p99_ttft_ms=est.p99_ttft_ms,
        p50_tpot_ms=est.p50_tpot_ms,
        p99_tpot_ms=est.p99_tpot_ms,
        throughput_tok_s=tput,
        kv_capacity_tokens=feas.kv_capacity_tokens,
        mediators=med,
        cost_per_mtok_usd=cost,
        weights_gib=feas.weights_gib,
        substituted_from=substituted,
        mean_ttft_ms=mean_ttft,
        mean_tpot_ms=mean_tpot,
    )

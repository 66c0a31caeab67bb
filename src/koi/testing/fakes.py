"""A tiny hand-built fleet and small fake plugins, for tests and examples.

The figures are public spec-sheet and price-list values rounded for readability; use
:mod:`koi.catalog` for the maintained catalog.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from koi.plugins import ProposalContext, hookimpl
from koi.types import (
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Environment,
    GpuSpec,
    Job,
    Ladder,
    LaunchResult,
    LengthDist,
    Mediators,
    ModelSpec,
    Observation,
    Outcomes,
    Plan,
    Pool,
    Rank,
    ServingTarget,
    WorkloadProfile,
)

__all__ = [
    "FixedProposer",
    "StaticFleet",
    "example_gpus",
    "example_models",
    "example_snapshot",
]


def example_gpus() -> dict[str, GpuSpec]:
    """H100-SXM and L4 (dense TFLOPS, per-direction link bandwidth)."""
    h100 = GpuSpec(
        name="H100-SXM",
        vendor="nvidia",
        memory_gib=80.0,
        hbm_tb_s=3.35,
        bf16_tflops=989.0,
        fp8_tflops=1979.0,
        int4_tflops=None,
        link="nvlink",
        link_gb_s=450.0,
        gpus_per_node=8,
        internode_gb_s=50.0,
    )
    l4 = GpuSpec(
        name="L4",
        vendor="nvidia",
        memory_gib=24.0,
        hbm_tb_s=0.3,
        bf16_tflops=121.0,
        fp8_tflops=242.0,
        int4_tflops=None,
        link="pcie",
        link_gb_s=32.0,
        gpus_per_node=8,
        internode_gb_s=12.5,
    )
    return {g.name: g for g in (h100, l4)}


def example_models() -> dict[str, ModelSpec]:
    """Llama-3.1-8B and Llama-3.1-70B from their public configs."""
    small = ModelSpec(
        name="Llama-3.1-8B",
        params_b=8.03,
        active_params_b=8.03,
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        intermediate=14336,
        vocab=128256,
        max_context=131072,
    )
    large = ModelSpec(
        name="Llama-3.1-70B",
        params_b=70.6,
        active_params_b=70.6,
        layers=80,
        hidden=8192,
        heads=64,
        kv_heads=8,
        head_dim=128,
        intermediate=28672,
        vocab=128256,
        max_context=131072,
    )
    return {m.name: m for m in (small, large)}


def example_pools() -> tuple[Pool, ...]:
    """An on-demand H100 pool, a spot L4 pool (public cloud) and a reserved in-house H100 pool."""
    return (
        Pool(
            Environment("aws", "us-east-1", "on_demand", "p5.48xlarge", "H100-SXM", 8, 98.32),
            capacity_instances=2,
        ),
        Pool(
            Environment("aws", "us-east-1", "spot", "g6.12xlarge", "L4", 4, 1.9, 0.05),
            capacity_instances=4,
        ),
        Pool(
            Environment("inhouse", "dc1", "reserved", "h100x8", "H100-SXM", 8, 40.0),
            capacity_instances=1,
        ),
    )


def example_snapshot(time_s: float = 0.0) -> ClusterSnapshot:
    """One active online job (8B on one L4) and one pending batch job (70B)."""
    chat = Job(
        id="chat",
        model="Llama-3.1-8B",
        job_class="online",
        workload=WorkloadProfile(
            LengthDist(800, 1.0, 8192), LengthDist(200, 0.8, 2048), rate_rps=4.0
        ),
        target=ServingTarget.online(p99_ttft_ms=800.0, p99_tpot_ms=60.0),
    )
    summarize = Job(
        id="summarize",
        model="Llama-3.1-70B",
        job_class="batch",
        workload=WorkloadProfile(
            LengthDist(3000, 0.5, 32768), LengthDist(300, 0.5, 1024), total_requests=20_000
        ),
        target=ServingTarget.batch(deadline_s=time_s + 6 * 3600.0),
    )
    pools = example_pools()
    running = Chain("Llama-3.1-8B", pools[1].environment, Config(tp=1, max_batch_size=64))
    active = ActiveDeployment("chat", Ladder((Rank(running, 1),)), since_s=0.0)
    return ClusterSnapshot(time_s=time_s, jobs=(chat, summarize), pools=pools, active=(active,))


def _observation(
    job_id: str, chain: Chain, replicas: int, window: tuple[float, float]
) -> Observation:
    # Deterministic, plausible values that depend on the chain, so tests can tell ranks apart.
    tp = chain.config.tp
    return Observation(
        job_id=job_id,
        chain=chain,
        start_s=window[0],
        end_s=window[1],
        requests=100 * replicas,
        completed=100 * replicas,
        replicas_up=replicas,
        outcomes=Outcomes(
            cost_per_mtok_usd=chain.price_usd_per_h,
            p99_ttft_ms=400.0 / tp,
            p99_tpot_ms=40.0 / tp,
            throughput_tok_s=1000.0 * tp * replicas,
            slo_margin=0.2,
        ),
        mediators=Mediators(0.5, 16.0, 1.0, 0.6, 0.4, 0.1 * (tp > 1), 0.0, 0.0, 0.3, 0.7),
    )


def _names(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


def _ladder_map(value: Mapping[str, Iterable[Ladder]]) -> dict[str, tuple[Ladder, ...]]:
    return {job_id: tuple(ladders) for job_id, ladders in value.items()}


@attrs.frozen
class StaticFleet:
    """A fake host for the clouds in ``clouds``: snapshot, telemetry and launch hooks.

    Launches bring up every requested replica except on pools listed in ``failing_pools``, where
    nothing comes up (a partial launch).

    .. versionadded:: 0.1
    """

    snapshot: ClusterSnapshot
    clouds: frozenset[str] = attrs.field(converter=_names)
    failing_pools: frozenset[str] = attrs.field(default=frozenset(), converter=_names)
    koi_plugin_name: str = "static-fleet"

    def _owns(self, rank: Rank) -> bool:
        return rank.chain.environment.cloud in self.clouds

    @hookimpl
    def koi_snapshot(self, now: float) -> ClusterSnapshot:
        return attrs.evolve(self.snapshot, time_s=now)

    @hookimpl
    def koi_collect_telemetry(
        self, ranks: Sequence[tuple[str, Rank]], window: tuple[float, float]
    ) -> list[Observation]:
        return [_observation(j, r.chain, r.replicas, window) for j, r in ranks if self._owns(r)]

    @hookimpl
    def koi_launch(self, plan: Plan) -> list[LaunchResult]:
        out = []
        for job_id, ladder in sorted(plan.ladders.items()):
            mine = tuple(r for r in ladder.ranks if self._owns(r))
            if not mine:
                continue
            up = tuple(r for r in mine if r.chain.environment.id not in self.failing_pools)
            message = "" if len(up) == len(mine) else "pool out of capacity"
            out.append(LaunchResult(job_id, Ladder(mine), Ladder(up), message))
        return out


@attrs.frozen
class FixedProposer:
    """Proposes the same ladders for a job every time (job id -> ladders), but none the job's
    precision policy rules out.

    .. versionadded:: 0.1
    """

    ladders: Mapping[str, tuple[Ladder, ...]] = attrs.field(converter=_ladder_map, hash=False)
    koi_plugin_name: str = "fixed"

    @hookimpl
    def koi_propose_ladders(self, job: Job, context: ProposalContext) -> Iterable[Ladder]:
        # Non-ladders pass through: tests use them to check the host's own validation.
        accepted = [
            lad
            for lad in self.ladders.get(job.id, ())
            if not isinstance(lad, Ladder) or job.precision_problem(lad) is None
        ]
        return accepted[: context.max_candidates]

"""Hypothesis strategies for every koi value type, valid by construction.

House style (as Hypothesis' own): plural names, keyword-only bounds, arguments that take
strategies rather than values, and impossible bounds rejected with
:class:`~koi.errors.InvalidInput` when the strategy is first used, never a silent ``nothing()``.

Longer than most modules: one strategy per public value type, which users import from one
place; each is short.
"""

from __future__ import annotations

import functools
import math
import string
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

import attrs
from hypothesis import strategies as st

from koi.errors import InvalidInput
from koi.types import (
    DEFAULT_PRECISIONS,
    KV_CACHE_DTYPES,
    ActionKind,
    ActiveDeployment,
    AdmissionPolicy,
    Arrival,
    Chain,
    ClusterSnapshot,
    Config,
    Environment,
    GpuSpec,
    Job,
    JobAction,
    JobClass,
    Ladder,
    LaunchResult,
    LengthDist,
    LinkKind,
    Market,
    Mediators,
    ModelSpec,
    ObjectiveWeights,
    Observation,
    Outcomes,
    Plan,
    Pool,
    Quant,
    Quota,
    Rank,
    Resolution,
    Routing,
    ServingTarget,
    WorkloadProfile,
    variable_names,
)

__all__ = [
    "active_deployments",
    "chains",
    "configs",
    "environments",
    "gpu_specs",
    "job_actions",
    "jobs",
    "ladders",
    "launch_results",
    "length_dists",
    "mediators",
    "model_specs",
    "names",
    "objective_weights",
    "observations",
    "outcomes",
    "plans",
    "pools",
    "precision_sets",
    "quotas",
    "ranks",
    "resolutions",
    "snapshots",
    "targets",
    "workloads",
]

P = ParamSpec("P")
T = TypeVar("T")

_NAME_CHARS = string.ascii_lowercase + string.digits + "-_."
_CLOUDS = ("aws", "azure", "gcp", "onprem")


def _lazy(factory: Callable[P, st.SearchStrategy[T]]) -> Callable[P, st.SearchStrategy[T]]:
    """Defer argument checks to first use, as Hypothesis does for its own strategies."""

    @functools.wraps(factory)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> st.SearchStrategy[T]:
        return st.deferred(lambda: factory(*args, **kwargs))

    return wrapper


def _bounds(name: str, lo: float, hi: float, *, least: float = 0.0, strict: bool = False) -> None:
    for label, v in ((f"min_{name}", lo), (f"max_{name}", hi)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise InvalidInput(f"{label}: must be a finite number, got {v!r}")
    if lo < least or (strict and lo <= least):
        rule = f"> {least}" if strict else f">= {least}"
        raise InvalidInput(f"min_{name}: must be {rule}, got {lo!r}")
    if lo > hi:
        raise InvalidInput(f"min_{name}: must be <= max_{name} ({hi!r}), got {lo!r}")


def _int_bounds(name: str, lo: int, hi: int, *, least: int = 0) -> None:
    for label, v in ((f"min_{name}", lo), (f"max_{name}", hi)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidInput(f"{label}: must be an integer, got {v!r}")
    _bounds(name, lo, hi, least=least)


def _floats(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


def _positive(hi: float) -> st.SearchStrategy[float]:
    return st.floats(0.0, hi, allow_nan=False, exclude_min=True)


@_lazy
def names(*, min_size: int = 1, max_size: int = 12) -> st.SearchStrategy[str]:
    """Identifiers koi accepts: non-empty, no surrounding whitespace."""
    _int_bounds("size", min_size, max_size, least=1)
    return st.text(_NAME_CHARS, min_size=min_size, max_size=max_size)


@_lazy
def gpu_specs(
    *,
    names: st.SearchStrategy[str] | None = None,
    min_memory_gib: float = 8.0,
    max_memory_gib: float = 256.0,
) -> st.SearchStrategy[GpuSpec]:
    """:class:`~koi.types.GpuSpec` values with memory in ``[min_memory_gib, max_memory_gib]``."""
    _bounds("memory_gib", min_memory_gib, max_memory_gib, strict=True)
    name_st = _default_names() if names is None else names
    return st.builds(
        GpuSpec,
        name=name_st,
        vendor=st.sampled_from(("nvidia", "amd")),
        memory_gib=_floats(min_memory_gib, max_memory_gib),
        hbm_tb_s=_floats(0.1, 10.0),
        bf16_tflops=_floats(10.0, 3000.0),
        fp8_tflops=st.none() | _floats(20.0, 6000.0),
        int4_tflops=st.none() | _floats(40.0, 12000.0),
        link=st.sampled_from(LinkKind),
        link_gb_s=_floats(8.0, 1800.0),
        gpus_per_node=st.sampled_from((1, 2, 4, 8)),
        internode_gb_s=_floats(1.0, 400.0),
        usable_memory_gib=st.none() | _floats(0.9 * min_memory_gib, min_memory_gib),
    )


def _default_names() -> st.SearchStrategy[str]:
    return st.text(_NAME_CHARS, min_size=1, max_size=12)


@_lazy
def environments(
    *,
    gpus: st.SearchStrategy[str] | None = None,
    markets: st.SearchStrategy[Market] | None = None,
    min_gpus_per_instance: int = 1,
    max_gpus_per_instance: int = 8,
) -> st.SearchStrategy[Environment]:
    """:class:`~koi.types.Environment` values; spot markets get a positive preemption hazard."""
    _int_bounds("gpus_per_instance", min_gpus_per_instance, max_gpus_per_instance, least=1)
    gpu_st = st.sampled_from(("H100-SXM", "L4", "A100-80GB")) if gpus is None else gpus
    market_st = st.sampled_from(Market) if markets is None else markets

    @st.composite
    def build(draw: st.DrawFn) -> Environment:
        market = draw(market_st)
        hazard = draw(_floats(0.001, 1.0)) if market is Market.SPOT else 0.0
        return Environment(
            cloud=draw(st.sampled_from(_CLOUDS)),
            region=draw(_default_names()),
            market=market,
            instance_type=draw(_default_names()),
            gpu=draw(gpu_st),
            gpus_per_instance=draw(st.integers(min_gpus_per_instance, max_gpus_per_instance)),
            price_usd_per_h=draw(_floats(0.0, 200.0)),
            preemption_per_h=hazard,
            multi_node=draw(st.booleans()),
            link=draw(st.none() | st.sampled_from(LinkKind)),
            link_gb_s=draw(st.none() | _floats(8.0, 900.0)),
        )

    return build()


@_lazy
def pools(
    *,
    environments: st.SearchStrategy[Environment] | None = None,
    min_capacity: int = 0,
    max_capacity: int = 64,
) -> st.SearchStrategy[Pool]:
    """:class:`~koi.types.Pool` values with ``capacity_instances`` in the bounds."""
    _int_bounds("capacity", min_capacity, max_capacity)
    env_st = _environments_default() if environments is None else environments
    return st.builds(
        Pool, environment=env_st, capacity_instances=st.integers(min_capacity, max_capacity)
    )


def _environments_default() -> st.SearchStrategy[Environment]:
    return environments()


@_lazy
def model_specs(
    *,
    names: st.SearchStrategy[str] | None = None,
    moe: bool | None = None,
    min_params_b: float = 0.5,
    max_params_b: float = 500.0,
) -> st.SearchStrategy[ModelSpec]:
    """:class:`~koi.types.ModelSpec` values; ``moe`` forces (or forbids) mixture-of-experts."""
    _bounds("params_b", min_params_b, max_params_b, strict=True)
    name_st = _default_names() if names is None else names
    moe_st = st.booleans() if moe is None else st.just(moe)

    @st.composite
    def build(draw: st.DrawFn) -> ModelSpec:
        params = draw(_floats(min_params_b, max_params_b))
        kv_heads = draw(st.sampled_from((1, 2, 4, 8)))
        heads = kv_heads * draw(st.integers(1, 8))
        head_dim = draw(st.sampled_from((64, 96, 128)))
        fields: dict[str, Any] = {}
        active = params
        if draw(moe_st):
            experts = draw(st.integers(2, 128))
            fields = {
                "experts": experts,
                "experts_per_token": draw(st.integers(1, min(experts, 8))),
                "expert_intermediate": draw(st.integers(256, 16384)),
            }
            active = params * draw(_floats(0.02, 1.0))
        return ModelSpec(
            name=draw(name_st),
            params_b=params,
            active_params_b=min(active, params),
            layers=draw(st.integers(1, 128)),
            hidden=heads * head_dim,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate=draw(st.integers(256, 65536)),
            vocab=draw(st.integers(1000, 262144)),
            max_context=draw(st.sampled_from((2048, 8192, 32768, 131072))),
            **fields,
        )

    return build()


@_lazy
def length_dists(
    *, min_mean: float = 1.0, max_mean: float = 8192.0
) -> st.SearchStrategy[LengthDist]:
    """Token-length distributions whose ``max`` is at least their mean."""
    _bounds("mean", min_mean, max_mean, strict=True)

    @st.composite
    def build(draw: st.DrawFn) -> LengthDist:
        mean = draw(_floats(min_mean, max_mean))
        top = math.ceil(mean)
        return LengthDist(
            mean=mean, cv=draw(_floats(0.0, 3.0)), max=draw(st.integers(top, top * 8))
        )

    return build()


def _class_st(job_class: JobClass | None) -> st.SearchStrategy[JobClass]:
    if job_class is None:
        return st.sampled_from(JobClass)
    if not isinstance(job_class, JobClass):
        raise InvalidInput(f"job_class: must be a JobClass or None, got {job_class!r}")
    return st.just(job_class)


def _workload(draw: st.DrawFn, job_class: JobClass) -> WorkloadProfile:
    online = job_class is JobClass.ONLINE
    input_len = draw(length_dists(max_mean=32768.0))
    # A shared prefix given as a share of the prompt, as a length, or not at all.
    tokens = draw(st.none() | st.integers(1, input_len.max - 1)) if input_len.max > 1 else None
    return WorkloadProfile(
        input_len=input_len,
        output_len=draw(length_dists(max_mean=4096.0)),
        arrival=draw(st.sampled_from(Arrival)),
        rate_rps=draw(_floats(0.01, 500.0)) if online else None,
        total_requests=None if online else draw(st.integers(1, 10_000_000)),
        gamma_cv=draw(_floats(0.1, 8.0)),
        prefix_share=draw(_floats(0.0, 1.0)),
        prefix_tokens=tokens,
        prefix_count=draw(st.integers(1, 10_000)),
    )


def _target(draw: st.DrawFn, job_class: JobClass) -> ServingTarget:
    if job_class is JobClass.ONLINE:
        return ServingTarget.online(
            p99_ttft_ms=draw(_floats(1.0, 60_000.0)), p99_tpot_ms=draw(_floats(0.5, 2000.0))
        )
    return ServingTarget.batch(deadline_s=draw(_floats(0.0, 1e7)))


@_lazy
def workloads(*, job_class: JobClass | None = None) -> st.SearchStrategy[WorkloadProfile]:
    """Workloads shaped for ``job_class`` (rate for online, total requests for batch)."""
    class_st = _class_st(job_class)

    @st.composite
    def build(draw: st.DrawFn) -> WorkloadProfile:
        return _workload(draw, draw(class_st))

    return build()


@_lazy
def targets(*, job_class: JobClass | None = None) -> st.SearchStrategy[ServingTarget]:
    """Serving targets: p99 bounds for online jobs, a deadline for batch jobs."""
    class_st = _class_st(job_class)

    @st.composite
    def build(draw: st.DrawFn) -> ServingTarget:
        return _target(draw, draw(class_st))

    return build()


@_lazy
def objective_weights() -> st.SearchStrategy[ObjectiveWeights]:
    """Objective weights with at least one positive entry."""

    @st.composite
    def build(draw: st.DrawFn) -> ObjectiveWeights:
        w = draw(st.lists(_floats(0.0, 10.0), min_size=5, max_size=5))
        if not any(w):
            w[draw(st.integers(0, 4))] = 1.0
        return ObjectiveWeights(*w)

    return build()


@_lazy
def precision_sets() -> st.SearchStrategy[tuple[Quant, ...]]:
    """Non-empty sets of accepted precisions (``Job.precisions``), the default one often."""
    return st.just(DEFAULT_PRECISIONS) | st.sets(st.sampled_from(Quant), min_size=1).map(
        lambda qs: tuple(q for q in Quant if q in qs)
    )


@_lazy
def jobs(
    *,
    ids: st.SearchStrategy[str] | None = None,
    models: st.SearchStrategy[str] | None = None,
    job_class: JobClass | None = None,
    precisions: st.SearchStrategy[tuple[Quant, ...]] | None = None,
) -> st.SearchStrategy[Job]:
    """:class:`~koi.types.Job` values whose workload and target match their class."""
    class_st = _class_st(job_class)
    precision_st = precision_sets() if precisions is None else precisions
    id_st = _default_names() if ids is None else ids
    model_st = (
        st.sampled_from(("Llama-3.1-8B", "Qwen3-32B", "Llama-3.1-70B"))
        if models is None
        else models
    )

    @st.composite
    def build(draw: st.DrawFn) -> Job:
        kind = draw(class_st)
        workload = _workload(draw, kind)
        total = workload.total_requests or 0
        return Job(
            id=draw(id_st),
            model=draw(model_st),
            job_class=kind,
            workload=workload,
            target=_target(draw, kind),
            tenant=draw(_default_names()),
            weights=draw(objective_weights()),
            priority=draw(st.integers(0, 10)),
            arrival_s=draw(_floats(0.0, 1e6)),
            quota_group=draw(st.none() | _default_names()),
            completed_requests=draw(st.integers(0, total)) if total else 0,
            precisions=draw(precision_st),
            admission=draw(st.sampled_from(AdmissionPolicy)),
        )

    return build()


@_lazy
def configs(
    *, max_tp: int = 8, max_pp: int = 4, quants: Sequence[Quant] | None = None
) -> st.SearchStrategy[Config]:
    """Serving configs with power-of-two ``tp <= max_tp`` and ``pp <= max_pp``, quantized to
    one of ``quants`` (any precision when ``None``; an FP8 KV cache only where FP8 is in)."""
    _int_bounds("tp", 1, max_tp, least=1)
    _int_bounds("pp", 1, max_pp, least=1)
    if quants is not None and not quants:
        raise InvalidInput("quants: must name at least one precision, got none")
    tps = [2**k for k in range(8) if 2**k <= max_tp]
    return st.builds(
        Config,
        engine=st.sampled_from(("vllm", "sglang", "trtllm")),
        tp=st.sampled_from(tps),
        pp=st.integers(1, max_pp),
        quant=st.sampled_from(tuple(Quant) if quants is None else tuple(quants)),
        max_batch_size=st.integers(1, 1024),
        max_batched_tokens=st.integers(64, 65536),
        routing=st.sampled_from(Routing),
        gpu_memory_utilization=_floats(0.5, 0.98),
        cuda_graphs=st.booleans(),
        chunked_prefill=st.booleans(),
        max_model_len=st.none() | st.integers(256, 131072),
        # An FP8 KV cache is an FP8 precision too: only where ``quants`` has FP8.
        kv_cache_dtype=st.sampled_from(
            KV_CACHE_DTYPES if quants is None or Quant.FP8 in quants else ("auto",)
        ),
    )


@_lazy
def chains(
    *,
    models: st.SearchStrategy[str] | None = None,
    environments: st.SearchStrategy[Environment] | None = None,
    configs: st.SearchStrategy[Config] | None = None,
) -> st.SearchStrategy[Chain]:
    """Chains ``(model, environment, config)``."""
    model_st = st.sampled_from(("Llama-3.1-8B", "Qwen3-32B")) if models is None else models
    env_st = _environments_default() if environments is None else environments
    cfg_st = _configs_default() if configs is None else configs
    return st.builds(Chain, model=model_st, environment=env_st, config=cfg_st)


def _configs_default() -> st.SearchStrategy[Config]:
    return configs()


@_lazy
def ranks(
    *,
    chains: st.SearchStrategy[Chain] | None = None,
    min_replicas: int = 1,
    max_replicas: int = 8,
) -> st.SearchStrategy[Rank]:
    """Ranks with ``replicas`` in the bounds."""
    _int_bounds("replicas", min_replicas, max_replicas, least=1)
    chain_st = _chains_default() if chains is None else chains
    return st.builds(Rank, chain=chain_st, replicas=st.integers(min_replicas, max_replicas))


def _chains_default() -> st.SearchStrategy[Chain]:
    return chains()


@_lazy
def ladders(
    *,
    ranks: st.SearchStrategy[Rank] | None = None,
    min_size: int = 0,
    max_size: int = 4,
) -> st.SearchStrategy[Ladder]:
    """Ladders of ``min_size..max_size`` ranks (size 0 is the empty, deferring ladder)."""
    _int_bounds("size", min_size, max_size)
    rank_st = _ranks_default() if ranks is None else ranks
    return st.builds(Ladder, st.lists(rank_st, min_size=min_size, max_size=max_size).map(tuple))


def _ranks_default() -> st.SearchStrategy[Rank]:
    return ranks()


@_lazy
def outcomes(*, allow_infinity: bool = False) -> st.SearchStrategy[Outcomes]:
    """Outcomes; ``allow_infinity`` lets latencies and cost be ``inf`` (an overloaded ladder)."""
    lat = st.floats(0.0, 1e7, allow_nan=False) | (
        st.just(math.inf) if allow_infinity else st.nothing()
    )
    return st.builds(
        Outcomes,
        cost_per_mtok_usd=lat,
        p99_ttft_ms=lat,
        p99_tpot_ms=lat,
        throughput_tok_s=_floats(0.0, 1e7),
        slo_margin=_floats(-100.0, 1.0),
    )


@_lazy
def mediators() -> st.SearchStrategy[Mediators]:
    """Mediators with fractions in ``[0, 1]`` and non-negative counts."""
    frac = _floats(0.0, 1.0)
    return st.builds(
        Mediators,
        kv_cache_util=frac,
        mean_batch_size=_floats(0.0, 4096.0),
        queue_depth=_floats(0.0, 1e5),
        mem_bw_util=frac,
        compute_util=frac,
        comm_share=frac,
        bubble_fraction=frac,
        preemption_rate=_floats(0.0, 1e3),
        prefill_share=frac,
        memory_pressure=_floats(0.0, 2.0),
        prefix_hit_rate=frac,
    )


@_lazy
def resolutions(
    *, variables: st.SearchStrategy[str] | None = None
) -> st.SearchStrategy[Resolution]:
    """Intervals ``[low, high]`` (``high`` sometimes infinite) for a measured variable."""
    var_st = st.sampled_from(sorted(variable_names())) if variables is None else variables

    @st.composite
    def build(draw: st.DrawFn) -> Resolution:
        low = draw(_floats(0.0, 1e5))
        width = draw(st.one_of(_floats(0.0, 1e5), st.just(math.inf)))
        return Resolution(draw(var_st), low, low + width)

    return build()


@_lazy
def observations(
    *,
    job_ids: st.SearchStrategy[str] | None = None,
    chains: st.SearchStrategy[Chain] | None = None,
    partial: bool = True,
) -> st.SearchStrategy[Observation]:
    """Observations over a window of positive length; ``completed <= requests``.

    With ``partial`` (the default) some draw variables as ``missing`` and some carry a
    ``resolution``, as real telemetry does.
    """
    id_st = _default_names() if job_ids is None else job_ids
    chain_st = _chains_default() if chains is None else chains
    names = sorted(variable_names())

    @st.composite
    def build(draw: st.DrawFn) -> Observation:
        start = draw(_floats(0.0, 1e6))
        requests = draw(st.integers(0, 1_000_000))
        missing: list[str] = []
        resolution: list[Resolution] = []
        if partial:
            missing = draw(st.lists(st.sampled_from(names), unique=True, max_size=4))
            measured = [n for n in names if n not in missing]
            coarse = draw(st.lists(st.sampled_from(measured), unique=True, max_size=2))
            resolution = [draw(resolutions(variables=st.just(v))) for v in coarse]
        return Observation(
            job_id=draw(id_st),
            chain=draw(chain_st),
            start_s=start,
            end_s=start + draw(_floats(1.0, 3600.0)),
            requests=requests,
            completed=draw(st.integers(0, requests)),
            replicas_up=draw(st.integers(0, 64)),
            outcomes=draw(outcomes()),
            mediators=draw(mediators()),
            healthy=draw(st.booleans()),
            missing=missing,
            resolution=resolution,
            replica_tpot_ms=draw(st.dictionaries(_default_names(), _floats(0.0, 1e4), max_size=4)),
        )

    return build()


@_lazy
def active_deployments(
    *, job_ids: st.SearchStrategy[str] | None = None
) -> st.SearchStrategy[ActiveDeployment]:
    """Active deployments with a non-empty ladder."""
    id_st = _default_names() if job_ids is None else job_ids
    return st.builds(
        ActiveDeployment,
        job_id=id_st,
        ladder=ladders(min_size=1, max_size=3),
        since_s=_floats(0.0, 1e6),
    )


_RUNNING = (ActionKind.PLACE, ActionKind.RECONFIGURE, ActionKind.KEEP)


@_lazy
def job_actions(*, job_ids: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[JobAction]:
    """Actions whose ladder matches their kind (running kinds get a non-empty ladder); kept
    and reconfigured jobs may recycle replicas."""
    id_st = _default_names() if job_ids is None else job_ids

    @st.composite
    def build(draw: st.DrawFn) -> JobAction:
        kind = draw(st.sampled_from(ActionKind))
        ladder = draw(ladders(min_size=1, max_size=3)) if kind in _RUNNING else Ladder()
        recycle: list[str] = []
        if kind in (ActionKind.KEEP, ActionKind.RECONFIGURE):
            recycle = draw(st.lists(_default_names(), unique=True, max_size=2))
        return JobAction(
            job_id=draw(id_st),
            kind=kind,
            ladder=ladder,
            reason=draw(st.text(max_size=20)),
            recycle=recycle,
        )

    return build()


@_lazy
def quotas(
    *,
    groups: st.SearchStrategy[str] | None = None,
    min_gpus: int = 0,
    max_gpus: int = 512,
) -> st.SearchStrategy[Quota]:
    """Quota caps with ``max_gpus`` in ``[min_gpus, max_gpus]``."""
    _int_bounds("gpus", min_gpus, max_gpus)
    group_st = _default_names() if groups is None else groups
    return st.builds(Quota, group=group_st, max_gpus=st.integers(min_gpus, max_gpus))


@_lazy
def snapshots(
    *,
    min_jobs: int = 0,
    max_jobs: int = 6,
    min_pools: int = 1,
    max_pools: int = 4,
    jobs: st.SearchStrategy[Job] | None = None,
) -> st.SearchStrategy[ClusterSnapshot]:
    """Consistent snapshots: unique ids, active ladders on the snapshot's own pools, the job's
    model and the job's accepted precisions, pool capacities that hold every active ladder,
    and quotas (for some of the jobs' quota groups) that hold what each group already runs."""
    _int_bounds("jobs", min_jobs, max_jobs)
    _int_bounds("pools", min_pools, max_pools, least=1)
    job_st = _jobs_default() if jobs is None else jobs

    @st.composite
    def build(draw: st.DrawFn) -> ClusterSnapshot:
        envs = draw(
            st.lists(
                _environments_default(),
                min_size=min_pools,
                max_size=max_pools,
                unique_by=lambda e: e.id,
            )
        )
        job_list = draw(
            st.lists(job_st, min_size=min_jobs, max_size=max_jobs, unique_by=lambda j: j.id)
        )
        active = []
        for job in job_list:
            if not draw(st.booleans()):
                continue
            # What runs is what the job's owner accepts (the host launched it under the policy).
            chain_st = chains(
                models=st.just(job.model),
                environments=st.sampled_from(envs),
                configs=configs(quants=job.precisions),
            )
            ladder = draw(
                ladders(ranks=ranks(chains=chain_st, max_replicas=4), min_size=1, max_size=2)
            )
            active.append(ActiveDeployment(job.id, ladder, since_s=draw(_floats(0.0, 1e6))))
        need: Counter[str] = Counter()
        for a in active:
            for pool_id, gpus in a.ladder.gpus_by_pool().items():
                need[pool_id] += gpus
        pool_list = []
        for env in envs:
            floor = math.ceil(need[env.id] / env.gpus_per_instance)
            pool_list.append(Pool(env, draw(st.integers(floor, floor + 16))))
        # Quotas for some of the jobs' groups, never below what the group already runs.
        group_of = {j.id: j.quota_group for j in job_list}
        held: Counter[str] = Counter()
        for a in active:
            group = group_of[a.job_id]
            if group is not None:
                held[group] += a.ladder.gpus
        groups = sorted({g for g in group_of.values() if g is not None})
        caps = [
            Quota(g, draw(st.integers(held[g], held[g] + 64)))
            for g in groups
            if draw(st.booleans())
        ]
        return ClusterSnapshot(
            time_s=draw(_floats(0.0, 1e6)),
            jobs=job_list,
            pools=pool_list,
            active=active,
            quotas=caps,
        )

    return build()


def _jobs_default() -> st.SearchStrategy[Job]:
    return jobs()


@_lazy
def plans(*, min_actions: int = 0, max_actions: int = 6) -> st.SearchStrategy[Plan]:
    """Plans with one action per distinct job id."""
    _int_bounds("actions", min_actions, max_actions)
    return st.builds(
        Plan,
        time_s=_floats(0.0, 1e6),
        actions=st.lists(
            job_actions(), min_size=min_actions, max_size=max_actions, unique_by=lambda a: a.job_id
        ).map(tuple),
    )


@_lazy
def launch_results(
    *, job_ids: st.SearchStrategy[str] | None = None
) -> st.SearchStrategy[LaunchResult]:
    """Launch results whose ``materialized`` ladder is a part of ``requested``."""
    id_st = _default_names() if job_ids is None else job_ids

    @st.composite
    def build(draw: st.DrawFn) -> LaunchResult:
        requested = draw(ladders(min_size=1, max_size=3))
        kept = []
        for rank in requested.ranks:
            up = draw(st.integers(0, rank.replicas))
            if up:
                kept.append(attrs.evolve(rank, replicas=up))
        return LaunchResult(
            job_id=draw(id_st),
            requested=requested,
            materialized=Ladder(tuple(kept)),
            message=draw(st.text(max_size=20)),
        )

    return build()

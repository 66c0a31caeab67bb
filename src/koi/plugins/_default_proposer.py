"""The built-in deterministic proposer (DESIGN §8, issue "planner" item 3).

For one job it enumerates configurations over GPU type, tensor and pipeline parallelism,
quantization and batch size inside the job's budget book, screens each with the surrogate's
closed form, sizes replicas from the required throughput (online: offered output rate at a
utilisation target; batch: remaining tokens before the deadline), places the ladder on the
cheapest pools with room, and returns a short, diverse list: the best candidate per GPU type,
the cheapest overall, a split ladder when no single pool has room, the incumbent's neighbours
(±1 replica), and a few exploration candidates in the most uncertain strata.

Performance depends on the GPU type and config, not on which pool sells the GPU, so each
(GPU type, config) is screened once and then priced per pool.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from koi.plugins._context import ProposalContext
from koi.plugins._markers import hookimpl
from koi.surrogate import Prediction, Surrogate
from koi.types import (
    Chain,
    ClusterSnapshot,
    Config,
    Environment,
    GpuSpec,
    Job,
    Ladder,
    Outcomes,
    Quant,
    Rank,
)

__all__ = ["DefaultProposer", "ProposerConfig", "SizedOption", "free_gpus"]

Uncertainty = Callable[[Chain], float]


@attrs.frozen
class ProposerConfig:
    """Search space and sizing of the default proposer."""

    tp_options: tuple[int, ...] = (1, 2, 4, 8)
    pp_options: tuple[int, ...] = (1, 2)
    batch_options: tuple[int, ...] = (64, 256)
    utilization_target: float = 0.7
    batch_deadline_margin: float = 0.8
    max_replicas: int = 64
    exploration: int = 2
    retry_headroom: float = 0.75
    memo_size: int = 4096


@attrs.frozen
class _Option:
    """One screened (GPU type, config) with its per-replica capacity."""

    shape: Environment
    config: Config
    capacity_tok_s: float

    @property
    def gpu(self) -> str:
        return self.shape.gpu


@attrs.frozen
class SizedOption:
    """A screened option sized for a job: replicas and the screen at that size."""

    option: _Option
    replicas: int
    prediction: Prediction
    meets_target: bool


def free_gpus(snapshot: ClusterSnapshot, *, except_job: str | None = None) -> dict[str, int]:
    """GPUs per pool not held by the current ladders of active jobs (but ``except_job``'s)."""
    free = {p.id: p.capacity_gpus for p in snapshot.pools}
    for a in snapshot.active:
        if a.job_id == except_job:
            continue
        for pool_id, gpus in a.ladder.gpus_by_pool().items():
            free[pool_id] = free.get(pool_id, 0) - gpus
    return free


class DefaultProposer:
    """Deterministic ladder proposals; register an instance as a koi plugin.

    ``uncertainty`` maps a chain to the mean edge uncertainty U of its stratum (1 for untested
    strata); it steers the exploration candidates.
    """

    def __init__(
        self,
        surrogate: Surrogate,
        *,
        cfg: ProposerConfig | None = None,
        uncertainty: Uncertainty | None = None,
    ) -> None:
        self.surrogate = surrogate
        self.cfg = cfg or ProposerConfig()
        self.uncertainty = uncertainty
        self._screens: dict[object, list[_Option]] = {}
        self._sized: dict[object, list[SizedOption]] = {}

    @hookimpl
    def koi_propose_ladders(self, job: Job, context: ProposalContext) -> list[Ladder]:
        snapshot = context.snapshot
        envs = self._environments(job, context)
        if not envs:
            return []
        free = free_gpus(snapshot, except_job=job.id)
        # Later rounds come back because earlier candidates were too risky or did not
        # improve: give each replica more headroom.
        headroom = self.cfg.retry_headroom**context.round
        ladders: dict[Ladder, float] = {}
        by_gpu: dict[str, list[tuple[float, Ladder]]] = defaultdict(list)
        for sized in self.sized_options(
            job,
            envs,
            context.gpus,
            now_s=snapshot.time_s,
            deadline_s=context.deadline_s,
            headroom=headroom,
        ):
            opt = sized.option
            per_replica_tok_s = max(
                sized.prediction.outcomes.throughput_tok_s / sized.replicas, 1e-9
            )
            for ladder in self._place(job, opt, sized.replicas, envs, free):
                cost = ladder.price_usd_per_h / (per_replica_tok_s * ladder.replicas)
                key = cost if sized.meets_target else cost * 1e3
                ladders.setdefault(ladder, key)
                by_gpu[opt.gpu].append((key, ladder))
        return self._shortlist(job, ladders, by_gpu, context)

    def sized_options(
        self,
        job: Job,
        envs: Sequence[Environment],
        gpus: Mapping[str, GpuSpec],
        *,
        now_s: float,
        deadline_s: float = math.inf,
        headroom: float = 1.0,
    ) -> list[SizedOption]:
        """Every useful (GPU type, config), sized for ``job`` and screened at that size.

        Memoized per (job, pools, time for batch jobs, headroom): the planner asks for the same
        job several times per tick (budget books, cost reference, proposals).
        """
        key = (job, tuple(envs), None if job.is_online else now_s, headroom)
        hit = self._sized.get(key)
        if hit is not None:
            return hit
        out: list[SizedOption] = []
        complete = True
        for opt in self._screen(job, envs, gpus, deadline_s):
            if time.monotonic() > deadline_s:
                complete = False
                break
            replicas = self._replicas(job, opt, now_s, headroom)
            sized = Ladder((Rank(Chain(job.model, opt.shape, opt.config), replicas),))
            pred = self.surrogate.screen(job, sized, now_s=now_s)
            if pred.feasible:
                out.append(SizedOption(opt, replicas, pred, _meets_target(job, pred.outcomes)))
        if complete:
            if len(self._sized) >= self.cfg.memo_size:
                self._sized.pop(next(iter(self._sized)))
            self._sized[key] = out
        return out

    # ---- search space -------------------------------------------------------------------
    def _environments(self, job: Job, context: ProposalContext) -> list[Environment]:
        """The pools inside the job's budget book (all pools when there is no usable book)."""
        budget = context.budget
        pools = context.snapshot.pools
        allowed_pools = set(getattr(budget, "pools", ()) or ())
        allowed_gpus = set(getattr(budget, "gpu_types", ()) or ())
        out = []
        for pool in pools:
            env = pool.environment
            if env.gpu not in context.gpus or pool.capacity_instances == 0:
                continue
            if allowed_pools and pool.id not in allowed_pools:
                continue
            if allowed_gpus and env.gpu not in allowed_gpus:
                continue
            out.append(env)
        if not out and (allowed_pools or allowed_gpus):
            # An empty or stale book must not starve the job: fall back to every pool.
            out = [p.environment for p in pools if p.environment.gpu in context.gpus]
        return out

    def _configs(self, gpu: GpuSpec, gpus_per_instance: int, multi_node: bool) -> Iterable[Config]:
        cfg = self.cfg
        quants = [Quant.BF16, Quant.INT4]
        if gpu.fp8_tflops is not None:
            quants.insert(1, Quant.FP8)
        for tp in cfg.tp_options:
            for pp in cfg.pp_options:
                gpus = tp * pp
                if gpus > gpus_per_instance and not multi_node:
                    continue
                if tp > gpu.gpus_per_node:
                    continue
                for quant in quants:
                    for batch in cfg.batch_options:
                        yield Config(tp=tp, pp=pp, quant=quant, max_batch_size=batch)

    def _screen(
        self,
        job: Job,
        envs: Sequence[Environment],
        gpus: Mapping[str, GpuSpec],
        deadline_s: float,
    ) -> list[_Option]:
        """Screen each (GPU type, config) once with one replica; keep the useful ones.

        Results are cached by everything they depend on, so a job is screened once per
        workload and fleet shape, not once per tick.
        """
        shapes: dict[str, Environment] = {}
        for env in envs:
            best = shapes.get(env.gpu)
            if best is None or (env.gpus_per_instance, env.multi_node) > (
                best.gpus_per_instance,
                best.multi_node,
            ):
                shapes[env.gpu] = env
        key = (job.model, job.job_class, job.workload, job.target, tuple(sorted(shapes.items())))
        cached = self._screens.get(key)
        if cached is not None:
            return cached
        options: list[_Option] = []
        for gpu_name, env in sorted(shapes.items()):
            gpu = gpus[gpu_name]
            smallest_fit: dict[tuple[int, Quant, int], _Option] = {}
            for config in self._configs(gpu, env.gpus_per_instance, env.multi_node):
                if time.monotonic() > deadline_s:
                    return options  # incomplete: not cached
                chain = Chain(job.model, env, config)
                if not self.surrogate.feasibility(chain).ok:
                    continue
                pred = self.surrogate.screen(job, Ladder((Rank(chain, 1),)))
                if not pred.feasible or not pred.ranks:
                    continue
                cap = pred.ranks[0].capacity_tok_s
                if cap <= 0:
                    continue
                opt = _Option(env, config, cap)
                # Pipeline parallelism only where tensor parallelism alone does not fit.
                fit = (config.tp, config.quant, config.max_batch_size)
                if config.pp > 1 and fit in smallest_fit:
                    continue
                smallest_fit.setdefault(fit, opt)
                options.append(opt)
        self._screens[key] = options
        return options

    # ---- sizing and placement -----------------------------------------------------------
    def _replicas(self, job: Job, opt: _Option, now_s: float, headroom: float) -> int:
        cfg = self.cfg
        if job.is_online:
            need = job.workload.offered_output_tok_s / (cfg.utilization_target * headroom)
        else:
            deadline = job.target.deadline_s or now_s
            span = max((deadline - now_s) * cfg.batch_deadline_margin, 60.0)
            need = job.remaining_requests * job.workload.output_len.mean / (span * headroom)
        return max(1, min(cfg.max_replicas, math.ceil(need / opt.capacity_tok_s)))

    def _place(
        self,
        job: Job,
        opt: _Option,
        replicas: int,
        envs: list[Environment],
        free: Mapping[str, int],
    ) -> list[Ladder]:
        """The cheapest single pool with room, and a split over the two cheapest if needed."""
        gpus_per_chain = opt.config.gpus
        pools = sorted(
            (e for e in envs if e.gpu == opt.gpu and _fits_shape(e, gpus_per_chain)),
            key=lambda e: (e.price_usd_per_gpu_h * (1 + 4 * e.preemption_per_h), e.id),
        )
        out: list[Ladder] = []
        for env in pools:
            room = free.get(env.id, 0) // gpus_per_chain
            if room >= replicas:
                out.append(Ladder((Rank(Chain(job.model, env, opt.config), replicas),)))
                break
        if not out:
            ranks: list[Rank] = []
            left = replicas
            for env in pools:
                room = free.get(env.id, 0) // gpus_per_chain
                take = min(room, left)
                if take > 0:
                    ranks.append(Rank(Chain(job.model, env, opt.config), take))
                    left -= take
                if left == 0:
                    break
            if ranks:
                out.append(Ladder(tuple(ranks)))
        return out

    # ---- short list ---------------------------------------------------------------------
    def _shortlist(
        self,
        job: Job,
        ladders: Mapping[Ladder, float],
        by_gpu: Mapping[str, list[tuple[float, Ladder]]],
        context: ProposalContext,
    ) -> list[Ladder]:
        limit = context.max_candidates
        picked: list[Ladder] = []

        def add(ladder: Ladder) -> None:
            if ladder not in picked and len(picked) < limit:
                picked.append(ladder)

        ranked = sorted(ladders.items(), key=lambda kv: kv[1])
        for ladder, _ in ranked[:2]:
            add(ladder)
        for gpu in sorted(by_gpu):
            add(min(by_gpu[gpu], key=lambda kl: kl[0])[1])
        for ladder in _neighbours(context.incumbent):
            add(ladder)
        if self.uncertainty is not None:
            explore = sorted(
                (lad for lad, key in ranked if key < 1e3 * min(ladders.values(), default=1.0)),
                key=lambda lad: -max(self.uncertainty(r.chain) for r in lad.ranks),  # type: ignore[misc]
            )
            for ladder in explore[: self.cfg.exploration]:
                add(ladder)
        for ladder, _ in ranked:
            add(ladder)
        return picked


def _neighbours(incumbent: Ladder | None) -> list[Ladder]:
    """The incumbent with one replica more or one fewer on its largest rank."""
    if incumbent is None or incumbent.is_empty:
        return []
    ranks = list(incumbent.ranks)
    i = max(range(len(ranks)), key=lambda k: ranks[k].replicas)
    out = []
    for delta in (1, -1):
        n = ranks[i].replicas + delta
        if n >= 1:
            resized = attrs.evolve(ranks[i], replicas=n)
            out.append(Ladder((*ranks[:i], resized, *ranks[i + 1 :])))
    return out


def _fits_shape(env: Environment, gpus_per_chain: int) -> bool:
    per = env.gpus_per_instance
    if gpus_per_chain <= per:
        return per % gpus_per_chain == 0
    return env.multi_node and gpus_per_chain % per == 0


def _meets_target(job: Job, outcomes: Outcomes) -> bool:
    """Latency bounds for online jobs, a non-negative deadline margin for batch jobs."""
    t = job.target
    if not job.is_online:
        return outcomes.slo_margin >= 0
    return outcomes.p99_ttft_ms <= (t.p99_ttft_ms or math.inf) and outcomes.p99_tpot_ms <= (
        t.p99_tpot_ms or math.inf
    )


def _quant_rank(q: Quant) -> int:
    return {Quant.BF16: 0, Quant.FP8: 1, Quant.INT4: 2}[q]

"""Screening: every useful (GPU type, config) for a job, sized and predicted by the closed form.

Performance depends on the GPU type and config, not on which pool sells the GPU, so each
(instance shape, config) is screened once and then priced per pool.  Both the screen and the
sizing are memoized: the planner asks for the same job several times per tick (budget books,
cost reference, proposals) and across ticks.

Sizing may be given the residual corrections in force (DESIGN §4.5.1, the callback the
planner's evaluator applies): each option's per-replica capacity and its sized screen then come
from the surrogate *with* the correction, so a stratum learned to be slower gets more replicas
and a screen verdict that agrees with the evaluator's.  Without corrections (or for a chain
whose correction is the identity) the prior's capacity is used unchanged.

Longer than most modules: the screen, the sizing and the budget books' shortcut share one set
of memos, keyed alike.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from koi.candidates._config import ProposerConfig
from koi.candidates._sizing import replicas_for
from koi.memo import Memo
from koi.surrogate import Prediction, RankCorrection, Surrogate
from koi.types import Chain, Config, Environment, GpuSpec, Job, Ladder, Outcomes, Quant, Rank

#: The residual corrections in force, per chain (the surrogate's ``corrections`` callback).
Corrections = Callable[[Chain], RankCorrection]
#: Room over the bounds below for the closed form's rounding (seen: 1e-9 of a capacity).
_SLACK = 1.0 + 1e-6

__all__ = ["Corrections", "Option", "Screener", "SizedOption", "meets_target"]


@attrs.frozen
class Option:
    """One screened (instance shape, config) with its per-replica capacity (corrected when the
    sizing was given corrections)."""

    shape: Environment
    config: Config
    capacity_tok_s: float

    @property
    def gpu(self) -> str:
        return self.shape.gpu


@attrs.frozen
class SizedOption:
    """A screened option sized for a job: replicas and the screen at that size."""

    option: Option
    replicas: int
    prediction: Prediction
    meets_target: bool


def meets_target(job: Job, outcomes: Outcomes) -> bool:
    """Latency bounds for online jobs, a non-negative deadline margin for batch jobs."""
    t = job.target
    if not job.is_online:
        return outcomes.slo_margin >= 0
    return outcomes.p99_ttft_ms <= (t.p99_ttft_ms or math.inf) and outcomes.p99_tpot_ms <= (
        t.p99_tpot_ms or math.inf
    )


class Screener:
    """Screens and sizes configurations for jobs with one surrogate; keeps the memos."""

    def __init__(self, surrogate: Surrogate, cfg: ProposerConfig | None = None) -> None:
        self.surrogate = surrogate
        self.cfg = cfg or ProposerConfig()
        # Bounded memos (koi.memo), not aged per tick: their keys are workload and instance
        # shapes that recur over many ticks, and recomputing them costs more than they hold.
        size = self.cfg.memo_size
        self._screens: Memo[object, list[Option]] = Memo(size)
        self._capacities: Memo[object, float | None] = Memo(size)
        self._sized: Memo[object, list[SizedOption]] = Memo(size)
        self._fewest: Memo[object, SizedOption | None] = Memo(size)

    def sized_options(
        self,
        job: Job,
        envs: Sequence[Environment],
        gpus: Mapping[str, GpuSpec],
        *,
        now_s: float,
        deadline_s: float = math.inf,
        headroom: float = 1.0,
        corrections: Corrections | None = None,
    ) -> list[SizedOption]:
        """Every useful (GPU type, config), sized for ``job`` and screened at that size, on the
        largest instance shape of each GPU type in ``envs``; what was sized so far when the
        monotonic ``deadline_s`` passes.

        With ``corrections`` each option is sized for its corrected capacity and screened with
        the correction (see the module docstring); without, for the prior's.  Memoized per
        (job — its shape for online jobs, :func:`sized_key` —, instance shape, time for batch
        jobs, headroom, the corrections of the shape's chains), so a correction that moves
        never reuses a stale sizing.
        """
        out: list[SizedOption] = []
        for _, shape in sorted(largest_shapes(envs).items()):
            sized = self._sized_shape(job, shape, gpus, now_s, deadline_s, headroom, corrections)
            if sized is None:
                break  # out of time: what was sized so far
            out.extend(sized)
        return out

    def cheapest_cost(
        self,
        job: Job,
        envs: Sequence[Environment],
        gpus: Mapping[str, GpuSpec],
        *,
        now_s: float,
        price_per_gpu: Mapping[str, float],
    ) -> float:
        """The least cost per Mtok among the options :meth:`sized_options` gives without
        corrections, each at ``price_per_gpu`` of its GPU type rather than its shape's price
        (``inf`` where none serves): exactly the least of their screens' costs so priced.

        An online job's options not sized before are costed by :meth:`Surrogate.screen_cost`,
        and lazily: a ladder serves at most the offered tokens (its rate bucket above them),
        so its cost is at least its price over those, and options are costed in the order of
        that bound until it passes the cheapest found.  A batch job's are sized in full.
        """
        best = math.inf

        def priced(tput: float, cost: float, opt: Option) -> float:
            shape_price = opt.shape.price_usd_per_gpu_h
            if tput <= 0 or shape_price <= 0:
                return math.inf
            return cost * price_per_gpu[opt.gpu] / shape_price

        unsized: list[tuple[Option, int]] = []
        for _, shape in sorted(largest_shapes(envs).items()):
            sized = (
                self._sized.get(sized_key(job, shape, now_s, 1.0, None))
                if job.is_online
                else self._sized_shape(job, shape, gpus, now_s, math.inf, 1.0, None)
            )
            if sized is not None:
                for s in sized:
                    out = s.prediction.outcomes
                    best = min(best, priced(out.throughput_tok_s, out.cost_per_mtok_usd, s.option))
                continue
            for opt in self._screen_shape(job, shape, gpus[shape.gpu], math.inf) or ():
                replicas = replicas_for(
                    job, opt.capacity_tok_s, now_s=now_s, headroom=1.0, cfg=self.cfg
                )
                unsized.append((opt, replicas))
        most = job.workload.offered_output_tok_s * (1.0 + self.surrogate.cfg.rate_bucket) * _SLACK
        if not unsized or most <= 0:
            return best  # serving nothing offered costs nothing finite
        bounds = sorted(
            (replicas * opt.config.gpus * price_per_gpu[opt.gpu] / 3600.0 / most * 1e6, k)
            for k, (opt, replicas) in enumerate(unsized)
        )
        for bound, k in bounds:
            if bound >= best:
                break
            opt, replicas = unsized[k]
            ladder = Ladder((Rank(Chain(job.model, opt.shape, opt.config), replicas),))
            got = self.surrogate.screen_cost(job, ladder, now_s=now_s)
            if got is not None:
                best = min(best, priced(*got, opt))
        return best

    def _sized_shape(
        self,
        job: Job,
        shape: Environment,
        gpus: Mapping[str, GpuSpec],
        now_s: float,
        deadline_s: float,
        headroom: float,
        corrections: Corrections | None,
    ) -> list[SizedOption] | None:
        prepared = self._prepare(job, shape, gpus, now_s, deadline_s, headroom, corrections)
        if prepared is None:
            return None
        options, chains, corr, key = prepared
        hit = self._sized.get(key)
        if hit is not None:
            return hit
        fn = corrections if corr is not None else None
        at_rate = canonical(job)
        out: list[SizedOption] = []
        for k, (opt, chain) in enumerate(zip(options, chains, strict=True)):
            if time.monotonic() > deadline_s:
                return None  # incomplete: not cached
            resized = self._resized(at_rate, opt, chain, None if corr is None else corr[k], fn)
            if resized is None:
                continue
            opt = resized
            replicas = replicas_for(
                job, opt.capacity_tok_s, now_s=now_s, headroom=headroom, cfg=self.cfg
            )
            sized = Ladder((Rank(chain, replicas),))
            pred = self.surrogate.screen(job, sized, now_s=now_s, corrections=fn)
            if pred.feasible:
                out.append(SizedOption(opt, replicas, pred, meets_target(job, pred.outcomes)))
        return self._sized.put(key, out)

    def _prepare(
        self,
        job: Job,
        shape: Environment,
        gpus: Mapping[str, GpuSpec],
        now_s: float,
        deadline_s: float,
        headroom: float,
        corrections: Corrections | None,
    ) -> tuple[list[Option], list[Chain], tuple[RankCorrection, ...] | None, object] | None:
        """The shape's screened options, their chains, the corrections in force on them
        (``None``: none has any) and the sizing memo's key; ``None`` when the deadline cut
        the screen short."""
        options = self._screen_shape(job, shape, gpus[shape.gpu], deadline_s)
        if options is None:
            return None
        chains = [Chain(job.model, opt.shape, opt.config) for opt in options]
        # The corrections are part of the key: the sizing is stale once one of them moves.
        corr = tuple(corrections(c) for c in chains) if corrections is not None else None
        if corr is not None and all(c.is_identity for c in corr):
            corr = None  # no evidence yet: the prior's sizing, shared with uncorrected callers
        return options, chains, corr, sized_key(job, shape, now_s, headroom, corr)

    def _resized(
        self,
        job: Job,
        opt: Option,
        chain: Chain,
        correction: RankCorrection | None,
        fn: Corrections | None,
    ) -> Option | None:
        """``opt`` at the capacity its chain's correction credits (as is without one);
        ``None`` where the corrected replica serves nothing.  ``job`` is at the canonical
        rate (:func:`canonical`)."""
        if fn is None or correction is None or correction.is_identity:
            return opt
        capacity = self._corrected_capacity(job, chain, correction, fn)
        if capacity is None:
            return None
        return attrs.evolve(opt, capacity_tok_s=capacity)

    def fewest_gpus(
        self,
        job: Job,
        envs: Sequence[Environment],
        gpus: Mapping[str, GpuSpec],
        *,
        now_s: float,
        corrections: Corrections | None = None,
    ) -> list[SizedOption]:
        """Per GPU type of ``envs`` (its largest instance shape, as :meth:`sized_options`),
        the option of :meth:`sized_options` a budget book takes: the fewest GPUs among those
        meeting ``job``'s target, the first in :meth:`sized_options`' order on a tie — the
        same option, replicas and screen, found without screening the options that need
        more GPUs than it.

        Every option's replicas (and so its GPUs) are known before its screen: options are
        screened in order of (GPUs, position) and the first that meets the target is the
        one.  A sizing :meth:`sized_options` already memoized is read instead.  Memoized
        under the same key.
        """
        out: list[SizedOption] = []
        for _, shape in sorted(largest_shapes(envs).items()):
            prepared = self._prepare(job, shape, gpus, now_s, math.inf, 1.0, corrections)
            assert prepared is not None  # no deadline
            options, chains, corr, key = prepared
            full = self._sized.get(key)
            if full is not None:
                pick = _fewest(full)
            elif key in self._fewest:
                pick = self._fewest.get(key)
            else:
                pick = self._fewest.put(
                    key, self._fewest_on(job, options, chains, corr, now_s, corrections)
                )
            if pick is not None:
                out.append(pick)
        return out

    def _fewest_on(
        self,
        job: Job,
        options: Sequence[Option],
        chains: Sequence[Chain],
        corr: tuple[RankCorrection, ...] | None,
        now_s: float,
        corrections: Corrections | None,
    ) -> SizedOption | None:
        """The first option in order of (corrected GPUs, position) that meets the target.

        A corrected capacity costs a closed form, so options are corrected lazily: a step
        correction slows every step by at least ``min(prefill_time, decode_time)``, which
        bounds the corrected capacity from above and so the GPUs from below.  An option is
        screened once no option left uncorrected can come before it."""
        fn = corrections if corr is not None else None
        at_rate = canonical(job)

        def sized(capacity: float, opt: Option) -> tuple[int, int]:  # (GPUs, replicas)
            replicas = replicas_for(job, capacity, now_s=now_s, headroom=1.0, cfg=self.cfg)
            return replicas * opt.config.gpus, replicas

        lower = []
        for k, opt in enumerate(options):
            c = None if corr is None else corr[k]
            slowest = 1.0 if c is None else min(c.prefill_time, c.decode_time)
            lower.append((sized(opt.capacity_tok_s / slowest * _SLACK, opt)[0], k))
        lower.sort()
        exact: list[tuple[int, int, Option, int]] = []  # a heap of corrected options
        nxt = 0
        while exact or nxt < len(lower):
            if exact and (nxt == len(lower) or exact[0][:2] < lower[nxt]):
                _, k, opt, replicas = heapq.heappop(exact)
                ladder = Ladder((Rank(chains[k], replicas),))
                pred = self.surrogate.screen(job, ladder, now_s=now_s, corrections=fn)
                if pred.feasible and meets_target(job, pred.outcomes):
                    return SizedOption(opt, replicas, pred, meets_target=True)
                continue
            k = lower[nxt][1]
            nxt += 1
            c = None if corr is None else corr[k]
            resized = self._resized(at_rate, options[k], chains[k], c, fn)
            if resized is not None:
                need, replicas = sized(resized.capacity_tok_s, resized)
                heapq.heappush(exact, (need, k, resized, replicas))
        return None

    def _corrected_capacity(
        self, job: Job, chain: Chain, correction: RankCorrection, corrections: Corrections
    ) -> float | None:
        """One replica's capacity with ``chain``'s correction applied, by the surrogate (the
        one place a correction is applied), for ``job`` at the screen's canonical rate
        (:func:`canonical`, which the caller applies once for all its options).

        Cached like the screen it corrects: by the workload shape, the chain and the
        correction, so a batch job's capacity is not re-derived every tick as its remaining
        work shrinks."""
        key = (job.model, job.job_class, job.workload, job.target, chain, correction)
        if key in self._capacities:
            return self._capacities.get(key)
        capacity = self.surrogate.capacity(job, chain, corrections=corrections)
        return self._capacities.put(
            key, None if capacity is not None and capacity <= 0 else capacity
        )

    def configs(self, gpu: GpuSpec, gpus_per_instance: int, multi_node: bool) -> Iterable[Config]:
        """The enumeration on one instance shape: pp = 1 before pp = 2 for each engine and tp."""
        cfg = self.cfg
        quants = [Quant.BF16, Quant.INT4]
        if gpu.fp8_tflops is not None:
            quants.insert(1, Quant.FP8)
        for engine in cfg.engine_options:
            for tp in cfg.tp_options:
                for pp in cfg.pp_options:
                    if (tp * pp > gpus_per_instance and not multi_node) or tp > gpu.gpus_per_node:
                        continue
                    for quant in quants:
                        for batch in cfg.batch_options:
                            yield Config(
                                engine=engine, tp=tp, pp=pp, quant=quant, max_batch_size=batch
                            )

    def _screen_shape(
        self, job: Job, env: Environment, gpu: GpuSpec, deadline_s: float
    ) -> list[Option] | None:
        """Screen each config on one instance shape with one replica; keep the useful ones.

        Cached by everything the result depends on, so a job is screened once per workload
        and shape, not once per tick; ``None`` when the deadline cut the screen short.
        """
        # A replica's memory fit and capacity do not depend on the offered rate: screening at
        # a canonical rate lets a drifting job (and jobs sharing a workload shape) reuse it.
        job = canonical(job)
        key = (job.model, job.job_class, job.workload, job.target, job.precisions, env)
        cached = self._screens.get(key)
        if cached is not None:
            return cached
        options: list[Option] = []
        # (engine, tp, quant, listed batch, or 0 for the cache-fit cap) -> its first option
        smallest_fit: dict[tuple[str, int, Quant, int], Option] = {}
        # The first engine's capacity per (tp, pp, quant, batch or 0): what another must beat.
        first = self.cfg.engine_options[0]
        first_caps: dict[tuple[int, int, Quant, int], float] = {}
        for listed in self.configs(gpu, env.gpus_per_instance, env.multi_node):
            if time.monotonic() > deadline_s:
                return None  # incomplete: not cached
            if not job.accepts(listed.quant):
                continue  # the owner's precision policy
            fit = (listed.engine, listed.tp, listed.quant, listed.max_batch_size)
            # Pipeline parallelism only where tensor parallelism alone does not fit (the pp=1
            # configs come first): known before screening, so not screened at all.
            if listed.pp > 1 and fit in smallest_fit:
                continue
            fe = self.surrogate.feasibility(Chain(job.model, env, listed))
            if not fe.ok:
                continue
            # One cache-fit cap per (engine, tp, pp, quant), beside its smallest listed batch.
            cap_fit = (listed.engine, listed.tp, listed.quant, 0)
            capped = None
            if listed.max_batch_size == min(self.cfg.batch_options) and not (
                listed.pp > 1 and cap_fit in smallest_fit
            ):
                capped = self._cache_fit(job, listed, fe.kv_capacity_tokens)
            batches = [(listed, fit)] if capped is None else [(listed, fit), (capped, cap_fit)]
            for config, key_fit in batches:
                # Only the capacity is read: the surrogate's, without latencies at a rate.
                cap = self.surrogate.capacity(job, Chain(job.model, env, config))
                if cap is None or cap <= 0:
                    continue
                opt = Option(env, config, cap)
                smallest_fit.setdefault(key_fit, opt)
                shape = (config.tp, config.pp, config.quant, key_fit[-1])
                if config.engine == first:
                    first_caps[shape] = cap
                elif cap < self.cfg.engine_min_gain * first_caps.get(shape, 0.0):
                    continue  # not worth a change of engine (ProposerConfig.engine_min_gain)
                options.append(opt)
        return self._screens.put(key, options)

    def _cache_fit(self, job: Job, config: Config, kv_tokens: int) -> Config | None:
        """``config`` with its batch capped to ``cache_fit_share`` of the requests its KV cache
        holds whole, for an online job a chunk-admitting engine could otherwise let in more
        than that (``ProposerConfig``); ``None`` when no cap applies.  Its memory fit is
        ``config``'s: the batch cap changes neither the weights nor the cache."""
        share = self.cfg.cache_fit_share
        w = job.workload
        chunk_admission = self.surrogate.cfg.engine_profile(config.engine).chunk_admission
        if share <= 0 or not job.is_online or not (chunk_admission and config.chunked_prefill):
            return None  # a batch job's closed loop pays a bounded recompute tax instead
        if w.input_len.max <= config.max_batched_tokens:
            return None  # every prompt is admitted whole
        cap = math.floor(share * kv_tokens / (w.input_len.mean + w.output_len.mean))
        if not 1 <= cap < min(self.cfg.batch_options):
            return None
        return attrs.evolve(config, max_batch_size=cap)


def _fewest(sized: Sequence[SizedOption]) -> SizedOption | None:
    """The first of ``sized`` with the fewest GPUs among those meeting their target."""
    best: SizedOption | None = None
    for s in sized:
        if s.meets_target and (
            best is None
            or s.replicas * s.option.config.gpus < best.replicas * best.option.config.gpus
        ):
            best = s
    return best


def sized_key(
    job: Job,
    shape: Environment,
    now_s: float,
    headroom: float,
    corr: tuple[RankCorrection, ...] | None,
) -> tuple[object, ...]:
    """The sizing memo's key: everything a sizing reads.  An online job's sizing reads its
    model, class, workload, target and precisions, not its id, so jobs of one shape (tenants'
    copies of a service) share it; a batch job's reads its progress and the clock."""
    if job.is_online:
        what: object = (job.model, job.job_class, job.workload, job.target, job.precisions)
        return (what, shape, None, headroom, corr)
    return (job, shape, now_s, headroom, corr)


def canonical(job: Job) -> Job:
    """``job`` at the canonical rate replicas are screened at (online jobs; others as is)."""
    if not job.is_online:
        return job
    return attrs.evolve(job, workload=attrs.evolve(job.workload, rate_rps=1.0))


def largest_shapes(envs: Iterable[Environment]) -> dict[str, Environment]:
    """Per GPU type, the largest instance shape on offer (the first such pool)."""
    shapes: dict[str, Environment] = {}
    for env in envs:
        best = shapes.get(env.gpu)
        if best is None or (env.gpus_per_instance, env.multi_node) > (
            best.gpus_per_instance,
            best.multi_node,
        ):
            shapes[env.gpu] = env
    return shapes

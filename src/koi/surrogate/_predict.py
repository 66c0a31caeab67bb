"""The surrogate's public API: predict a job's ladder (paper §2.3, DESIGN §9.4).

Longer than most modules: the :class:`Surrogate` facade owns its caches (screens, replays,
feasibility) and the traffic split over a ladder's ranks, and splitting those would spread one
cache policy over several files.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.memo import Memo
from koi.surrogate._analytic import (
    RankLoad,
    Saturation,
    ServingEstimate,
    backlog_over,
    estimate_closed_loop,
    estimate_open_loop,
    quantile,
    saturation,
    served_rate,
)
from koi.surrogate._config import SurrogateConfig
from koi.surrogate._correct import RankCorrection, ScaledStepCache, ScaledStepModel
from koi.surrogate._memory import Feasibility, feasibility, iteration_tokens, node_gpu
from koi.surrogate._prefix import NO_HIT, PrefixHit, cached_load, prefix_hit
from koi.surrogate._replay_adapter import replay_closed_loop, replay_horizon, replay_open_loop
from koi.surrogate._substitute import ProfileSource, select_step_model
from koi.surrogate.replay._cache import CachedStepModel
from koi.surrogate.replay._config import ReplayConfig
from koi.surrogate.replay._step import StepTimeModel
from koi.types import (
    Chain,
    Config,
    GpuSpec,
    Job,
    Ladder,
    LengthDist,
    Mediator,
    Mediators,
    ModelSpec,
    Outcome,
    Outcomes,
    Rank,
)

__all__ = ["Prediction", "RankPrediction", "Surrogate"]

#: Step-time caches shared by the replays of one step model: how many one memo generation
#: holds, and how many entries one may hold before it starts over (its values never change).
_STEP_CACHES = 512
_STEP_CACHE_ENTRIES = 50_000
#: The configuration the adapter's replay engines run with (their step caches must match it).
_ENGINE = ReplayConfig()

_INFEASIBLE_MEDIATORS = Mediators(
    kv_cache_util=0.0,
    mean_batch_size=0.0,
    queue_depth=0.0,
    mem_bw_util=0.0,
    compute_util=0.0,
    comm_share=0.0,
    bubble_fraction=0.0,
    preemption_rate=0.0,
    prefill_share=0.0,
    memory_pressure=0.0,
)


@attrs.frozen
class RankPrediction:
    """What one rank of a ladder would report under its ``traffic_share`` of the job's load."""

    rank: Rank
    outcomes: Outcomes
    mediators: Mediators
    traffic_share: float
    capacity_tok_s: float
    p50_ttft_ms: float = 0.0
    p50_tpot_ms: float = 0.0
    kv_capacity_tokens: int = 0


@attrs.frozen
class Prediction:
    """The surrogate's prediction for one job on one ladder.

    ``substituted_from`` names the profiled architecture that stood in for the job's model
    (nearest-architecture substitution), or is None.
    """

    feasible: bool
    reason: str
    outcomes: Outcomes
    mediators: Mediators
    ranks: tuple[RankPrediction, ...] = ()
    substituted_from: str | None = None


def _infeasible(reason: str, min_margin: float) -> Prediction:
    out = Outcomes(
        cost_per_mtok_usd=math.inf,
        p99_ttft_ms=math.inf,
        p99_tpot_ms=math.inf,
        throughput_tok_s=0.0,
        slo_margin=min_margin,
    )
    return Prediction(feasible=False, reason=reason, outcomes=out, mediators=_INFEASIBLE_MEDIATORS)


def _cost_per_mtok(price_usd_per_h: float, tok_s: float) -> float:
    return price_usd_per_h / 3600.0 / tok_s * 1e6 if tok_s > 0 else math.inf


def _clip(x: float) -> float:
    return min(max(x, 0.0), 1.0)


def mediators_of(est: ServingEstimate, feas: Feasibility) -> Mediators:
    """Map a serving estimate to the mediators V (shares of the busy iteration time)."""
    s = est.step
    t = s.time_s
    busy = est.busy_fraction
    return Mediators(
        kv_cache_util=_clip(est.kv_cache_util),
        mean_batch_size=max(est.mean_batch, 0.0),
        queue_depth=max(est.queue_depth, 0.0),
        mem_bw_util=_clip(busy * s.memory_s / t) if t > 0 else 0.0,
        compute_util=_clip(busy * s.compute_s / t) if t > 0 else 0.0,
        comm_share=_clip(s.comm_s / t) if t > 0 else 0.0,
        bubble_fraction=_clip(s.bubble_s / t) if t > 0 else 0.0,
        preemption_rate=max(est.preemption_rate, 0.0),
        prefill_share=_clip(est.prefill_share),
        memory_pressure=max(feas.memory_pressure, 0.0),
    )


def mixture_quantile(parts: Sequence[tuple[float, float, float]], q: float = 0.99) -> float:
    """The ``q`` quantile of a mixture of latency distributions.

    Each part is ``(weight, p50, p99)``; above its median a part's tail is taken exponential
    through its p50 and p99, ``P(T > x) = ½·exp(-(x - p50)·ln 50 / (p99 - p50))``.
    """
    live = [(w, a, b) for w, a, b in parts if w > 0]
    if not live:
        return 0.0
    if any(math.isinf(b) for _, _, b in live):
        return math.inf
    if len(live) == 1:  # one part: invert its tail in closed form
        _, p50, p99 = live[0]
        if q <= 0.5:
            return 2.0 * q * p50
        return p50 + max(p99 - p50, 1e-12) / math.log(50.0) * math.log(0.5 / (1.0 - q))
    total = sum(w for w, _, _ in live)

    def tail(x: float) -> float:
        acc = 0.0
        for w, p50, p99 in live:
            if x <= p50:
                acc += w * (1.0 - 0.5 * x / p50 if p50 > 0 else 0.5)
            else:
                scale = max(p99 - p50, 1e-12) / math.log(50.0)
                acc += w * 0.5 * math.exp(-(x - p50) / scale)
        return acc / total

    lo, hi = 0.0, max(b for _, _, b in live) * 2.0 + 1e-9
    for _ in range(60):
        mid = (lo + hi) / 2
        if tail(mid) > 1.0 - q:
            lo = mid
        else:
            hi = mid
    return hi


def _traffic_weighted(ranks: Sequence[RankPrediction]) -> Mediators:
    """The ladder's mediators: each rank's, weighted by the traffic it serves."""
    weights = [r.traffic_share for r in ranks]
    wsum = sum(weights) or 1.0
    return Mediators(
        **{
            m.value: sum(w * r.mediators.get(m) for w, r in zip(weights, ranks, strict=True)) / wsum
            for m in Mediator
        }
    )


@attrs.frozen
class _RankLoad:
    rank: Rank
    load: RankLoad
    feas: Feasibility
    corr: RankCorrection
    key: tuple[Any, ...]
    substituted: str | None = None


class Surrogate:
    """Deterministic predictions of outcomes Y and mediators V for a job on a ladder.

    Online jobs split their rate over ranks in proportion to each rank's saturation capacity
    (output tokens/s), so every rank runs at the same utilisation; batch jobs run each rank
    closed-loop at its KV-limited concurrency and share work in proportion to throughput.
    With ``cfg.use_replay`` p99s come from the replay engine; :meth:`screen` is the closed
    form.  Results are cached by everything that affects them.
    """

    def __init__(
        self,
        gpus: Mapping[str, GpuSpec],
        models: Mapping[str, ModelSpec],
        cfg: SurrogateConfig | None = None,
        *,
        profiles: ProfileSource | None = None,
    ) -> None:
        self.gpus = dict(gpus)
        self.models = dict(models)
        self.cfg = cfg or SurrogateConfig()
        self.profiles = profiles
        # Memos, aged once per planning tick (:meth:`age`): they hold what the last two ticks
        # used, so a long-running planner's memory stays flat (koi.memo).
        size = self.cfg.cache_size
        self._cache: Memo[Any, Prediction] = Memo(size)
        self._ranks: Memo[Any, ServingEstimate] = Memo(size)
        self._sats: Memo[Any, Saturation] = Memo(size)
        self._steps: Memo[Any, tuple[StepTimeModel, str | None]] = Memo(size)
        self._step_caches: Memo[Any, CachedStepModel] = Memo(_STEP_CACHES)
        self._feasible: Memo[tuple[Chain, int | None, int | None], Feasibility] = Memo(size)
        self._longest: Memo[tuple[LengthDist, LengthDist], int] = Memo(size)
        self.hits = 0
        self.misses = 0

    def age(self) -> None:
        """End a memo generation (the planner calls it once per tick): what neither this tick
        nor the one before used is forgotten, so memory follows the fleet, not the run's
        length.  Predictions never change; only the time to recompute one does."""
        for memo in (
            self._cache,
            self._ranks,
            self._sats,
            self._steps,
            self._step_caches,
            self._feasible,
            self._longest,
        ):
            memo.age()

    # ---- chains -------------------------------------------------------------------------
    def _specs(self, chain: Chain) -> tuple[GpuSpec, ModelSpec]:
        """The chain's GPU as installed in its environment (interconnect) and its model."""
        gpu = self.gpus.get(chain.environment.gpu)
        if gpu is None:
            raise InvalidInput(f"chain.environment.gpu: unknown GPU {chain.environment.gpu!r}")
        model = self.models.get(chain.model)
        if model is None:
            raise InvalidInput(f"chain.model: unknown model {chain.model!r}")
        return node_gpu(gpu, chain.environment), model

    def feasibility(
        self,
        chain: Chain,
        *,
        seq_tokens: int | None = None,
        max_request_tokens: int | None = None,
    ) -> Feasibility:
        """Constraint C2 for one chain (see :func:`koi.surrogate.feasibility`).

        Memoized: a pure function of the chain and the request sizes for this surrogate's
        catalog and constants, asked for every candidate of every tick.
        """
        key = (chain, seq_tokens, max_request_tokens)
        hit = self._feasible.get(key)
        if hit is not None:
            return hit
        gpu, model = self._specs(chain)
        hit = feasibility(
            gpu,
            model,
            chain.config,
            chain.environment,
            cfg=self.cfg,
            seq_tokens=seq_tokens,
            max_request_tokens=max_request_tokens,
        )
        return self._feasible.put(key, hit)

    def step_model(
        self, gpu: GpuSpec, model: ModelSpec, config: Config
    ) -> tuple[StepTimeModel, str | None]:
        """The step model for a chain and the architecture substituted for it, if any.

        A measured profile (``profiles``) wins where it covers (gpu, model); where it covers
        the GPU for other models, the nearest covered architecture stands in, rescaled;
        elsewhere the built-in operator model is used.
        """
        return select_step_model(
            gpu,
            model,
            config,
            profiles=self.profiles,
            candidates=self.models.values(),
            cfg=self.cfg,
        )

    # ---- prediction ---------------------------------------------------------------------
    def screen(
        self,
        job: Job,
        ladder: Ladder,
        *,
        now_s: float = 0.0,
        corrections: Callable[[Chain], RankCorrection] | None = None,
    ) -> Prediction:
        """Closed-form prediction (no replay): fast enough to screen thousands of ladders."""
        return self._cached(job, ladder, now_s, corrections, replay=False)

    def predict(
        self,
        job: Job,
        ladder: Ladder,
        *,
        now_s: float = 0.0,
        corrections: Callable[[Chain], RankCorrection] | None = None,
    ) -> Prediction:
        """Predict outcomes and mediators of ``job`` on ``ladder`` (replay p99s if enabled)."""
        return self._cached(job, ladder, now_s, corrections, replay=self.cfg.use_replay)

    def _cached(
        self,
        job: Job,
        ladder: Ladder,
        now_s: float,
        corrections: Callable[[Chain], RankCorrection] | None,
        *,
        replay: bool,
    ) -> Prediction:
        corr = tuple(
            corrections(r.chain) if corrections else RankCorrection() for r in ladder.ranks
        )
        key = self._cache_key(job, ladder, now_s, corr, replay=replay)
        hit = self._cache.get(key)
        if hit is not None:
            self.hits += 1
            return hit
        self.misses += 1
        pred = self._predict(job, ladder, now_s, corr, replay=False)
        if replay and pred.feasible and pred.outcomes.slo_margin >= self.cfg.replay_min_margin:
            # Only ladders the screen does not already rule out earn a replay.
            pred = self._predict(job, ladder, now_s, corr, replay=True)
        return self._cache.put(key, pred)

    @staticmethod
    def _cache_key(
        job: Job, ladder: Ladder, now_s: float, corr: tuple[RankCorrection, ...], *, replay: bool
    ) -> tuple[Any, ...]:
        batch_key = (now_s, job.remaining_requests) if not job.is_online else None
        return (job.model, job.job_class, job.workload, job.target, batch_key, ladder, corr, replay)

    def capacity(
        self,
        job: Job,
        chain: Chain,
        *,
        corrections: Callable[[Chain], RankCorrection] | None = None,
    ) -> float | None:
        """One replica's capacity (output tokens/s) of ``chain`` for ``job``: exactly the
        ``capacity_tok_s`` of :meth:`screen` on a one-replica ladder, ``None`` where that
        screen is infeasible.

        A rank's capacity is its saturation, which depends neither on the offered rate nor on
        a batch job's concurrency: it is computed without the latencies at that rate or
        concurrency (most of a screen's cost), at the prefix hits the screen would take.
        """
        ladder = Ladder((Rank(chain, 1),))
        corr = (corrections(chain) if corrections else RankCorrection(),)
        loads = self._loads(job, ladder, corr)
        if isinstance(loads, Prediction):
            return None
        (r,) = loads  # the capacity _online or _batch gives this one-rank ladder
        if job.is_online:
            sat_load, sat_key = self._with_hit(r, self._saturated_hit(job, r))
        else:
            sat_load, sat_key, _, _ = self._closed_load(job, r)
        return self._saturation(sat_key, sat_load)[1] * r.rank.replicas

    def screen_cost(
        self, job: Job, ladder: Ladder, *, now_s: float = 0.0
    ) -> tuple[float, float] | None:
        """``(throughput_tok_s, cost_per_mtok_usd)`` of :meth:`screen`'s outcomes without
        corrections, exactly, or ``None`` where that screen is infeasible.

        Below saturation an online rank serves its share of the offered traffic and above it
        its saturation capacity, so neither needs the latencies at the rate (the closed form's
        bisection, most of a screen); only a rank with prefix hits still estimates its batch
        (the hits depend on it).  A screen already made is read instead.  Batch jobs take the
        screen.
        """
        corr = tuple(RankCorrection() for _ in ladder.ranks)
        screened = self._cache_key(job, ladder, now_s, corr, replay=False) in self._cache
        if screened or not job.is_online:
            pred = self.screen(job, ladder, now_s=now_s)
            out = pred.outcomes
            return (out.throughput_tok_s, out.cost_per_mtok_usd) if pred.feasible else None
        loads = self._loads(job, ladder, corr)
        if isinstance(loads, Prediction):
            return None
        served: list[float] = []
        self._online(job, loads, replay=False, served=served)
        # _rank_prediction's and _combine's arithmetic.
        tput = sum(
            tok * r.rank.replicas * r.corr.outcome(Outcome.THROUGHPUT)
            for r, tok in zip(loads, served, strict=True)
        )
        price = sum(r.rank.price_usd_per_h for r in loads)
        return tput, _cost_per_mtok(price, tput)

    def _predict(
        self,
        job: Job,
        ladder: Ladder,
        now_s: float,
        corr: tuple[RankCorrection, ...],
        *,
        replay: bool,
    ) -> Prediction:
        loads = self._loads(job, ladder, corr)
        if isinstance(loads, Prediction):
            return loads
        substituted: str | None = None
        for r in loads:
            substituted = substituted or r.substituted
        if job.is_online:
            ranks = self._online(job, loads, replay=replay)
        else:
            ranks = self._batch(job, loads, replay=replay)
        return self._combine(job, ranks, now_s, substituted)

    def _loads(
        self, job: Job, ladder: Ladder, corr: tuple[RankCorrection, ...]
    ) -> list[_RankLoad] | Prediction:
        """Each rank's load and memo keys, or the infeasible prediction (C2) of the ladder."""
        cfg = self.cfg
        if ladder.is_empty:
            return _infeasible("empty ladder", cfg.min_slo_margin)
        w = job.workload
        seq = max(int(w.input_len.mean + w.output_len.mean), 1)
        longest = self._longest_request(w.input_len, w.output_len)
        loads: list[_RankLoad] = []
        for rank, c in zip(ladder.ranks, corr, strict=True):
            if rank.chain.model != job.model:
                msg = f"ladder: rank runs {rank.chain.model!r}, job {job.id!r} needs {job.model!r}"
                raise InvalidInput(msg)
            feas = self.feasibility(rank.chain, seq_tokens=seq, max_request_tokens=longest)
            if not feas.ok:
                return _infeasible(
                    f"{rank.chain.environment.id}: {feas.reason}", cfg.min_slo_margin
                )
            gpu, model = self._specs(rank.chain)
            base, sub = self._step_model_cached(gpu, model, rank.chain.config)
            step: StepTimeModel = base
            if c.prefill_time != 1.0 or c.decode_time != 1.0:
                step = ScaledStepModel(base, prefill=c.prefill_time, decode=c.decode_time)
            cf = rank.chain.config
            load = rank_load(
                step, feas.kv_capacity_tokens, cf, longest, w.input_len, w.output_len, cfg
            )
            # Everything a per-replica estimate depends on (the step model is a function of
            # gpu, model, config and the step corrections).
            key = (
                gpu.name,
                model.name,
                cf,
                feas.kv_capacity_tokens,
                w.input_len,
                w.output_len,
                c.prefill_time,
                c.decode_time,
            )
            loads.append(_RankLoad(rank, load, feas, c, key, sub))
        return loads

    def _longest_request(self, input_len: LengthDist, output_len: LengthDist) -> int:
        """:func:`longest_request`, memoized (its 99.9th percentiles are bisections, and every
        prediction asks for its workload's)."""
        key = (input_len, output_len)
        hit = self._longest.get(key)
        if hit is None:
            hit = self._longest.put(key, longest_request(input_len, output_len))
        return hit

    def _step_model_cached(
        self, gpu: GpuSpec, model: ModelSpec, config: Config
    ) -> tuple[StepTimeModel, str | None]:
        key = (gpu.name, model.name, config)
        hit = self._steps.get(key)
        if hit is None:
            hit = self._steps.put(key, self.step_model(gpu, model, config))
        return hit

    def _step_cache(self, r: _RankLoad) -> CachedStepModel | ScaledStepCache | None:
        """One step-time cache per uncorrected step model for all its replays, whatever the
        correction: a corrected rank's replay reads it through the correction
        (:class:`ScaledStepCache`).

        A replay engine otherwise builds a fresh :class:`CachedStepModel` over the rank's step
        model and probes the model again for every node; the cache is a deterministic
        function of the (deterministic) step model and the engine's resolution, so sharing it
        returns the same step times.
        """
        rc = _ENGINE
        if not rc.cache_step_times:
            return None
        step = r.load.step_model
        base = step.base if isinstance(step, ScaledStepModel) else step
        key = r.key[:3]  # (GPU, model, config): the uncorrected step model
        cache = self._step_caches.get(key)
        if cache is None or cache.footprint > _STEP_CACHE_ENTRIES:
            cache = self._step_caches.put(
                key,
                CachedStepModel(
                    base,
                    resolution=rc.step_resolution,
                    floor_tokens=rc.step_floor_tokens,
                    affine=rc.step_affine,
                ),
            )
        if not isinstance(step, ScaledStepModel):
            return cache
        return ScaledStepCache(cache, prefill=step.prefill, decode=step.decode)

    def _saturation(self, key: Any, load: RankLoad) -> Saturation:
        """``saturation(load)``, memoized by ``key`` (everything ``load`` is made of): every
        estimate of one load at another rate or concurrency starts from it."""
        hit = self._sats.get(key)
        if hit is None:
            hit = self._sats.put(key, saturation(load))
        return hit

    def _memo(self, key: Any, fn: Callable[[], ServingEstimate]) -> ServingEstimate:
        hit = self._ranks.get(key)
        if hit is None:
            hit = self._ranks.put(key, fn())
        return hit

    def _bucket(self, rate: float) -> float:
        """Snap a per-replica rate to the log grid of step ``cfg.rate_bucket``."""
        step = self.cfg.rate_bucket
        if step <= 0 or rate <= 0:
            return rate
        g = math.log1p(step)
        return math.exp(round(math.log(rate) / g) * g)

    def _hit(self, job: Job, r: _RankLoad, running: float) -> PrefixHit:
        """The rank's expected prefix-cache hits with ``running`` requests per replica."""
        w = job.workload
        if w.shared_prefix_tokens < self.cfg.prefix_block_tokens:
            return NO_HIT
        return prefix_hit(
            w,
            replicas=r.rank.replicas,
            routing=r.rank.chain.config.routing,
            kv_capacity_tokens=r.load.kv_capacity_tokens,
            running=running,
            block_tokens=self.cfg.prefix_block_tokens,
            correction=r.corr.mediator(Mediator.PREFIX_HIT_RATE),
        )

    def _with_hit(self, r: _RankLoad, hit: PrefixHit) -> tuple[RankLoad, tuple[Any, ...]]:
        """The rank's load under ``hit`` and its memo key."""
        if hit is NO_HIT:
            return r.load, r.key
        load = cached_load(r.load, hit)
        return load, (*r.key, load.input_len, load.kv_capacity_tokens)

    def _saturated_hit(self, job: Job, r: _RankLoad) -> PrefixHit:
        """Hits at saturation: the batch as large as the cache or the batch cap allows."""
        w = job.workload
        shared = min(w.shared_prefix_tokens, w.input_len.mean - 1.0)
        per_request = w.input_len.mean - shared + w.output_len.mean / 2.0
        full = min(r.load.max_batch_size, r.load.kv_capacity_tokens / max(per_request, 1.0))
        return self._hit(job, r, full)

    def _online(
        self,
        job: Job,
        loads: list[_RankLoad],
        *,
        replay: bool,
        served: list[float] | None = None,
    ) -> list[RankPrediction]:
        """Each rank's prediction; with ``served`` (a list to fill) only the output tokens per
        second each rank's replica serves in that prediction, appended to it, and no
        predictions (see :meth:`screen_cost`)."""
        cfg, w = self.cfg, job.workload
        rate = w.rate_rps or 0.0
        caps = []
        for r in loads:
            sat_load, sat_key = self._with_hit(r, self._saturated_hit(job, r))
            caps.append(self._saturation(sat_key, sat_load)[1] * r.rank.replicas)
        total = sum(caps)
        out: list[RankPrediction] = []
        for r, cap in zip(loads, caps, strict=True):
            share = cap / total if total > 0 else 1.0 / len(loads)
            per_replica = self._bucket(rate * share / r.rank.replicas)
            routing = r.rank.chain.config.routing
            hit = self._hit(job, r, 0.0)
            if hit is not NO_HIT:
                # The batch decides how much KV is left for cached prefixes: one screen with
                # an empty batch's hits, then the hits of the batch it predicts.
                load0, key0 = self._with_hit(r, hit)
                first = self._memo(
                    (key0, "open-screen", per_replica),
                    partial(
                        estimate_open_loop,
                        load0,
                        per_replica,
                        cfg.replay_horizon_s,
                        sat=self._saturation(key0, load0),
                    ),
                )
                hit = self._hit(job, r, first.mean_batch)
            load, rkey = self._with_hit(r, hit)
            key: tuple[Any, ...]
            m = min(r.rank.replicas, cfg.replay_max_replicas)  # replicas a replay runs
            # Past saturation the p99 TTFT is the queue's age after a horizon, the one a replay
            # of the job's whole traffic runs: the same for every rank and ladder of the job, so
            # that more capacity means a younger backlog (with the horizon of the ``m``
            # replicas replayed, a smaller ladder was predicted a shorter wait, and hopeless
            # jobs were shrunk).
            horizon = replay_horizon(rate, cfg)
            if replay:
                key = (rkey, "open", m, routing, per_replica, w.arrival, w.gamma_cv)
                run = partial(
                    replay_open_loop,
                    load,
                    routing,
                    m,
                    per_replica * m,
                    cfg,
                    arrival=w.arrival,
                    gamma_cv=w.gamma_cv,
                    step_cache=self._step_cache(r),
                    sat=self._saturation(rkey, load),
                )
            else:
                key = (rkey, "open-screen", per_replica, horizon)
                run = partial(
                    estimate_open_loop, load, per_replica, horizon, sat=self._saturation(rkey, load)
                )
            if served is not None:
                # A memoized estimate's throughput, or the same arithmetic without latencies.
                known = self._ranks.get(key)
                util, tok = (
                    (known.utilization, known.throughput_tok_s)
                    if known is not None
                    else served_rate(load, per_replica, self._saturation(rkey, load))
                )
                exact = rate * share / r.rank.replicas * w.output_len.mean
                served.append(exact if util < 0.9 else tok)
                continue
            est = self._memo(key, run)
            if replay:  # the replay ran the horizon of its ``m`` replicas' traffic
                ran = replay_horizon(per_replica * m, cfg)
                est = backlog_over(est, per_replica * w.output_len.mean, ran, horizon)
            if est.utilization < 0.9:
                # The bucketed rate only shapes the latencies; below saturation the served
                # throughput is exactly the rank's share of the offered tokens.
                exact = rate * share / r.rank.replicas * w.output_len.mean
                est = attrs.evolve(est, throughput_tok_s=exact)
            out.append(self._rank_prediction(job, r.rank, est, r.feas, r.corr, share, cap, hit))
        return out

    def _closed_load(
        self, job: Job, r: _RankLoad
    ) -> tuple[RankLoad, tuple[Any, ...], int, PrefixHit]:
        """A batch rank's load at the prefix hits of its concurrency, its memo key, the
        concurrency of its replica (more requests fit once a cached prefix shortens their
        private KV) and those hits."""
        conc = max(r.feas.max_seqs, 1)
        hit = self._hit(job, r, conc)
        load, rkey = self._with_hit(r, hit)
        if hit is not NO_HIT:
            per_request = load.input_len.mean + load.output_len.mean
            fits = int(load.kv_capacity_tokens / max(per_request, 1.0))
            conc = max(conc, min(load.max_batch_size, fits))
        return load, rkey, conc, hit

    def _batch(self, job: Job, loads: list[_RankLoad], *, replay: bool) -> list[RankPrediction]:
        cfg = self.cfg
        ests: list[ServingEstimate] = []
        hits: list[PrefixHit] = []
        for r in loads:
            load, rkey, conc, hit = self._closed_load(job, r)
            key: tuple[Any, ...]
            if replay:
                m = min(r.rank.replicas, cfg.replay_max_replicas)
                routing = r.rank.chain.config.routing
                key = (rkey, "closed", m, routing, conc)
                cache, sat = self._step_cache(r), self._saturation(rkey, load)
                run = partial(
                    replay_closed_loop, load, routing, m, conc * m, cfg, step_cache=cache, sat=sat
                )
            else:
                key = (rkey, "closed-screen", conc)
                run = partial(estimate_closed_loop, load, conc, sat=self._saturation(rkey, load))
            ests.append(self._memo(key, run))
            hits.append(hit)
        total = sum(e.throughput_tok_s * r.rank.replicas for e, r in zip(ests, loads, strict=True))
        out: list[RankPrediction] = []
        for est, r, hit in zip(ests, loads, hits, strict=True):
            tput = est.throughput_tok_s * r.rank.replicas
            share = tput / total if total > 0 else 0.0
            cap = est.capacity_tok_s * r.rank.replicas
            out.append(self._rank_prediction(job, r.rank, est, r.feas, r.corr, share, cap, hit))
        return out

    def _rank_prediction(
        self,
        job: Job,
        rank: Rank,
        est: ServingEstimate,
        feas: Feasibility,
        c: RankCorrection,
        share: float,
        cap: float,
        hit: PrefixHit = NO_HIT,
    ) -> RankPrediction:
        replicas = rank.replicas
        ttft = est.p99_ttft_ms * c.outcome(Outcome.TTFT)
        tpot = est.p99_tpot_ms * c.outcome(Outcome.TPOT)
        tput = est.throughput_tok_s * replicas * c.outcome(Outcome.THROUGHPUT)
        cost = _cost_per_mtok(rank.price_usd_per_h, tput) * c.outcome(Outcome.COST)
        margin = self._online_margin(job, ttft, tpot) if job.is_online else 0.0
        outcomes = Outcomes(
            cost_per_mtok_usd=cost,
            p99_ttft_ms=ttft,
            p99_tpot_ms=tpot,
            throughput_tok_s=tput,
            slo_margin=margin,
        )
        med = attrs.evolve(mediators_of(est, feas), prefix_hit_rate=hit.rate)
        if c.mediators:
            values = {m: med.get(m) * c.mediator(m) for m in Mediator}
            # The hit rate's correction already acted on the hits themselves (see _hit).
            values[Mediator.PREFIX_HIT_RATE] = hit.rate
            for m in (
                Mediator.KV_CACHE_UTIL,
                Mediator.MEM_BW_UTIL,
                Mediator.COMPUTE_UTIL,
                Mediator.COMM_SHARE,
                Mediator.BUBBLE_FRACTION,
                Mediator.PREFILL_SHARE,
            ):
                values[m] = _clip(values[m])
            med = Mediators(**{m.value: v for m, v in values.items()})
        return RankPrediction(
            rank=rank,
            outcomes=outcomes,
            mediators=med,
            traffic_share=share,
            capacity_tok_s=cap,
            p50_ttft_ms=est.p50_ttft_ms * c.outcome(Outcome.TTFT),
            p50_tpot_ms=est.p50_tpot_ms * c.outcome(Outcome.TPOT),
            kv_capacity_tokens=feas.kv_capacity_tokens,
        )

    def _online_margin(self, job: Job, ttft: float, tpot: float) -> float:
        t = job.target
        gaps = []
        if t.p99_ttft_ms is not None:
            gaps.append((t.p99_ttft_ms - ttft) / t.p99_ttft_ms)
        if t.p99_tpot_ms is not None:
            gaps.append((t.p99_tpot_ms - tpot) / t.p99_tpot_ms)
        m = min(gaps) if gaps else 0.0
        return max(m, self.cfg.min_slo_margin) if math.isfinite(m) else self.cfg.min_slo_margin

    def _combine(
        self, job: Job, ranks: list[RankPrediction], now_s: float, substituted: str | None
    ) -> Prediction:
        live = [r for r in ranks if r.traffic_share > 0] or ranks
        ttft = mixture_quantile(
            [(r.traffic_share, r.p50_ttft_ms, r.outcomes.p99_ttft_ms) for r in live]
        )
        tpot = mixture_quantile(
            [(r.traffic_share, r.p50_tpot_ms, r.outcomes.p99_tpot_ms) for r in live]
        )
        tput = sum(r.outcomes.throughput_tok_s for r in ranks)
        price = sum(r.rank.price_usd_per_h for r in ranks)
        if job.is_online:
            margin = self._online_margin(job, ttft, tpot)
        else:
            margin = self._batch_margin(job, tput, now_s)
            ranks = [
                attrs.evolve(r, outcomes=attrs.evolve(r.outcomes, slo_margin=margin)) for r in ranks
            ]
        outcomes = Outcomes(
            cost_per_mtok_usd=_cost_per_mtok(price, tput),
            p99_ttft_ms=ttft,
            p99_tpot_ms=tpot,
            throughput_tok_s=tput,
            slo_margin=margin,
        )
        one = len(ranks) == 1 and ranks[0].traffic_share > 0
        med = ranks[0].mediators if one else _traffic_weighted(ranks)
        return Prediction(
            feasible=True,
            reason="",
            outcomes=outcomes,
            mediators=med,
            ranks=tuple(ranks),
            substituted_from=substituted,
        )

    def _batch_margin(self, job: Job, tok_s: float, now_s: float) -> float:
        """Relative deadline headroom: ``(deadline - finish) / (deadline - now)``."""
        deadline = job.target.deadline_s or 0.0
        remaining_tok = job.remaining_requests * job.workload.output_len.mean
        if tok_s <= 0:
            return self.cfg.min_slo_margin
        finish = now_s + remaining_tok / tok_s
        span = max(deadline - now_s, 1.0)
        return min(max((deadline - finish) / span, self.cfg.min_slo_margin), 1.0)


def longest_request(input_len: LengthDist, output_len: LengthDist) -> int:
    """The longest request (prompt + output tokens) a workload sends, for the engine's maximum
    model length: each length's ``max``, or its 99.9th percentile when that is lower."""
    return int(
        math.ceil(min(input_len.max, quantile(input_len, 0.999)))
        + math.ceil(min(output_len.max, quantile(output_len, 0.999)))
    )


def rank_load(
    step: StepTimeModel,
    kv_capacity_tokens: int,
    config: Config,
    longest: int,
    input_len: LengthDist,
    output_len: LengthDist,
    cfg: SurrogateConfig,
) -> RankLoad:
    """What one replica of ``config`` serves, with its engine's scheduling policies."""
    engine = cfg.engine_profile(config.engine)
    return RankLoad(
        step,
        kv_capacity_tokens,
        config.max_batch_size,
        iteration_tokens(config, longest),
        input_len,
        output_len,
        cfg.closed_loop_sync_weight,
        engine.mixed_prefill,
        engine.chunk_admission,
        float(cfg.collapse_requests),
        cfg.collapse_dispersion,
    )


def workload_lengths(isl: int, osl: int) -> tuple[LengthDist, LengthDist]:
    """Fixed-length distributions (what benchmark tools use with ``--ignore-eos``)."""
    return LengthDist(mean=float(isl), cv=0.0, max=isl), LengthDist(
        mean=float(osl), cv=0.0, max=osl
    )

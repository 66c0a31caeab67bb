"""The simulated fleet's state and dynamics (DESIGN §10.1).

A :class:`World` holds the pools, the jobs, their deployments and the hidden truth.  Each tick
the runner asks it for a snapshot, hands the policy's plan to :meth:`World.apply` (the safety
checks every policy gets), and calls :meth:`World.serve` to simulate the window that follows.

Longer than most modules: the safety checks, deployments, preemptions and events all mutate
the same world state, and keeping their order in one place is what makes a run reproducible.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

import attrs
import numpy as np

from koi.errors import InvalidInput
from koi.sim._capacity import capacity_at_limits, reference_cost_per_token, replica_capacity
from koi.sim._config import SimConfig
from koi.sim._deploy import Deployment, Replica
from koi.sim._measured import MeasuredTruth
from koi.sim._scenario import Event, EventKind, Scenario, check_names
from koi.sim._serve import Serving
from koi.sim._state import JobState
from koi.sim._trace import BatchRecord
from koi.sim._truth import PriorFactory, ReplicaLimits, TruthModel, event_rng, stable_seed
from koi.surrogate import Feasibility, SurrogateConfig, feasibility
from koi.surrogate.replay import (
    CachedStepModel,
    ReplicaSpec,
)
from koi.types import (
    ActionKind,
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    GpuSpec,
    Job,
    Ladder,
    LaunchResult,
    LengthDist,
    Market,
    ModelSpec,
    Plan,
    Pool,
    Rank,
    WorkloadProfile,
)

__all__ = ["ApplyResult", "World", "reference_truth"]


def reference_truth(world: World) -> TruthModel | MeasuredTruth:
    """A fresh copy of ``world``'s hidden truth (same seed, same kind, same pools), for
    reference planners only (the oracles); its driver updates start from scratch.  A
    competing policy must never use it."""
    return world._fresh_truth()


@attrs.frozen
class ApplyResult:
    """What applying a plan did: launches, rejected actions with reasons, action counts, and
    the slow replicas it replaced (one note per job)."""

    launches: tuple[LaunchResult, ...]
    rejected: tuple[str, ...]
    swaps: int
    keeps: int
    places: int
    stops: int
    recycled: tuple[str, ...] = ()


def _same_ladder(a: Ladder, b: Ladder) -> bool:
    return _want(a) == _want(b)


def _want(ladder: Ladder) -> Counter[Chain]:
    want: Counter[Chain] = Counter()
    for r in ladder.ranks:
        want[r.chain] += r.replicas
    return want


class World(Serving):
    """The simulated fleet: pools, jobs, deployments, events and the hidden truth.

    Deterministic given ``(scenario, seed)`` and the sequence of plans applied: every random
    draw comes from a generator seeded by the seed and a label (job traffic, launch outcomes,
    hazards), so two policies face the same arrivals and the same hardware.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        seed: int,
        gpus: Mapping[str, GpuSpec],
        models: Mapping[str, ModelSpec],
        pools: Sequence[Pool],
        cfg: SimConfig | None = None,
        prior: PriorFactory | None = None,
    ) -> None:
        self.scenario = scenario
        self.seed = seed
        self.cfg = cfg or SimConfig()
        self.gpus = dict(gpus)
        self.models = dict(models)
        check_names(scenario, pools, self.gpus, self.models)
        self._truth: TruthModel | MeasuredTruth
        if scenario.world == "synthetic" or prior is not None:
            self._truth = TruthModel(seed, self.cfg.truth, prior=prior)
        else:
            self._truth = MeasuredTruth(seed, self.cfg.hardware, self.cfg.truth, pools=pools)
        self._pools = {p.id: p for p in pools}
        self._capacity = {p.id: p.capacity_instances for p in pools}
        self._recoveries: list[tuple[float, str, int]] = []
        self._jobs = {
            j.id: JobState(
                job=j,
                actual=j.workload,
                rng=np.random.default_rng([seed, stable_seed("traffic", j.id)]),
                unissued=float(j.workload.total_requests or 0),
            )
            for j in scenario.jobs
        }
        self._events = sorted(scenario.events, key=lambda e: e.at_s)
        self._next_event = 0
        self._specs: dict[tuple[object, ...], ReplicaSpec | None] = {}
        self._generation: Counter[str] = Counter()
        self._feas: dict[tuple[str, str, object], Feasibility] = {}
        self._capacities: dict[tuple[Chain, int, float, float], float] = {}
        self._surrogate_cfg = SurrogateConfig()  # feasibility's default, built once
        self._hazard: Counter[str] = Counter()
        self._pending_preemptions: Counter[str] = Counter()
        self._launched = 0  # replicas launched so far: each is named by its number
        self.now = 0.0
        self.tick = 0
        self.reference_cost_per_token_usd = reference_cost_per_token(
            scenario.jobs,
            pools,
            self.gpus,
            self.models,
            self.true_capacity,
            duration_s=scenario.duration_s,
        )

    def _fresh_truth(self) -> TruthModel | MeasuredTruth:
        if isinstance(self._truth, MeasuredTruth):
            return MeasuredTruth(
                self.seed, self.cfg.hardware, self.cfg.truth, pools=tuple(self._pools.values())
            )
        return TruthModel(self.seed, self.cfg.truth)

    # -- truth plumbing ---------------------------------------------------------------------

    def true_capacity(self, chain: Chain, workload: WorkloadProfile) -> float:
        """Saturated output tokens/s of one replica of ``chain`` under the truth (0 if it
        cannot start): what the world routes by, and what reference planners and diagnostics
        (``benchmarks/capacity_bound.py``) may read; never given to a planner under test.

        Memoised per chain, GPU generation (driver updates change the truth) and the two
        workload means :func:`replica_capacity` reads: jobs of one model with different rates
        or length spreads share the answer."""
        w_in, w_out = workload.input_len.mean, workload.output_len.mean
        key = (chain, self._generation[chain.environment.gpu], w_in, w_out)
        hit = self._capacities.get(key)
        if hit is None:
            hit = self._capacities[key] = self._capacity_of(chain, workload)
        return hit

    def true_workload(self, job_id: str) -> WorkloadProfile:
        """``job_id``'s workload as the world serves it now (after any drift): truth, for
        reference planners and diagnostics only, like :meth:`true_capacity`."""
        state = self._jobs.get(job_id)
        if state is None:
            raise InvalidInput(f"job_id: unknown job {job_id!r}")
        return state.actual

    def _capacity_of(self, chain: Chain, workload: WorkloadProfile) -> float:
        limits = self._limits(chain)
        if limits is None:
            return 0.0
        gpu, model = self.gpus[chain.environment.gpu], self.models[chain.model]
        step = self._truth.step_model(gpu, model, chain.config, environment=chain.environment)
        _, tok_s = capacity_at_limits(
            step,
            limits.kv_capacity_tokens,
            limits.max_batch_size,
            limits.max_batched_tokens,
            workload,
        )
        return tok_s

    @staticmethod
    def _true_config(chain: Chain, spec: ReplicaSpec) -> Config:
        """The chain's config with the scheduler limits its engine really runs with."""
        return attrs.evolve(
            chain.config,
            max_batch_size=spec.max_batch_size,
            max_batched_tokens=spec.max_batched_tokens,
        )

    def _feasibility(self, chain: Chain) -> Feasibility:
        key = (chain.model, chain.environment.id, chain.config)
        fe = self._feas.get(key)
        if fe is None:
            gpu = self.gpus[chain.environment.gpu]
            model = self.models[chain.model]
            fe = self._feas[key] = feasibility(
                gpu, model, chain.config, chain.environment, cfg=self._surrogate_cfg
            )
        return fe

    def _limits(self, chain: Chain) -> ReplicaLimits | None:
        gpu, model = self.gpus[chain.environment.gpu], self.models[chain.model]
        return self._truth.limits(gpu, model, chain.config, chain.environment)

    def _spec(self, chain: Chain, slow: float) -> ReplicaSpec | None:
        """The replica spec of ``chain`` under the truth (``None``: its engine cannot start);
        shared so replicas share a step cache."""
        env = chain.environment
        gpu_name = env.gpu
        key = (
            chain.model,
            gpu_name,
            env.cloud,
            env.instance_type,
            chain.config,
            slow,
            self._generation[gpu_name],
        )
        if key in self._specs:
            return self._specs[key]
        limits = self._limits(chain)
        spec = None
        if limits is not None:
            gpu, model = self.gpus[gpu_name], self.models[chain.model]
            step = self._truth.step_model(gpu, model, chain.config, slow=slow, environment=env)
            spec = ReplicaSpec(
                step_model=CachedStepModel(
                    step, resolution=self.cfg.sampling.step_cache_resolution
                ),
                kv_capacity_tokens=max(limits.kv_capacity_tokens, 1),
                max_batch_size=limits.max_batch_size,
                max_batched_tokens=limits.max_batched_tokens,
                mixed_prefill=limits.mixed_prefill,
                chunk_admission=limits.chunk_admission,
                preempt_stall_s=limits.preempt_stall_s,
                preempt_stall_s_per_token=limits.preempt_stall_s_per_token,
                prefix_cache=True,  # vLLM and SGLang cache shared prefixes by default
            )
        self._specs[key] = spec
        return spec

    def _started_spec(self, chain: Chain, slow: float) -> ReplicaSpec:
        """The spec of a replica that materialized (so its engine could start)."""
        spec = self._spec(chain, slow)
        assert spec is not None, "a replica that cannot start never materializes"
        return spec

    # -- what a planner sees ----------------------------------------------------------------

    def _visible(self) -> list[JobState]:
        return [s for s in self._jobs.values() if s.job.arrival_s <= self.now and s.done_s is None]

    def _draining(self) -> Counter[str]:
        """GPUs held per pool by replaced chains that still drain (make-before-break)."""
        use: Counter[str] = Counter()
        for s in self._jobs.values():
            for d in s.outgoing:
                use[d.chain.environment.id] += len(d.held) * d.chain.gpus
        return use

    def pools(self) -> tuple[Pool, ...]:
        """Pools as a planner may use them: announced preemptions and the instances that
        draining chains still hold are deducted from the capacity."""
        shown, draining = self._usage(shown=True), self._draining()
        out = []
        for pid, p in self._pools.items():
            gpi = p.environment.gpus_per_instance
            extra = math.ceil((shown[pid] + draining[pid]) / gpi) - math.ceil(shown[pid] / gpi)
            out.append(attrs.evolve(p, capacity_instances=max(0, self._capacity[pid] - extra)))
        return tuple(out)

    def snapshot(self) -> ClusterSnapshot:
        """The fleet as a host would report it at :attr:`now`."""
        jobs, active = [], []
        for s in self._visible():
            jobs.append(s.job)
            ladder = s.ladder()
            if not ladder.is_empty:
                active.append(ActiveDeployment(s.job.id, ladder, since_s=s.since_s))
        return ClusterSnapshot(self.now, jobs, self.pools(), active)

    def deployed_ranks(self) -> tuple[tuple[str, Rank], ...]:
        """(job id, rank) of every rank in the current ladders."""
        return tuple((s.job.id, r) for s in self._visible() for r in s.ladder().ranks)

    # -- capacity ---------------------------------------------------------------------------

    def _usage(self, *, shown: bool) -> Counter[str]:
        """GPUs in use per pool: shown replicas only, or everything that holds capacity."""
        use: Counter[str] = Counter()
        for s in self._jobs.values():
            for d in s.deployments + s.outgoing:
                n = d.shown if shown else len(d.held)
                if shown and d.outgoing:
                    continue
                use[d.chain.environment.id] += n * d.chain.gpus
        return use

    def _fits(self, use: Mapping[str, int], pool_ids: object) -> str | None:
        for pid in pool_ids:  # type: ignore[attr-defined]
            gpi = self._pools[pid].environment.gpus_per_instance
            need = math.ceil(use.get(pid, 0) / gpi)
            if need > self._capacity[pid]:
                return f"pool {pid} needs {need} instances > capacity {self._capacity[pid]}"
        return None

    def cost_and_gpus(self, span_s: float) -> tuple[float, dict[str, int]]:
        """Cost of the held fleet over ``span_s`` (whole instances) and GPUs held per type."""
        use = self._usage(shown=False)
        cost = 0.0
        by_type: Counter[str] = Counter()
        for pid, gpus in use.items():
            env = self._pools[pid].environment
            cost += math.ceil(gpus / env.gpus_per_instance) * env.price_usd_per_h * span_s / 3600
            by_type[env.gpu] += gpus
        return cost, dict(by_type)

    # -- checks every policy gets -----------------------------------------------------------

    def _ladder_problem(self, job: Job, ladder: Ladder) -> str | None:
        policy = job.precision_problem(ladder)
        if policy is not None:
            return f"infeasible (C2): {policy}"
        seen: set[Chain] = set()
        for k, rank in enumerate(ladder.ranks):
            chain = rank.chain
            env = chain.environment
            where = f"ranks[{k}]"
            if chain in seen:
                return f"{where}: duplicate chain in ladder"
            seen.add(chain)
            if chain.model != job.model:
                return f"{where}: model {chain.model} is not the job's {job.model}"
            pool = self._pools.get(env.id)
            if pool is None:
                return f"{where}: unknown pool {env.id}"
            if pool.environment != env:
                return f"{where}: environment differs from pool {env.id}"
            fe = self._feasibility(chain)
            if not fe.ok:
                return f"{where}: infeasible (C2): {fe.reason}"
        return None

    # -- plans ------------------------------------------------------------------------------

    def _stop_now(self, d: Deployment) -> None:
        """``d`` stops now, its announced-preempted replicas included."""
        d.stop_s = self.now
        for r in d.replicas:
            if r.vanish_s is None or r.vanish_s > self.now:
                r.vanish_s = self.now
            r.doomed = False

    def _cut_drains(self, use: Counter[str]) -> None:
        """Replaced chains drain only where there is room (make-before-break, as for a job's
        own swap): in a pool whose plan, ``use``, leaves no room for them, they stop now."""
        for pid, gpus in self._draining().items():
            if self._fits(Counter({pid: use[pid] + gpus}), (pid,)) is None:
                continue
            for s in self._jobs.values():
                for d in s.outgoing:
                    if d.chain.environment.id == pid:
                        self._stop_now(d)

    def apply(self, plan: Plan) -> ApplyResult:
        """Apply ``plan`` after the safety checks (C1 capacity, C2 feasibility and the job's
        precision policy, known pools).

        A rejected action leaves its job as it was (active jobs keep their ladder, pending ones
        stay pending) and is recorded with its reason.  Jobs without an action are kept or
        deferred.  Accepted changes launch with a delay; a replaced ladder keeps serving until
        the new one is up when the pools have room for both (make-before-break), and stops at
        once otherwise.  Stops and scale-ins are applied first (they free GPUs at once), then
        the other actions by priority, arrival and id; last, the replicas kept and changed jobs
        ask to recycle (:meth:`_recycle`).
        """
        visible = {s.job.id: s for s in self._visible()}
        rejected: list[str] = []
        for a in plan.actions:
            if a.job_id in visible:
                continue
            idle = a.kind in (ActionKind.STOP, ActionKind.DEFER)
            if not (idle and a.job_id in self._jobs):  # stopping a finished job is a no-op
                rejected.append(f"{a.job_id}: unknown or finished job")
        actions = {a.job_id: a for a in plan.actions if a.job_id in visible}

        def releases(s: JobState) -> bool:
            # Stops and scale-ins free GPUs at once: they go first, so a plan that makes room
            # for one job by shrinking another holds whatever the priorities.
            act, current = actions.get(s.job.id), s.ladder()
            if act is None or current.is_empty:
                return False
            return act.kind in (ActionKind.DEFER, ActionKind.STOP) or act.ladder.scales_in(current)

        order = sorted(
            visible.values(),
            key=lambda s: (not releases(s), -s.job.priority, s.job.arrival_s, s.job.id),
        )
        # Checked against what the snapshot shows: chains still draining hold GPUs the
        # snapshot cannot show exactly (it counts whole instances), so they yield below.
        use = self._usage(shown=True)
        swaps = keeps = places = stops = 0
        changes: list[tuple[JobState, Ladder, bool]] = []
        stopped: list[JobState] = []
        for s in order:
            current = s.ladder()
            act = actions.get(s.job.id)
            kind = act.kind if act is not None else ActionKind.KEEP
            if kind in (ActionKind.DEFER, ActionKind.STOP) or act is None:
                if act is not None and not current.is_empty:
                    stopped.append(s)
                    stops += 1
                    for pid, g in current.gpus_by_pool().items():
                        use[pid] -= g
                elif not current.is_empty:
                    keeps += 1
                continue
            if _same_ladder(act.ladder, current):
                keeps += not current.is_empty
                continue
            trial = Counter(use)
            trial.subtract(current.gpus_by_pool())
            trial.update(act.ladder.gpus_by_pool())
            problem = self._ladder_problem(s.job, act.ladder)
            if problem is None:
                c1 = self._fits(trial, act.ladder.gpus_by_pool())
                problem = None if c1 is None else f"capacity (C1): {c1}"
            if problem is not None:
                rejected.append(f"{s.job.id}: {act.kind.value} rejected: {problem}")
                continue
            use = trial
            changes.append((s, act.ladder, not current.is_empty))
            if current.is_empty:
                places += 1
            else:
                swaps += 1
        for s in stopped:
            self._stop(s)
        self._cut_drains(use)
        use.update(self._draining())
        launches = [self._change(s, ladder, use) for s, ladder, _ in changes]
        recycled = []
        for s in order:
            act = actions.get(s.job.id)
            if act is not None and act.recycle:
                n = sum(self._recycle(d, act.recycle, use) for d in s.deployments)
                if n:
                    recycled.append(f"{s.job.id}: {n} slow replica(s) recycled")
        return ApplyResult(
            tuple(launches), tuple(rejected), swaps, keeps, places, stops, tuple(recycled)
        )

    def _recycle(self, dep: Deployment, names: Collection[str], use: Counter[str]) -> int:
        """Replace the serving replicas of ``dep`` named in ``names`` with fresh launches of
        its chain, when the pool has room for both: the old ones serve until the new ones are
        up (paid for, not shown), at most until the next tick.  Without room nothing is
        replaced (a slow replica still serves).  Returns how many were replaced."""
        slow = [
            r
            for r in dep.replicas
            if r.name in names and r.vanish_s is None and r.ready_s <= self.now
        ]
        if not slow or dep.stop_s is not None:
            return 0
        chain = dep.chain
        pid = chain.environment.id
        trial = Counter(use)
        trial[pid] += len(slow) * chain.gpus
        if self._fits(trial, (pid,)) is not None:
            return 0
        labels = sorted(r.name for r in slow)
        rng = np.random.default_rng([self.seed, stable_seed("recycle", self.tick, *labels)])
        fresh = self._launch(chain, len(slow), rng)  # a failed launch leaves the slow one be
        use[pid] += len(fresh) * chain.gpus  # what the successors hold beside the old ones
        until = min(
            max((r.ready_s for r in fresh), default=self.now), self.now + self.scenario.tick_s
        )
        for r in slow[: len(fresh)]:
            r.vanish_s = until
            r.doomed = True  # held (and paid for) while it drains, no longer shown
        dep.replicas.extend(fresh)
        return len(fresh)

    def _stop(self, s: JobState) -> None:
        s.deployments = []
        s.outgoing = []
        s.since_s = self.now

    def _launch(self, chain: Chain, n: int, rng: np.random.Generator) -> list[Replica]:
        lc = self.cfg.launch
        fe = self._feasibility(chain)
        load = lc.base_s + fe.weights_gib * chain.gpus / lc.load_gib_s + lc.warmup_s
        sigma = math.sqrt(math.log1p(lc.jitter_cv**2))
        delay = load * float(rng.lognormal(-0.5 * sigma * sigma, sigma)) if sigma else load
        out = []
        starts = self._spec(chain, 1.0) is not None  # out of memory at engine start-up
        for _ in range(n):
            if rng.uniform() < lc.fail_prob or not starts:
                continue  # never materializes
            slow = float(rng.uniform(*lc.slow_factor)) if rng.uniform() < lc.slow_prob else 1.0
            self._launched += 1
            out.append(Replica(self.now + delay, round(slow, 2), name=f"r{self._launched}"))
        return out

    def _deployment(self, s: JobState, chain: Chain, replicas: list[Replica]) -> Deployment:
        gpu = self.gpus[chain.environment.gpu]
        model = self.models[chain.model]
        fe = self._feasibility(chain)
        spec = self._spec(chain, 1.0)
        req_s, kv = 0.0, 1
        if spec is not None:
            kv = spec.kv_capacity_tokens
            req_s, _ = replica_capacity(
                spec.step_model, kv, self._true_config(chain, spec), s.actual
            )
        dep = Deployment(
            chain=chain,
            gpu=gpu,
            model=model,
            feas=fe,
            spec_for=functools.partial(self._started_spec, chain),
            replicas=replicas,
            capacity_req_s=req_s,
        )
        if not s.job.is_online:
            ctx = s.actual.input_len.mean + s.actual.output_len.mean
            seqs = chain.config.max_batch_size if spec is None else spec.max_batch_size
            slots = min(seqs, kv / max(ctx, 1.0))
            dep.concurrency_per_replica = max(1, math.ceil(self.cfg.sampling.batch_backlog * slots))
            dep.feed = self._batch_source(s)
        return dep

    def _change(self, s: JobState, ladder: Ladder, use: Counter[str]) -> LaunchResult:
        rng = np.random.default_rng([self.seed, stable_seed("launch", self.tick, s.job.id)])
        want = _want(ladder)
        have = {d.chain: d for d in s.deployments}
        keep: list[Deployment] = []
        new_ready = self.now
        for chain, n in want.items():
            dep = have.pop(chain, None)
            if dep is None:
                dep = self._deployment(s, chain, self._launch(chain, n, rng))
            else:
                live = [r for r in dep.replicas if r.vanish_s is None]
                if n > len(live):
                    dep.replicas.extend(self._launch(chain, n - len(live), rng))
                else:
                    # Scale in: drop launching and slow replicas first, at once.
                    live.sort(key=lambda r: (r.ready_s <= self.now, -r.slow))
                    for r in live[: len(live) - n]:
                        r.vanish_s = self.now
            new_ready = max(new_ready, dep.ready_by() if dep.shown else self.now)
            keep.append(dep)
        leaving = list(have.values())
        extra: Counter[str] = Counter()
        for d in leaving:
            extra[d.chain.environment.id] += len(d.held) * d.chain.gpus
        # ``use`` holds the plan's ladders plus everything still draining, this tick included.
        total = Counter(use)
        total.update(extra)
        make_before_break = self._fits(total, extra) is None
        if make_before_break:
            use.update(extra)
        for d in leaving:
            d.outgoing = True
            d.stop_s = new_ready
            if not make_before_break:
                self._stop_now(d)
        s.outgoing.extend(leaving)
        s.deployments = keep
        s.since_s = self.now
        return LaunchResult(
            s.job.id,
            ladder,
            s.ladder(),
            "make-before-break" if leaving and make_before_break else "",
        )

    # -- events -----------------------------------------------------------------------------

    def begin_tick(self, index: int, now: float) -> list[str]:
        """Advance to the tick at ``now``: retire what ended, apply due events and hazards."""
        self.tick, self.now = index, now
        notes: list[str] = []
        for s in self._jobs.values():
            for d in s.deployments:
                d.drop_vanished(now)
            s.deployments = [d for d in s.deployments if d.replicas]
            s.outgoing = [
                d for d in s.outgoing if d.stop_s is not None and d.stop_s > now and d.held
            ]
            if s.done_s is not None:
                s.deployments, s.outgoing = [], []
        for at, pid, n in list(self._recoveries):
            if at <= now:
                self._capacity[pid] += n
                self._recoveries.remove((at, pid, n))
                notes.append(f"{pid}: {n} spot instance(s) back")
        while self._next_event < len(self._events) and self._events[self._next_event].at_s <= now:
            event = self._events[self._next_event]
            notes.append(self._apply_event(event, self._next_event))
            self._next_event += 1
        self._draw_hazards(notes)
        return notes

    def _apply_event(self, e: Event, k: int) -> str:
        rng = event_rng(self.seed, k)
        if e.kind is EventKind.DRIVER_UPDATE:
            assert e.gpu is not None
            speed = self._truth.driver_update(e.gpu, rng, engine=e.engine, speed=e.speed)
            self._generation[e.gpu] += 1
            for s in self._jobs.values():
                for d in s.deployments + s.outgoing:
                    if d.chain.environment.gpu == e.gpu and e.engine in (
                        None,
                        d.chain.config.engine,
                    ):
                        d.rebuild()
            return f"driver update on {e.gpu}: speed x{speed:.2f}"
        if e.kind is EventKind.WORKLOAD_DRIFT:
            assert e.job is not None
            s = self._jobs[e.job]
            w = s.actual

            def scaled(d: LengthDist, f: float) -> LengthDist:
                mean = min(d.mean * f, float(d.max))
                return attrs.evolve(d, mean=mean)

            s.actual = attrs.evolve(
                w,
                input_len=scaled(w.input_len, e.input_scale),
                output_len=scaled(w.output_len, e.output_scale),
                rate_rps=None if w.rate_rps is None else w.rate_rps * e.rate_scale,
            )
            return f"workload drift on {e.job}"
        if e.kind is EventKind.DEGRADE:
            assert e.job is not None
            for d in self._jobs[e.job].deployments:
                live = [r for r in d.replicas if r.vanish_s is None]
                if live:
                    live[0].slow = e.slow
                    d.rebuild()
            return f"{e.job}: a replica per rank runs {e.slow:.1f}x slow"
        assert e.pool is not None
        assert e.instances is not None
        if e.kind is EventKind.POOL_CHANGE:
            self._capacity[e.pool] = e.instances
            self._evict(e.pool, rng, at=self.now, notice=False)
            return f"{e.pool}: capacity now {e.instances}"
        if e.notice:
            self._preempt(e.pool, e.instances, rng, notice=True, at=self.now + self.scenario.tick_s)
            return f"{e.pool}: {e.instances} instance(s) to be preempted (notice)"
        # Without notice the instances vanish during the coming window, after planning.
        self._pending_preemptions[e.pool] += e.instances
        return f"{e.pool}: {e.instances} instance(s) to be preempted without notice"

    def _draw_hazards(self, notes: list[str]) -> None:
        """Spot preemptions for the coming window, drawn per held instance."""
        self._hazard = self._pending_preemptions
        self._pending_preemptions = Counter()
        span = self.scenario.tick_s
        for pid, pool in self._pools.items():
            env = pool.environment
            if env.market is not Market.SPOT or env.preemption_per_h <= 0:
                continue
            held = math.ceil(self._usage(shown=True).get(pid, 0) / env.gpus_per_instance)
            if held == 0:
                continue
            rng = np.random.default_rng([self.seed, stable_seed("hazard", self.tick, pid)])
            p = 1.0 - math.exp(-env.preemption_per_h * span / 3600.0)
            k = int(rng.binomial(held, p))
            if k == 0:
                continue
            if rng.uniform() < self.cfg.preemption_notice_prob:
                self._preempt(pid, k, rng, notice=True, at=self.now + span)
                notes.append(f"{pid}: {k} spot instance(s) to be preempted (notice)")
            else:
                self._hazard[pid] += k  # victims are drawn after the plan is applied

    def preempt_unannounced(self) -> list[str]:
        """Preemptions without notice: victims among what the plan left, at random times."""
        notes = []
        span = self.scenario.tick_s
        for pid, k in self._hazard.items():
            rng = np.random.default_rng([self.seed, stable_seed("victims", self.tick, pid)])
            at = self.now + float(rng.uniform(0.0, span))
            self._preempt(pid, k, rng, notice=False, at=at)
            notes.append(f"{pid}: {k} instance(s) preempted without notice")
        self._hazard = Counter()
        return notes

    def _preempt(
        self, pid: str, instances: int, rng: np.random.Generator, *, notice: bool, at: float
    ) -> None:
        env = self._pools[pid].environment
        k = min(instances, self._capacity[pid])
        self._capacity[pid] -= k
        if k and env.market is Market.SPOT:
            self._recoveries.append((self.now + self.cfg.spot_recovery_s, pid, k))
        self._kill(pid, k * env.gpus_per_instance, rng, at=at, notice=notice)

    def _evict(self, pid: str, rng: np.random.Generator, *, at: float, notice: bool) -> None:
        """Remove replicas until the pool's usage fits its capacity."""
        gpi = self._pools[pid].environment.gpus_per_instance
        excess = self._usage(shown=True).get(pid, 0) - self._capacity[pid] * gpi
        if excess > 0:
            self._kill(pid, excess, rng, at=at, notice=notice)

    def _kill(
        self, pid: str, gpus: int, rng: np.random.Generator, *, at: float, notice: bool
    ) -> None:
        """Make replicas of pool ``pid`` holding at least ``gpus`` GPUs vanish at ``at``;
        without notice, also whatever still exceeds the reduced capacity."""
        gpi = self._pools[pid].environment.gpus_per_instance
        while True:
            victims = [
                (d, r)
                for s in self._jobs.values()
                for d in s.deployments + s.outgoing
                if d.chain.environment.id == pid
                for r in d.replicas
                if r.vanish_s is None
            ]
            freed = 0
            for i in rng.permutation(len(victims)).tolist():
                if freed >= gpus:
                    break
                d, r = victims[i]
                r.vanish_s = at
                r.doomed = notice
                freed += d.chain.gpus
            left = self._usage(shown=True).get(pid, 0) - self._capacity[pid] * gpi
            if notice or left <= 0 or freed == 0:
                return
            gpus = left

    # -- the end ----------------------------------------------------------------------------

    def batch_records(self) -> tuple[BatchRecord, ...]:
        """How every batch job ended."""
        out = []
        for s in self._jobs.values():
            job = s.job
            if job.is_online:
                continue
            total = job.workload.total_requests or 0
            out.append(
                BatchRecord(
                    job_id=job.id,
                    requested=total,
                    requested_tokens=total * job.workload.output_len.mean,
                    completed_by_deadline=s.by_deadline,
                    done_s=s.done_s,
                    deadline_s=job.target.due_s,
                    admitted=s.admitted,
                    output_tokens=s.batch_tokens,
                )
            )
        return tuple(out)

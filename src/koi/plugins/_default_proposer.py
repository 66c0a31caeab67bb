"""The built-in deterministic proposer (DESIGN §8, issue "planner" item 3).

For one job it enumerates configurations over GPU type, tensor and pipeline parallelism,
quantization and batch size inside the job's budget book, screens each with the surrogate's
closed form, sizes replicas from the required throughput (online: offered output rate at a
utilisation target; batch: remaining tokens before the deadline) and places the ladder on the
cheapest pools with room.

The short list is focused by the DAG's backward query and the matching mechanisms
(:func:`job_focus`, :class:`_Steering`): from the outcomes the incumbent is at risk on (its
cost when none is), the backward query names the decisions that can move them; candidates
that change any other decision are dropped, and each focus decision gets the cheapest move
that changes only it.  A confident mechanism on an at-risk outcome demotes the ladders in its
scope; an untested one gets a ladder in its scope proposed.  With no DAG view or no incumbent
(cold start) the whole enumeration competes: the cheapest overall, the best per GPU type, the
incumbent's neighbours (±1 replica) and a few exploration candidates in the most uncertain
strata.

Performance depends on the GPU type and config, not on which pool sells the GPU, so each
(instance shape, config) is screened once and then priced per pool.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from koi.dag import DagView, Decision, EdgeView, Mechanism, RankContext, node_name, node_value
from koi.errors import InvalidInput
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
    Outcome,
    Outcomes,
    Quant,
    Rank,
)

__all__ = [
    "SEARCHED",
    "DefaultProposer",
    "Focus",
    "ProposerConfig",
    "SizedOption",
    "at_risk_outcomes",
    "backward_decisions",
    "changed_decisions",
    "free_gpus",
    "job_focus",
]

Uncertainty = Callable[[Chain], float]


@attrs.frozen
class ProposerConfig:
    """Search space, sizing and focus of the default proposer.

    ``focus_moves`` single-decision moves from the incumbent are proposed, most confident
    backward route first; a route weaker than ``focus_min_confidence`` does not count.  An
    outcome within ``risk_margin`` of its bound is at risk.  Mechanisms whose belief reached
    ``mechanism_min_confidence`` demote the ladders in their scope; up to ``mechanism_tests``
    untested ones get an in-scope ladder.
    """

    tp_options: tuple[int, ...] = (1, 2, 4, 8)
    pp_options: tuple[int, ...] = (1, 2)
    batch_options: tuple[int, ...] = (64, 256)
    utilization_target: float = 0.7
    batch_deadline_margin: float = 0.8
    max_replicas: int = 64
    exploration: int = 2
    retry_headroom: float = 0.75
    memo_size: int = 4096
    focus_moves: int = 3
    focus_min_confidence: float = 0.05
    risk_margin: float = 0.15
    mechanism_min_confidence: float = 0.6
    mechanism_tests: int = 1


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
        # Sized on the fleet's instance shapes of the book's GPU types (placement keeps to the
        # book), so these sizings are the ones the budget books already asked for.
        book_gpus = {e.gpu for e in envs}
        shapes = [
            p.environment
            for p in snapshot.pools
            if p.environment.gpu in context.gpus and p.environment.gpu in book_gpus
        ]
        ladders: dict[Ladder, _Ranked] = {}
        hosts: dict[tuple[str, int], list[Environment]] = {}
        for sized in self.sized_options(
            job,
            shapes,
            context.gpus,
            now_s=snapshot.time_s,
            deadline_s=context.deadline_s,
            headroom=headroom,
        ):
            opt = sized.option
            per_replica_tok_s = max(
                sized.prediction.outcomes.throughput_tok_s / sized.replicas, 1e-9
            )
            shape = (opt.gpu, opt.config.gpus)
            if shape not in hosts:
                hosts[shape] = _hosts(envs, *shape)
            for ladder in self._place(job, opt, sized.replicas, hosts[shape], free):
                cost = ladder.price_usd_per_h / (per_replica_tok_s * ladder.replicas)
                ladders.setdefault(ladder, _Ranked(ladder, cost, sized.meets_target))
        focus = job_focus(job, context, self.cfg)
        return self._shortlist(job, ladders, focus, context)

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

        Memoized per (job, instance shape, time for batch jobs, headroom): the planner asks
        for the same job several times per tick (budget books over every pool, cost reference,
        proposals inside the book), and the shapes are shared between those asks.
        """
        out: list[SizedOption] = []
        for _, shape in sorted(_shapes(envs).items()):
            sized = self._sized_shape(job, shape, gpus, now_s, deadline_s, headroom)
            if sized is None:
                break  # out of time: what was sized so far
            out.extend(sized)
        return out

    def _sized_shape(
        self,
        job: Job,
        shape: Environment,
        gpus: Mapping[str, GpuSpec],
        now_s: float,
        deadline_s: float,
        headroom: float,
    ) -> list[SizedOption] | None:
        key = (job, shape, None if job.is_online else now_s, headroom)
        hit = self._sized.get(key)
        if hit is not None:
            return hit
        options = self._screen_shape(job, shape, gpus[shape.gpu], deadline_s)
        if options is None:
            return None
        out: list[SizedOption] = []
        for opt in options:
            if time.monotonic() > deadline_s:
                return None  # incomplete: not cached
            replicas = self._replicas(job, opt, now_s, headroom)
            sized = Ladder((Rank(Chain(job.model, opt.shape, opt.config), replicas),))
            pred = self.surrogate.screen(job, sized, now_s=now_s)
            if pred.feasible:
                out.append(SizedOption(opt, replicas, pred, _meets_target(job, pred.outcomes)))
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

    def _screen_shape(
        self, job: Job, env: Environment, gpu: GpuSpec, deadline_s: float
    ) -> list[_Option] | None:
        """Screen each config on one instance shape with one replica; keep the useful ones.

        Cached by everything the result depends on, so a job is screened once per workload
        and shape, not once per tick; ``None`` when the deadline cut the screen short.
        """
        # A replica's memory fit and capacity do not depend on the offered rate: screening at
        # a canonical rate lets a drifting job (and jobs sharing a workload shape) reuse it.
        if job.is_online:
            job = attrs.evolve(job, workload=attrs.evolve(job.workload, rate_rps=1.0))
        key = (job.model, job.job_class, job.workload, job.target, env)
        cached = self._screens.get(key)
        if cached is not None:
            return cached
        options: list[_Option] = []
        smallest_fit: dict[tuple[int, Quant, int], _Option] = {}
        for config in self._configs(gpu, env.gpus_per_instance, env.multi_node):
            if time.monotonic() > deadline_s:
                return None  # incomplete: not cached
            # Pipeline parallelism only where tensor parallelism alone does not fit (the pp=1
            # configs come first): known before screening, so not screened at all.
            fit = (config.tp, config.quant, config.max_batch_size)
            if config.pp > 1 and fit in smallest_fit:
                continue
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
        pools: Sequence[Environment],
        free: Mapping[str, int],
    ) -> list[Ladder]:
        """The cheapest single pool with room, and a split over the cheapest if needed.

        ``pools`` are the pools that can host ``opt``, cheapest first (:func:`_hosts`).
        """
        gpus_per_chain = opt.config.gpus
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
        ladders: Mapping[Ladder, _Ranked],
        focus: Focus | None,
        context: ProposalContext,
    ) -> list[Ladder]:
        """A bounded, diverse short list, focused by the backward query and the mechanisms.

        Without a focus (cold start, no DAG) this is the plain enumeration's list: the two
        cheapest, the best per GPU type, the incumbent ± one replica, the exploration picks,
        then the rest by price.  With a focus, candidates that change a decision the backward
        query does not reach are dropped, each focus decision gets the cheapest move that
        changes only it, and the matching mechanisms steer in-scope candidates.
        """
        limit = context.max_candidates
        incumbent = context.incumbent
        steer = _Steering(job, focus, context, self.cfg)
        ranked = sorted(
            (r for r in ladders.values() if steer.allowed(r.ladder)),
            # The screen's verdict is not trusted where a confident mechanism says it is off:
            # such a ladder ranks as if it missed the target.
            key=lambda r: r.key * 1e3 if steer.distrusted(r.ladder) else r.key,
        )
        picked: dict[Ladder, None] = {}  # ordered, with O(1) membership

        def add(ladder: Ladder | None) -> None:
            if ladder is not None and ladder not in picked and len(picked) < limit:
                picked[ladder] = None

        for r in ranked[:2]:
            add(r.ladder)
        for ladder in steer.mechanism_picks(ranked):
            add(ladder)
        if focus is None or Decision.GPU_TYPE in focus.decisions:
            best_per_gpu: dict[str, Ladder] = {}
            for r in ranked:
                best_per_gpu.setdefault(r.gpu, r.ladder)
            for gpu in sorted(best_per_gpu):
                add(best_per_gpu[gpu])
        if focus is None or Decision.REPLICAS in focus.decisions:
            for ladder in _neighbours(incumbent):
                add(ladder)
        if self.uncertainty is not None:
            explore = _exploration(ranked, self.uncertainty)
            for ladder in explore[: self.cfg.exploration]:
                add(ladder)
        if focus is not None and incumbent is not None:
            for ladder in _single_moves(ranked, incumbent, focus.decisions[: self.cfg.focus_moves]):
                add(ladder)
        for r in ranked:
            if len(picked) >= limit:
                break
            add(r.ladder)
        return list(picked)


# ---- focus: the backward query and the matching mechanisms ---------------------------------
# The decisions this proposer searches over; pools and markets are priced, not focused.
SEARCHED: tuple[Decision, ...] = (
    Decision.GPU_TYPE,
    Decision.TP,
    Decision.PP,
    Decision.QUANT,
    Decision.MAX_BATCH_SIZE,
    Decision.REPLICAS,
)


@attrs.frozen
class Focus:
    """What the backward query says for one job: the outcomes to move, and the searched
    decisions that reach them, most confident route first."""

    outcomes: tuple[Outcome, ...]
    decisions: tuple[Decision, ...]


@attrs.frozen
class _Ranked:
    """A placed ladder, its price per throughput, and whether its screen meets the target."""

    ladder: Ladder
    cost: float
    meets: bool

    @property
    def key(self) -> float:
        return self.cost if self.meets else self.cost * 1e3  # missing the target ranks last

    @property
    def gpu(self) -> str:
        return self.ladder.ranks[0].chain.environment.gpu


def at_risk_outcomes(job: Job, outcomes: Outcomes, margin: float) -> tuple[Outcome, ...]:
    """The constrained outcomes a prediction is past, or within ``margin`` of, its bound."""
    t = job.target
    if not job.is_online:
        return (Outcome.THROUGHPUT,) if outcomes.slo_margin < margin else ()
    out = []
    if t.p99_ttft_ms is not None and outcomes.p99_ttft_ms >= (1 - margin) * t.p99_ttft_ms:
        out.append(Outcome.TTFT)
    if t.p99_tpot_ms is not None and outcomes.p99_tpot_ms >= (1 - margin) * t.p99_tpot_ms:
        out.append(Outcome.TPOT)
    return tuple(out)


def backward_decisions(
    view: DagView, outcomes: Iterable[Outcome], min_confidence: float
) -> tuple[tuple[Decision, float], ...]:
    """Decisions with an X -> V -> Y route to any of ``outcomes`` in ``view``, each with its
    best route's confidence (the product of the two edges' confidences, 0.5 where the view
    carries none); routes below ``min_confidence`` do not count.  Most confident first."""
    best: dict[Decision, float] = {}
    for outcome in outcomes:
        for vy in view.edges_into(node_name(outcome)):
            for xv in view.edges_into(vy.source):
                c = _edge_confidence(xv) * _edge_confidence(vy)
                decision = node_value(xv.source)
                if c >= min_confidence and isinstance(decision, Decision):
                    best[decision] = max(c, best.get(decision, 0.0))
    return tuple(sorted(best.items(), key=lambda dc: (-dc[1], dc[0].value)))


def _edge_confidence(edge: EdgeView) -> float:
    return 0.5 if edge.confidence is None else edge.confidence  # Beta(1, 1)'s mean


def _at_risk(context: ProposalContext) -> tuple[Outcome, ...]:
    return tuple(o for o in map(_outcome_of, context.at_risk) if o is not None)


def _outcome_of(name: str) -> Outcome | None:
    try:
        value = node_value(name) if ":" in name else Outcome(name)
    except (InvalidInput, ValueError):
        return None
    return value if isinstance(value, Outcome) else None


def job_focus(job: Job, context: ProposalContext, cfg: ProposerConfig) -> Focus | None:
    """The backward query from the job's at-risk outcomes (or its cost when nothing is at
    risk) to the decisions worth varying from its incumbent.

    ``None`` — no focus, enumerate everything — when there is no DAG view, no incumbent to
    vary from (cold start), or the view reaches none of the searched decisions.
    """
    if not isinstance(context.dag, DagView) or context.incumbent is None:
        return None
    if context.incumbent.is_empty:
        return None
    outcomes = _at_risk(context) or (Outcome.COST,)
    routes = backward_decisions(context.dag, outcomes, cfg.focus_min_confidence)
    decisions = tuple(d for d, _ in routes if d in SEARCHED)
    if not decisions:
        return None
    return Focus(outcomes, decisions)


def changed_decisions(ladder: Ladder, incumbent: Ladder) -> frozenset[Decision]:
    """The searched decisions ``ladder`` sets differently from ``incumbent`` (main ranks).

    Replicas count as changed only when nothing else did: a new config is re-sized from the
    demand, so its replica count follows from the other decisions.
    """
    a, b = _main_rank(incumbent), _main_rank(ladder)
    ca, cb = a.chain.config, b.chain.config
    changed = {
        d
        for d, moved in (
            (Decision.GPU_TYPE, a.chain.environment.gpu != b.chain.environment.gpu),
            (Decision.TP, ca.tp != cb.tp),
            (Decision.PP, ca.pp != cb.pp),
            (Decision.QUANT, ca.quant != cb.quant),
            (Decision.MAX_BATCH_SIZE, ca.max_batch_size != cb.max_batch_size),
        )
        if moved
    }
    if not changed and ladder.replicas != incumbent.replicas:
        changed.add(Decision.REPLICAS)
    return frozenset(changed)


def _main_rank(ladder: Ladder) -> Rank:
    return max(ladder.ranks, key=lambda r: r.replicas)


class _Steering:
    """The focus and the matching mechanisms applied to one job's ranked ladders.

    A confident mechanism (belief ≥ ``mechanism_min_confidence``) that moves an outcome the
    job is at risk on says the screen is off inside its scope: in-scope ladders rank as if
    they missed the target (the best per GPU type still keeps one on the list, for the
    corrected evaluation to judge).  An untested one gets its cheapest in-scope ladder
    proposed, so the selector can weigh testing it.
    """

    def __init__(
        self,
        job: Job,
        focus: Focus | None,
        context: ProposalContext,
        cfg: ProposerConfig,
    ) -> None:
        self.job = job
        self.context = context
        self.cfg = cfg
        # A focus that reaches every searched decision constrains nothing.
        narrow = focus is not None and not set(SEARCHED) <= set(focus.decisions)
        self.focus = frozenset(focus.decisions) if focus is not None and narrow else None
        self.incumbent = context.incumbent
        # What the job is at risk on; else what the focus moves; else all it is scored on.
        at_risk = _at_risk(context)
        chosen = at_risk or (focus.outcomes if focus else _objectives(job))
        outcomes = {node_name(o) for o in chosen}
        mechanisms = [m for m in context.mechanisms if isinstance(m, Mechanism)]
        self.avoid = tuple(
            m
            for m in mechanisms
            if m.belief.confidence >= cfg.mechanism_min_confidence and outcomes & set(m.outcomes)
        )
        self.test = tuple(
            m for m in mechanisms if m.belief.confidence < cfg.mechanism_min_confidence
        )
        self._contexts: dict[Rank, RankContext | None] = {}

    def allowed(self, ladder: Ladder) -> bool:
        """Inside the focus: changes no decision the backward query does not reach."""
        if self.focus is None or self.incumbent is None:
            return True
        return changed_decisions(ladder, self.incumbent) <= self.focus

    def distrusted(self, ladder: Ladder) -> bool:
        """Inside the scope of a confident mechanism that moves an at-risk outcome."""
        return any(self._in_scope(m, ladder) for m in self.avoid)

    def mechanism_picks(self, ranked: Sequence[_Ranked]) -> list[Ladder]:
        """The cheapest in-scope ladder meeting the target for each untested mechanism."""
        out: list[Ladder] = []
        for m in self.test[: self.cfg.mechanism_tests]:
            pick = next((r.ladder for r in ranked if r.meets and self._in_scope(m, r.ladder)), None)
            if pick is not None:
                out.append(pick)
        return out

    def _in_scope(self, mechanism: Mechanism, ladder: Ladder) -> bool:
        ctx = self._rank_context(_main_rank(ladder))
        return ctx is not None and mechanism.applies_to(ctx)

    def _rank_context(self, rank: Rank) -> RankContext | None:
        if rank not in self._contexts:
            spec = self.context.models.get(rank.chain.model)
            gpu = self.context.gpus.get(rank.chain.environment.gpu)
            self._contexts[rank] = (
                None
                if spec is None or gpu is None
                else RankContext.from_rank(rank, spec, gpu, self.job)
            )
        return self._contexts[rank]


def _objectives(job: Job) -> tuple[Outcome, ...]:
    """What the job is scored on: its constrained outcomes and its cost."""
    if job.is_online:
        return (Outcome.TTFT, Outcome.TPOT, Outcome.COST)
    return (Outcome.THROUGHPUT, Outcome.COST)


def _single_moves(
    ranked: Sequence[_Ranked], incumbent: Ladder, decisions: Sequence[Decision]
) -> list[Ladder]:
    """Per decision, the cheapest ladder that changes it and nothing else from the incumbent."""
    best: dict[Decision, Ladder] = {}
    wanted = set(decisions)
    for r in ranked:
        changed = changed_decisions(r.ladder, incumbent)
        if len(changed) == 1:
            (decision,) = changed
            if decision in wanted and decision not in best:
                best[decision] = r.ladder
                if len(best) == len(wanted):
                    break
    return [best[d] for d in decisions if d in best]


def _exploration(ranked: Sequence[_Ranked], uncertainty: Uncertainty) -> list[Ladder]:
    """Ladders meeting the target (all, if none does), most uncertain stratum first."""
    pool = [r.ladder for r in ranked if r.meets] or [r.ladder for r in ranked]
    return sorted(pool, key=lambda lad: -max(uncertainty(r.chain) for r in lad.ranks))


def _hosts(envs: Iterable[Environment], gpu: str, gpus_per_chain: int) -> list[Environment]:
    """The pools that can host a chain of ``gpus_per_chain`` ``gpu`` GPUs, cheapest first
    (spot priced up by its preemption rate)."""
    return sorted(
        (e for e in envs if e.gpu == gpu and _fits_shape(e, gpus_per_chain)),
        key=lambda e: (e.price_usd_per_gpu_h * (1 + 4 * e.preemption_per_h), e.id),
    )


def _shapes(envs: Iterable[Environment]) -> dict[str, Environment]:
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

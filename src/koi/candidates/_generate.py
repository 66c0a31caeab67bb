"""The built-in candidate generator: screened, sized and placed ladders for one job, narrowed to
a bounded, diverse short list.

For one job it enumerates configurations over GPU type, tensor and pipeline parallelism,
quantization and batch size inside the job's budget book (:mod:`koi.candidates._screen`), sizes
replicas from the required throughput (at the capacity the residual corrections in force
credit, when the context carries them), and places each ladder on the cheapest pools with room
(:func:`koi.candidates.place`).  The short list is focused by the DAG's backward query and the
matching mechanisms (:mod:`koi.candidates._focus`).  With no DAG view or no incumbent (cold
start) the whole enumeration competes: the cheapest overall, the best per GPU type, the
incumbent's neighbours (±1 replica) and a few exploration candidates in the most uncertain
strata.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from koi.candidates._config import ProposerConfig
from koi.candidates._context import ProposalContext
from koi.candidates._explore import StratumUncertainty
from koi.candidates._focus import Focus, Steering, job_focus, main_rank
from koi.candidates._placement import free_gpus, hosts, place
from koi.candidates._routing import routing_matters, with_routing
from koi.candidates._screen import Screener
from koi.dag import Decision
from koi.surrogate import Surrogate
from koi.types import Environment, Job, Ladder, Outcome, Routing

__all__ = ["MISSED_TARGET_RANK", "CandidateGenerator"]

#: A ladder whose screen misses the job's target ranks as if it cost this many times more:
#: after every ladder that meets it, but still ordered by price among the misses.
MISSED_TARGET_RANK = 1e3


_LATENCY = frozenset({Outcome.TTFT, Outcome.TPOT})


@attrs.frozen
class _Ranked:
    """A placed ladder, its price per throughput, and whether its screen meets the target."""

    ladder: Ladder
    cost: float
    meets: bool

    @property
    def key(self) -> float:
        return self.cost if self.meets else self.cost * MISSED_TARGET_RANK

    @property
    def gpu(self) -> str:
        return self.ladder.ranks[0].chain.environment.gpu


class CandidateGenerator:
    """Deterministic ladder proposals for one job at a time; keeps its screens across ticks."""

    def __init__(self, surrogate: Surrogate, cfg: ProposerConfig | None = None) -> None:
        self.cfg = cfg or ProposerConfig()
        self.screener = Screener(surrogate, self.cfg)
        # A running job keeps its engine (ProposerConfig.engine_changes) while its keep is
        # not predicted past a latency bound: its options and its budget book are sized on a
        # screen of that engine alone, not under every engine (engine_min_gain does not apply
        # there: keeping an engine is no change of engine).
        engines = self.cfg.engine_options
        self._kept_screens = {
            e: Screener(surrogate, attrs.evolve(self.cfg, engine_options=(e,)))
            for e in (engines if len(engines) > 1 and not self.cfg.engine_changes else ())
        }
        self._changes = attrs.evolve(self.cfg, engine_changes=True)
        self._uncertainty = StratumUncertainty()

    def propose(self, job: Job, context: ProposalContext) -> list[Ladder]:
        """The short list of ladders for ``job`` (at most ``context.max_candidates``)."""
        snapshot = context.snapshot
        envs = book_environments(context)
        if not envs:
            return []
        free = free_gpus(snapshot, except_job=job.id)
        for pool, n in context.reclaimable.items():  # making room: others could shrink
            free[pool] = max(free.get(pool, 0), 0) + n
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
        # A kept engine was chosen on the surrogate's prior for it: once the job's keep is
        # predicted past a latency bound (telemetry corrects the prediction), that choice is
        # open again, the engine a searched decision as under ``engine_changes``.
        reopened = bool(self._kept_screens) and bool(_LATENCY & {*context.breached})
        cfg = self._changes if reopened else self.cfg
        screener = self.screener if reopened else self.screener_for(context.incumbent)
        pools_for: dict[tuple[str, int], list[Environment]] = {}
        for sized in screener.sized_options(
            job,
            shapes,
            context.gpus,
            now_s=snapshot.time_s,
            deadline_s=context.deadline_s,
            headroom=headroom,
            corrections=context.corrections,
        ):
            opt = sized.option
            per_replica_tok_s = max(
                sized.prediction.outcomes.throughput_tok_s / sized.replicas, 1e-9
            )
            shape = (opt.gpu, opt.config.gpus)
            if shape not in pools_for:
                pools_for[shape] = hosts(envs, *shape)
            ladder = place(
                job.model, opt.config, sized.replicas, pools_for[shape], free, partial=True
            )
            if ladder is not None:
                cost = ladder.price_usd_per_h / (per_replica_tok_s * ladder.replicas)
                ladders.setdefault(ladder, _Ranked(ladder, cost, sized.meets_target))
        focus = job_focus(job, context, cfg)
        return self._shortlist(job, ladders, focus, context, cfg)

    def screener_for(self, incumbent: Ladder | None) -> Screener:
        """The screen a job's options are sized on: a running job's own engine's when it keeps
        it (several engines listed, ``engine_changes`` off, its engine among them), else the
        screen of every listed engine."""
        if incumbent is None or incumbent.is_empty:
            return self.screener
        engine = main_rank(incumbent).chain.config.engine
        return self._kept_screens.get(engine, self.screener)

    def _shortlist(
        self,
        job: Job,
        ladders: Mapping[Ladder, _Ranked],
        focus: Focus | None,
        context: ProposalContext,
        cfg: ProposerConfig,
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
        steer = Steering(job, focus, context, cfg)
        ranked = sorted(
            (r for r in ladders.values() if steer.allowed(r.ladder)),
            # The screen's verdict is not trusted where a confident mechanism says it is off:
            # such a ladder ranks as if it missed the target.
            key=lambda r: r.key * MISSED_TARGET_RANK if steer.distrusted(r.ladder) else r.key,
        )
        picked: dict[Ladder, None] = {}  # ordered, with O(1) membership

        def add(ladder: Ladder | None) -> None:
            # The incumbent's neighbours keep its precision, which the owner may forbid.
            if (
                ladder is not None
                and ladder not in picked
                and len(picked) < limit
                and job.precision_problem(ladder) is None
            ):
                picked[ladder] = None

        for r in ranked[:2]:
            add(r.ladder)
        if routing_matters(job):
            # Routing is searched where the job shares prefixes: the two cheapest again, with
            # prefix-affinity routing; the evaluator predicts the hit rate of each.
            for r in ranked[:2]:
                alt = with_routing(r.ladder, Routing.PREFIX_AFFINITY)
                if alt != r.ladder and steer.allowed(alt):
                    add(alt)
        for ladder in steer.mechanism_picks([(r.ladder, r.meets) for r in ranked]):
            add(ladder)
        if focus is None or Decision.GPU_TYPE in focus.decisions:
            best_per_gpu: dict[str, Ladder] = {}
            for r in ranked:
                best_per_gpu.setdefault(r.gpu, r.ladder)
            for gpu in sorted(best_per_gpu):
                add(best_per_gpu[gpu])
        if focus is None or Decision.REPLICAS in focus.decisions:
            for ladder in neighbours(incumbent):
                add(ladder)
        if context.evidence is not None:
            for ladder in self._exploration(ranked, context)[: self.cfg.exploration]:
                add(ladder)
        if focus is not None and incumbent is not None:
            moves = focus.decisions[: self.cfg.focus_moves]
            for ladder in steer.single_moves([r.ladder for r in ranked], moves):
                add(ladder)
        for r in ranked:
            if len(picked) >= limit:
                break
            add(r.ladder)
        return list(picked)

    def _exploration(self, ranked: Sequence[_Ranked], context: ProposalContext) -> list[Ladder]:
        """Ladders meeting the target (all, if none does), most uncertain stratum first."""
        evidence = context.evidence
        assert evidence is not None
        pool = [r.ladder for r in ranked if r.meets] or [r.ladder for r in ranked]

        def u(ladder: Ladder) -> float:
            return max(self._uncertainty(r.chain, evidence, context.models) for r in ladder.ranks)

        return sorted(pool, key=lambda lad: -u(lad))


def book_environments(context: ProposalContext) -> list[Environment]:
    """The pools inside the job's budget book (all pools when there is no usable book)."""
    budget = context.budget
    pools = context.snapshot.pools
    allowed_pools = set(budget.pools) if budget is not None else set()
    allowed_gpus = set(budget.gpu_types) if budget is not None else set()
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


def neighbours(incumbent: Ladder | None) -> list[Ladder]:
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

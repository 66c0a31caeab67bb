"""The proposer's focus: the DAG's backward query and the matching mechanisms, applied to one
job's ranked ladders.

From the outcomes the incumbent is at risk on (its cost when none is), the backward query names
the decisions that can move them; candidates that change any other decision are dropped, and
each focus decision gets the cheapest move that changes only it.  A confident mechanism on an
at-risk outcome demotes the ladders in its scope; an untested one gets a ladder in its scope
proposed.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from koi.candidates._config import ProposerConfig
from koi.candidates._context import ProposalContext
from koi.candidates._routing import routing_matters
from koi.dag import Decision, Mechanism, RankContext, node_name
from koi.types import Job, Ladder, Outcome, Outcomes, Rank

__all__ = [
    "SEARCHED",
    "Focus",
    "Steering",
    "at_risk_outcomes",
    "changed_decisions",
    "job_focus",
    "main_rank",
    "objectives",
]

#: The decisions the built-in generator searches over; pools and markets are priced, not
#: focused.  The engine joins them when the proposer enumerates more than one and running
#: jobs may change it (:func:`searched`).
SEARCHED: tuple[Decision, ...] = (
    Decision.GPU_TYPE,
    Decision.TP,
    Decision.PP,
    Decision.QUANT,
    Decision.MAX_BATCH_SIZE,
    Decision.REPLICAS,
)


def searched(job: Job, cfg: ProposerConfig) -> tuple[Decision, ...]:
    """The decisions searched for ``job``: :data:`SEARCHED`, the engine where there is a
    choice of engines and a running job may change it (``engine_changes``), and routing where
    it changes the job's prefix-cache hits."""
    out = SEARCHED
    if len(cfg.engine_options) > 1 and cfg.engine_changes:
        out = (*out, Decision.ENGINE)
    if routing_matters(job):
        out = (*out, Decision.ROUTING)
    return out


@attrs.frozen
class Focus:
    """What the backward query says for one job: the outcomes to move, and the searched
    decisions that reach them, most confident route first."""

    outcomes: tuple[Outcome, ...]
    decisions: tuple[Decision, ...]


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


def job_focus(job: Job, context: ProposalContext, cfg: ProposerConfig) -> Focus | None:
    """The backward query from the job's at-risk outcomes (or its cost when nothing is at
    risk) to the decisions worth varying from its incumbent.

    ``None`` — no focus, enumerate everything — when there is no DAG view, no incumbent to
    vary from (cold start), or the view reaches none of the searched decisions.
    """
    # The focus depends on the job through the context's at-risk outcomes, and on whether
    # its routing changes its prefix-cache hits.
    if context.dag is None or context.incumbent is None or context.incumbent.is_empty:
        return None
    outcomes = context.at_risk or (Outcome.COST,)
    routes = context.dag.decisions_for(outcomes, cfg.focus_min_confidence)
    wanted = searched(job, cfg)
    decisions = tuple(d for d, _ in routes if d in wanted)
    if not decisions:
        return None
    return Focus(outcomes, decisions)


def main_rank(ladder: Ladder) -> Rank:
    """The rank with the most replicas (the first such)."""
    return max(ladder.ranks, key=lambda r: r.replicas)


def changed_decisions(ladder: Ladder, incumbent: Ladder) -> frozenset[Decision]:
    """The searched decisions ``ladder`` sets differently from ``incumbent`` (main ranks).

    Replicas count as changed only when nothing else did: a new config is re-sized from the
    demand, so its replica count follows from the other decisions.
    """
    a, b = main_rank(incumbent), main_rank(ladder)
    ca, cb = a.chain.config, b.chain.config
    changed = {
        d
        for d, moved in (
            (Decision.GPU_TYPE, a.chain.environment.gpu != b.chain.environment.gpu),
            (Decision.ENGINE, ca.engine != cb.engine),
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


def objectives(job: Job) -> tuple[Outcome, ...]:
    """What the job is scored on: its constrained outcomes and its cost."""
    if job.is_online:
        return (Outcome.TTFT, Outcome.TPOT, Outcome.COST)
    return (Outcome.THROUGHPUT, Outcome.COST)


class Steering:
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
        every = set(searched(job, cfg)) - {Decision.ROUTING}
        narrow = focus is not None and not every <= set(focus.decisions)
        self.focus = frozenset(focus.decisions) if focus is not None and narrow else None
        self.incumbent = context.incumbent
        # An incumbent on an engine the screen does not list (a host's own deployment): every
        # candidate changes its engine, which then is no move of the search's own.
        engine = None if not self.incumbent else main_rank(self.incumbent).chain.config.engine
        unlisted = engine is not None and engine not in cfg.engine_options
        self._unlisted = frozenset({Decision.ENGINE} if unlisted else ())
        # What the job is at risk on; else what the focus moves; else all it is scored on.
        chosen = context.at_risk or (focus.outcomes if focus else objectives(job))
        outcomes = {node_name(o) for o in chosen}
        mechanisms = context.mechanisms
        self.avoid = tuple(
            m
            for m in mechanisms
            if m.belief.confidence >= cfg.mechanism_min_confidence and outcomes & set(m.outcomes)
        )
        self.test = tuple(
            m for m in mechanisms if m.belief.confidence < cfg.mechanism_min_confidence
        )
        self._contexts: dict[Rank, RankContext | None] = {}

    def changed(self, ladder: Ladder) -> frozenset[Decision]:
        """The searched decisions ``ladder`` moves from the incumbent (:func:`changed_decisions`,
        less an engine change every candidate makes)."""
        assert self.incumbent is not None
        return changed_decisions(ladder, self.incumbent) - self._unlisted

    def allowed(self, ladder: Ladder) -> bool:
        """Inside the focus: changes no decision the backward query does not reach."""
        if self.focus is None or self.incumbent is None:
            return True
        return self.changed(ladder) <= self.focus

    def single_moves(self, ranked: Sequence[Ladder], decisions: Sequence[Decision]) -> list[Ladder]:
        """Per decision, the cheapest ladder that changes it and nothing else from the
        incumbent."""
        best: dict[Decision, Ladder] = {}
        wanted = set(decisions)
        for ladder in ranked:
            changed = self.changed(ladder)
            if len(changed) == 1:
                (decision,) = changed
                if decision in wanted and decision not in best:
                    best[decision] = ladder
                    if len(best) == len(wanted):
                        break
        return [best[d] for d in decisions if d in best]

    def distrusted(self, ladder: Ladder) -> bool:
        """Inside the scope of a confident mechanism that moves an at-risk outcome."""
        return any(self._in_scope(m, ladder) for m in self.avoid)

    def mechanism_picks(self, ranked: Sequence[tuple[Ladder, bool]]) -> list[Ladder]:
        """The cheapest in-scope ladder meeting the target for each untested mechanism;
        ``ranked`` holds (ladder, meets its target), cheapest first."""
        out: list[Ladder] = []
        for m in self.test[: self.cfg.mechanism_tests]:
            pick = next((lad for lad, meets in ranked if meets and self._in_scope(m, lad)), None)
            if pick is not None:
                out.append(pick)
        return out

    def _in_scope(self, mechanism: Mechanism, ladder: Ladder) -> bool:
        ctx = self._rank_context(main_rank(ladder))
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

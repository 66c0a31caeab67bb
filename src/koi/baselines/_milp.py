"""The rolling joint MILP (the CP-SAT-style global optimiser).

Every tick, for every job: the default proposer's short list (sized and placed by the
surrogate for the job's observed request rate when it drifted above the declared one, as koi
sizes), the incumbent and the empty ladder, each scored ``J_i − λ Switch_i`` — γ = 0 (no risk
band, no C3) and no exploration term, no learning — then koi's joint selector picks one
candidate per job under capacity C1 with HiGHS.  When no candidate of a job beats keeping or
deferring it, the proposer is asked again with its later-round headroom (fewer tokens per
replica), as koi asks it.  It is koi's selection step without koi's
evidence: what is left when the causal graph, the risk band and the online updates are gone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from koi.baselines._common import Toolkit, base_actions, safe_plan
from koi.errors import KoiError
from koi.selector import (
    Candidate,
    SelectionProblem,
    SelectorConfig,
    greedy,
    pool_capacities,
    select,
)
from koi.types import ActionKind, ClusterSnapshot, Job, JobAction, Ladder, Observation, Plan

__all__ = ["RollingMilp"]


@attrs.define
class RollingMilp:
    """The joint MILP over surrogate-scored candidates, every tick."""

    toolkit: Toolkit
    max_candidates: int = 12
    selector: SelectorConfig = attrs.field(factory=SelectorConfig)
    search_rounds: int = 2
    name: str = "rolling-milp"

    def planned(
        self, snapshot: ClusterSnapshot, observations: Sequence[Observation]
    ) -> ClusterSnapshot:
        """The snapshot to plan: online jobs sized for their observed rate (koi's rule)."""
        return self.toolkit.observe(snapshot, observations)

    def jobs(self, snapshot: ClusterSnapshot) -> list[Job]:
        """The jobs to plan (``milp-truth`` substitutes the true workloads here)."""
        return list(snapshot.jobs)

    def ladders(self, job: Job, snapshot: ClusterSnapshot, search_round: int) -> list[Ladder]:
        """The proposer's short list for ``job`` in ``search_round``."""
        return self.toolkit.proposals(job, snapshot, self.max_candidates, search_round=search_round)

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        snapshot = self.planned(snapshot, observations)
        tk = self.toolkit
        actions = base_actions(snapshot)
        current = snapshot.current_ladders
        candidates: list[Candidate] = []
        ladders: dict[tuple[str, str], Ladder] = {}
        for job in self.jobs(snapshot):
            if actions[job.id].kind is ActionKind.STOP:
                continue
            mine = current.get(job.id)
            empty_kind = ActionKind.STOP if mine is not None else ActionKind.DEFER
            defer = tk.defer_value(job, snapshot)
            candidates.append(
                Candidate(job.id, empty_kind.value, empty_kind, defer, changes=mine is not None)
            )
            ladders[job.id, empty_kind.value] = Ladder()
            ref = tk.reference_cost(tk.options(job, snapshot), snapshot)
            seen: set[Ladder] = set()
            best_base, best_change = defer, -math.inf
            for rnd in range(self.search_rounds):
                # A later round (more headroom per replica) only when nothing improved yet.
                if rnd > 0 and best_change > best_base:
                    break
                pool = ([mine] if mine is not None and rnd == 0 else []) + self.ladders(
                    job, snapshot, rnd
                )
                for ladder in dict.fromkeys(pool):
                    if ladder in seen:
                        continue
                    seen.add(ladder)
                    v = tk.value(job, ladder, snapshot, ref)
                    if v is None:
                        continue
                    if ladder == mine:
                        kind, key = ActionKind.KEEP, "keep"
                        best_base = max(best_base, v)
                    else:
                        kind = ActionKind.PLACE if mine is None else ActionKind.RECONFIGURE
                        key = f"c{len(seen)}"
                        best_change = max(best_change, v)
                    candidates.append(
                        Candidate(
                            job.id,
                            key,
                            kind,
                            v,
                            gpus_by_pool=ladder.gpus_by_pool(),
                            changes=kind is ActionKind.RECONFIGURE,
                        )
                    )
                    ladders[job.id, key] = ladder
        if not candidates:
            return safe_plan(snapshot, actions, tk.surrogate)
        problem = SelectionProblem(
            candidates=candidates,
            pools=pool_capacities(snapshot),
            priority={j.id: j.priority for j in snapshot.jobs},
            held_gpus={a.job_id: a.ladder.gpus_by_pool() for a in snapshot.active},
        )
        try:
            selection = select(problem, cfg=self.selector)
        except KoiError:
            try:
                selection = greedy(problem)
            except KoiError:
                return safe_plan(snapshot, actions, tk.surrogate, diagnostics={"selector": "none"})
        for job_id, key in selection.chosen.items():
            ladder = ladders[job_id, key]
            mine = current.get(job_id)
            if ladder.is_empty:
                kind = ActionKind.STOP if mine is not None else ActionKind.DEFER
                actions[job_id] = JobAction(job_id, kind, reason=f"{self.name}: empty")
            elif ladder == mine:
                actions[job_id] = JobAction(job_id, ActionKind.KEEP, ladder, f"{self.name}: keep")
            else:
                kind = ActionKind.PLACE if mine is None else ActionKind.RECONFIGURE
                actions[job_id] = JobAction(job_id, kind, ladder, f"{self.name}: joint MILP")
        diag = {"selector": selection.status.value, "gap": selection.gap}
        return safe_plan(snapshot, actions, tk.surrogate, diagnostics=diag)

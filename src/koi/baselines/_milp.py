"""The rolling joint MILP (the CP-SAT-style global optimiser).

Every tick, for every job: the default proposer's short list (sized and placed by the
surrogate), the incumbent and the empty ladder, each scored ``J_i − λ Switch_i`` — γ = 0 (no
risk band, no C3) and no exploration term, no learning — then koi's joint selector picks one
candidate per job under capacity C1 with HiGHS.  It is koi's selection step without koi's
evidence: what is left when the causal graph, the risk band and the online updates are gone.
"""

from __future__ import annotations

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
    name: str = "rolling-milp"

    def jobs(self, snapshot: ClusterSnapshot) -> list[Job]:
        """The jobs to plan (``milp-truth`` substitutes the true workloads here)."""
        return list(snapshot.jobs)

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        del observations
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
            candidates.append(
                Candidate(
                    job.id,
                    empty_kind.value,
                    empty_kind,
                    tk.defer_value(job, snapshot),
                    changes=mine is not None,
                )
            )
            ladders[job.id, empty_kind.value] = Ladder()
            ref = tk.reference_cost(tk.options(job, snapshot), snapshot)
            pool: list[Ladder] = [mine] if mine is not None else []
            pool += list(tk.proposals(job, snapshot, self.max_candidates))
            for k, ladder in enumerate(dict.fromkeys(pool)):
                v = tk.value(job, ladder, snapshot, ref)
                if v is None:
                    continue
                if ladder == mine:
                    kind, key = ActionKind.KEEP, "keep"
                else:
                    kind = ActionKind.PLACE if mine is None else ActionKind.RECONFIGURE
                    key = f"c{k}"
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

"""The per-job optimizer (PRISM-style): each job re-optimises its own ladder, no joint solve.

Every tick, jobs are visited by priority (then arrival).  Each job sees the capacity the jobs
before it left, builds a short list from the surrogate's screened configurations (the
cheapest that meet the target first, sized for the job's observed request rate when it drifted
above the declared one, placed on the cheapest pools with room, plus the incumbent and its
±1-replica neighbours), scores each with the same Tchebycheff and switching cost as koi (no
risk band, no exploration) and takes the best — which may be a reconfiguration.  When nothing
beats keeping or deferring, a second short list is sized with the proposer's later-round
headroom, as koi's proposer is asked again.  Greedy in job order: an early job can take a
scarce GPU a later job needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from koi.baselines._common import Toolkit, base_actions, host_order, safe_plan
from koi.candidates import free_gpus
from koi.types import ActionKind, ClusterSnapshot, Job, JobAction, Ladder, Observation, Plan

__all__ = ["PerJob"]


def neighbours(ladder: Ladder) -> list[Ladder]:
    """``ladder`` with one replica more or one fewer on its largest rank."""
    if ladder.is_empty:
        return []
    ranks = list(ladder.ranks)
    i = max(range(len(ranks)), key=lambda k: ranks[k].replicas)
    out = []
    for delta in (1, -1):
        n = ranks[i].replicas + delta
        if n >= 1:
            out.append(Ladder((*ranks[:i], attrs.evolve(ranks[i], replicas=n), *ranks[i + 1 :])))
    return out


@attrs.define
class PerJob:
    """Independent per-job optimisation in priority order."""

    toolkit: Toolkit
    max_candidates: int = 12
    search_rounds: int = 2
    name: str = "per-job"

    def _shortlist(
        self,
        job: Job,
        snapshot: ClusterSnapshot,
        room: Mapping[str, int],
        search_round: int,
        seed: Sequence[Ladder],
    ) -> list[Ladder]:
        """``seed``, then the best-ranked options of the round placed on ``room``; at most
        ``max_candidates`` ladders."""
        tk = self.toolkit
        shortlist = list(seed)
        for sized in tk.ranked(tk.options(job, snapshot, search_round=search_round), snapshot):
            if len(shortlist) >= self.max_candidates:
                break
            ladder = tk.place(job, sized, snapshot, room)
            if ladder is not None and ladder not in shortlist:
                shortlist.append(ladder)
        return shortlist

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        tk = self.toolkit
        snapshot = tk.observe(snapshot, observations)
        actions = base_actions(snapshot)
        current = snapshot.current_ladders
        free = free_gpus(snapshot)
        for job in host_order(snapshot.jobs):
            if actions[job.id].kind is ActionKind.STOP:
                continue
            mine = current.get(job.id, Ladder())
            room = dict(free)
            for pid, g in mine.gpus_by_pool().items():
                room[pid] = room.get(pid, 0) + g
            ref = tk.reference_cost(tk.options(job, snapshot), snapshot)
            best, best_value = Ladder(), tk.defer_value(job, snapshot)
            seen: set[Ladder] = set()
            for rnd in range(self.search_rounds):
                if rnd > 0 and not best.is_empty and best != mine:
                    break  # a change beat keeping and deferring: no later round
                seed = [mine, *neighbours(mine)] if rnd == 0 else []
                for ladder in self._shortlist(job, snapshot, room, rnd, seed):
                    if ladder.is_empty or ladder in seen or not _fits(ladder, room):
                        continue
                    seen.add(ladder)
                    v = tk.value(job, ladder, snapshot, ref)
                    if v is not None and v > best_value:
                        best, best_value = ladder, v
            for pid, g in best.gpus_by_pool().items():
                room[pid] -= g
            free = room
            if best.is_empty:
                kind = ActionKind.STOP if not mine.is_empty else ActionKind.DEFER
                actions[job.id] = JobAction(job.id, kind, reason="per-job: defer is best")
            elif best == mine:
                actions[job.id] = JobAction(job.id, ActionKind.KEEP, best, "per-job: keep")
            else:
                kind = ActionKind.PLACE if mine.is_empty else ActionKind.RECONFIGURE
                actions[job.id] = JobAction(job.id, kind, best, "per-job: best own ladder")
        return safe_plan(snapshot, actions, tk.surrogate)


def _fits(ladder: Ladder, room: Mapping[str, int]) -> bool:
    return all(room.get(pid, 0) >= g for pid, g in ladder.gpus_by_pool().items())

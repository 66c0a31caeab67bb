r"""Rolling evolutionary search over cluster plans (the EvoX/OpenEvolve-style baseline).

A genome assigns every job one of its alternatives: keep (if running), the empty ladder, or a
ladder from the default proposer's short lists — its first round and its later round with more
headroom per replica, both sized for the job's observed request rate when that drifted above
the declared one (koi's rule).  Fitness is koi's plan score

.. math::

    \Phi(P) = \sum_i \big[J_i - \gamma p_i - \lambda\,\mathrm{Switch}_i\big]

with the surrogate's predictions (``p_i = 0``: no risk band; no exploration term) after a
feasibility repair that sends the jobs of an over-full pool back to keep/defer, cheapest loss
first.  Each generation: tournament selection, uniform crossover, per-gene mutation — either a
different alternative or a resize of the current one by one replica, a new ladder that costs a
surrogate call.  The search is rolling (the best plan of the last tick seeds the next
population) and held to koi's evaluation budget: ``budget_per_job × jobs`` surrogate calls per
tick, counted.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import attrs
import numpy as np

from koi.baselines._common import Toolkit, base_actions, host_order, safe_plan
from koi.baselines._config import BaselineConfig
from koi.baselines._perjob import neighbours
from koi.scoring import JobTerms, plan_score
from koi.types import ActionKind, ClusterSnapshot, Job, JobAction, Ladder, Observation, Plan

__all__ = ["Evolutionary"]


@attrs.define
class _Gene:
    """One job's alternatives and their plan-score terms."""

    job: Job
    ladders: list[Ladder]
    terms: list[JobTerms]
    baseline: int  # index of keep (running) or the empty ladder
    reference_cost: float


@attrs.define
class Evolutionary:
    """Genetic search over plans; see the module docstring."""

    toolkit: Toolkit
    rng: np.random.Generator
    cfg: BaselineConfig = attrs.field(factory=BaselineConfig)
    name: str = "evolutionary"
    last_calls: int = 0
    _memory: dict[str, Ladder] = attrs.field(factory=dict)

    def _gene(self, job: Job, snapshot: ClusterSnapshot, budget: list[int]) -> _Gene:
        tk = self.toolkit
        mine = snapshot.current_ladders.get(job.id)
        ref = tk.reference_cost(tk.options(job, snapshot), snapshot)
        ladders: list[Ladder] = [Ladder()]
        terms = [JobTerms(tk.defer_value(job, snapshot))]
        pool = [mine] if mine is not None else []
        remembered = self._memory.get(job.id)
        if remembered is not None:
            pool.append(remembered)
        for rnd in range(self.cfg.search_rounds):
            pool += tk.proposals(job, snapshot, self.cfg.max_candidates, search_round=rnd)
        for ladder in dict.fromkeys(pool):
            # The running ladder is always scored: running out of budget must not stop a job.
            if budget[0] <= 0 and ladder != mine:
                break
            self._add(job, ladder, snapshot, ref, ladders, terms, budget)
        baseline = ladders.index(mine) if mine is not None and mine in ladders else 0
        return _Gene(job, ladders, terms, baseline, ref)

    def _add(
        self,
        job: Job,
        ladder: Ladder,
        snapshot: ClusterSnapshot,
        ref: float,
        ladders: list[Ladder],
        terms: list[JobTerms],
        budget: list[int],
    ) -> int | None:
        if ladder in ladders:
            return ladders.index(ladder)
        budget[0] -= 1
        t = self.toolkit.terms(job, ladder, snapshot, ref)
        if t is None:
            return None
        ladders.append(ladder)
        terms.append(t)
        return len(ladders) - 1

    def _fitness(self, genes: list[_Gene], genome: np.ndarray) -> float:
        return plan_score(
            [g.terms[int(k)] for g, k in zip(genes, genome, strict=True)],
            (),
            {},
            cfg=self.toolkit.scoring,
        )

    def _repair(self, genes: list[_Gene], genome: np.ndarray, snapshot: ClusterSnapshot) -> None:
        """Send jobs back to their baseline until every pool fits (whole instances)."""
        pools = {p.id: p for p in snapshot.pools}

        def over(use: Counter[str]) -> set[str]:
            return {
                pid
                for pid, g in use.items()
                if pid not in pools
                or math.ceil(g / pools[pid].environment.gpus_per_instance)
                > pools[pid].capacity_instances
            }

        while True:
            use: Counter[str] = Counter()
            for g, k in zip(genes, genome, strict=True):
                use.update(g.ladders[int(k)].gpus_by_pool())
            bad = over(use)
            if not bad:
                return
            movable = [
                i
                for i, (g, k) in enumerate(zip(genes, genome, strict=True))
                if int(k) != 0 and bad & set(g.ladders[int(k)].gpus_by_pool())
            ]
            if not movable:
                return

            def loss(i: int) -> float:
                g, k = genes[i], int(genome[i])
                back = g.baseline if g.baseline != k else 0
                return _value(g.terms[k], self) - _value(g.terms[back], self)

            i = min(movable, key=loss)
            genome[i] = genes[i].baseline if genes[i].baseline != int(genome[i]) else 0

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        tk, cfg, rng = self.toolkit, self.cfg, self.rng
        snapshot = tk.observe(snapshot, observations)
        actions = base_actions(snapshot)
        jobs = [j for j in host_order(snapshot.jobs) if actions[j.id].kind is not ActionKind.STOP]
        if not jobs:
            return safe_plan(snapshot, actions, tk.surrogate)
        calls0 = tk.calls
        budget = [cfg.evo_budget_per_job * len(jobs)]
        genes = [self._gene(j, snapshot, budget) for j in jobs]
        n = len(genes)
        base = np.array([g.baseline for g in genes])
        greedy = np.array(
            [max(range(len(g.terms)), key=lambda k: _value(g.terms[k], self)) for g in genes]
        )
        population = [base.copy(), greedy.copy()]
        while len(population) < cfg.evo_population:
            population.append(np.array([rng.integers(len(g.ladders)) for g in genes]))
        for genome in population:
            self._repair(genes, genome, snapshot)
        scores = [self._fitness(genes, g) for g in population]
        for _ in range(cfg.evo_generations):
            order = np.argsort(scores)[::-1]
            nxt = [population[int(i)].copy() for i in order[: cfg.evo_elite]]
            while len(nxt) < cfg.evo_population:
                a = self._tournament(population, scores)
                b = self._tournament(population, scores)
                child = np.where(rng.uniform(size=n) < 0.5, a, b)
                for i in np.flatnonzero(rng.uniform(size=n) < cfg.evo_mutation):
                    child[i] = self._mutate(genes[i], int(child[i]), snapshot, budget)
                self._repair(genes, child, snapshot)
                nxt.append(child)
            population = nxt
            scores = [self._fitness(genes, g) for g in population]
        best = population[int(np.argmax(scores))]
        for g, k in zip(genes, best, strict=True):
            ladder = g.ladders[int(k)]
            job_id = g.job.id
            mine = snapshot.current_ladders.get(job_id)
            self._memory[job_id] = ladder
            if ladder.is_empty:
                kind = ActionKind.STOP if mine is not None else ActionKind.DEFER
                actions[job_id] = JobAction(job_id, kind, reason="evolutionary: empty")
            elif ladder == mine:
                actions[job_id] = JobAction(job_id, ActionKind.KEEP, ladder, "evolutionary: keep")
            else:
                kind = ActionKind.PLACE if mine is None else ActionKind.RECONFIGURE
                actions[job_id] = JobAction(job_id, kind, ladder, "evolutionary: best plan")
        self.last_calls = tk.calls - calls0
        return safe_plan(snapshot, actions, tk.surrogate, diagnostics={"calls": self.last_calls})

    def _tournament(self, population: list[np.ndarray], scores: list[float]) -> np.ndarray:
        picks = self.rng.integers(len(population), size=3)
        return population[int(max(picks, key=lambda i: scores[int(i)]))]

    def _mutate(self, gene: _Gene, k: int, snapshot: ClusterSnapshot, budget: list[int]) -> int:
        ladder = gene.ladders[k]
        if budget[0] > 0 and not ladder.is_empty and self.rng.uniform() < 0.5:
            variants = neighbours(ladder)
            pick = variants[int(self.rng.integers(len(variants)))]
            added = self._add(
                gene.job, pick, snapshot, gene.reference_cost, gene.ladders, gene.terms, budget
            )
            if added is not None:
                return added
        return int(self.rng.integers(len(gene.ladders)))


def _value(t: JobTerms, evo: Evolutionary) -> float:
    cfg = evo.toolkit.scoring
    return t.j - cfg.gamma * t.breach_probability - cfg.lambda_switch * t.switch_score

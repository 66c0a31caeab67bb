r"""Contextual Thompson sampling over configurations per job (an outcome-learning baseline).

Each job's arms are its ``K`` most promising (GPU type, config) pairs by the surrogate's
screen — the context is the job itself (model, workload, target).  Per arm the planner holds

* a Beta posterior on the chance that a window meets the job's SLO (online: both p99 bounds and
  a healthy rank; batch: a non-negative deadline margin), with prior
  ``Beta(1 + k·m, 1 + k·(1 − m))`` where ``m`` is 1 if the surrogate says the arm meets the
  target and ``k`` the prior weight;
* a Gaussian posterior on the log cost per Mtok, prior mean from the surrogate, updated with
  the observed cost by the conjugate known-variance rule
  :math:`\mu' = (\mu/\sigma^2 + \sum x/s^2)/(1/\sigma^2 + n/s^2)`.

Every tick each job samples ``θ ~ Beta`` and ``c ~ N`` per arm and scores it ``θ·e^{-c}``
(SLO windows per dollar); jobs are placed greedily in priority order on their best sampled
arm that fits, and a running job moves only when the sampled best beats its own arm's sample
by ``switch_margin``.  It learns from what it observes, but it has no model of why.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import attrs
import numpy as np

from koi.baselines._common import Toolkit, base_actions, host_order, safe_plan
from koi.baselines._config import BaselineConfig
from koi.candidates import SizedOption, free_gpus, meets_target
from koi.types import (
    ActionKind,
    Chain,
    ClusterSnapshot,
    Config,
    Job,
    JobAction,
    Ladder,
    Observation,
    Plan,
)

__all__ = ["ArmPosterior", "Thompson"]

Arm = tuple[str, Config]


@attrs.define
class ArmPosterior:
    """Beta(a, b) on SLO success per window and N(mu, sd²) on log cost per Mtok."""

    a: float
    b: float
    mu: float
    sd: float

    def observe(self, *, success: bool, log_cost: float | None, obs_sd: float) -> None:
        self.a += float(success)
        self.b += float(not success)
        if log_cost is not None:
            prec = 1.0 / self.sd**2 + 1.0 / obs_sd**2
            self.mu = (self.mu / self.sd**2 + log_cost / obs_sd**2) / prec
            self.sd = math.sqrt(1.0 / prec)

    def sample(self, rng: np.random.Generator) -> float:
        theta = float(rng.beta(self.a, self.b))
        return theta * math.exp(-float(rng.normal(self.mu, self.sd)))


def arm_of(chain: Chain) -> Arm:
    return chain.environment.gpu, chain.config


def _success(job: Job, obs: Observation) -> bool:
    if not obs.healthy:
        return False
    return meets_target(job, obs.outcomes)


@attrs.define
class Thompson:
    """Thompson sampling per job over its arm set; see the module docstring."""

    toolkit: Toolkit
    rng: np.random.Generator
    cfg: BaselineConfig = attrs.field(factory=BaselineConfig)
    name: str = "thompson"
    posteriors: dict[str, dict[Arm, ArmPosterior]] = attrs.field(factory=dict)

    def _arms(self, job: Job, snapshot: ClusterSnapshot) -> dict[Arm, SizedOption]:
        tk = self.toolkit
        ranked = tk.ranked(tk.options(job, snapshot), snapshot)
        arms: dict[Arm, SizedOption] = {}
        # The best per GPU type first (diversity), then the rest by rank.
        seen: set[str] = set()
        for sized in ranked:
            if sized.option.gpu not in seen:
                seen.add(sized.option.gpu)
                arms[sized.option.gpu, sized.option.config] = sized
        for sized in ranked:
            arms.setdefault((sized.option.gpu, sized.option.config), sized)
        keep = list(arms)[: self.cfg.thompson_arms]
        post = self.posteriors.setdefault(job.id, {})
        cheapest = tk.cheapest_gpu_price(snapshot)
        for arm in keep:
            if arm not in post:
                s = arms[arm]
                m = 1.0 if s.meets_target else 0.0
                k = self.cfg.thompson_prior
                cost = max(tk.option_cost(s, cheapest), 1e-9)
                post[arm] = ArmPosterior(
                    1.0 + k * m, 1.0 + k * (1 - m), math.log(cost), self.cfg.thompson_cost_sd
                )
        return {arm: arms[arm] for arm in keep}

    def _learn(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> None:
        jobs = {j.id: j for j in snapshot.jobs}
        for obs in observations:
            job = jobs.get(obs.job_id)
            post = self.posteriors.get(obs.job_id, {}).get(arm_of(obs.chain))
            if job is None or post is None or obs.requests <= 0:
                continue
            needed = ("p99_ttft_ms", "p99_tpot_ms") if job.is_online else ("slo_margin",)
            if any(v in obs.missing for v in needed):
                continue  # telemetry that did not measure the SLO cannot score the arm
            cost = obs.measured("cost_per_mtok_usd") or 0.0
            log_cost = math.log(cost) if 0 < cost < math.inf else None
            post.observe(
                success=_success(job, obs), log_cost=log_cost, obs_sd=self.cfg.thompson_obs_sd
            )

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        self._learn(snapshot, observations)
        tk = self.toolkit
        actions = base_actions(snapshot)
        current = snapshot.current_ladders
        free = free_gpus(snapshot)
        for job in host_order(snapshot.jobs):
            if actions[job.id].kind is ActionKind.STOP:
                continue
            arms = self._arms(job, snapshot)
            if not arms:
                continue
            post = self.posteriors[job.id]
            draws = {arm: post[arm].sample(self.rng) for arm in arms}
            mine = current.get(job.id)
            room = dict(free)
            if mine is not None:
                for pid, g in mine.gpus_by_pool().items():
                    room[pid] = room.get(pid, 0) + g
                own = defaultdict(int, {arm_of(r.chain): r.replicas for r in mine.ranks})
                main = max(own, key=lambda a: own[a])
                own_draw = draws.get(main)
                if own_draw is None:
                    own_draw = post[main].sample(self.rng) if main in post else 0.0
                best = max(draws, key=lambda a: draws[a])
                if best == main or draws[best] <= (1 + self.cfg.thompson_switch_margin) * own_draw:
                    continue  # keep
            chosen: Ladder | None = None
            for arm in sorted(draws, key=lambda a: -draws[a]):
                chosen = tk.place(job, arms[arm], snapshot, room)
                if chosen is not None:
                    break
            if chosen is None or chosen == mine:
                continue
            for pid, g in chosen.gpus_by_pool().items():
                room[pid] -= g
            free = room
            kind = ActionKind.PLACE if mine is None else ActionKind.RECONFIGURE
            actions[job.id] = JobAction(job.id, kind, chosen, "thompson: best sampled arm")
        return safe_plan(snapshot, actions, tk.surrogate)

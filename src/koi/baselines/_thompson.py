r"""Contextual Thompson sampling over configurations per job (an outcome-learning baseline).

Each job's arms are its ``K`` most promising (GPU type, config) pairs by the surrogate's
screen, each at several replica multipliers (by default 1×, 1.5× and 2× the surrogate's
replica count for the job's demand) — the context is the job itself (model, workload,
target).  Per arm the planner holds

* a Beta posterior on the chance that a window meets the job's SLO (online: both p99 bounds and
  a healthy rank; batch: a non-negative deadline margin), with prior
  ``Beta(1 + k·m, 1 + k·(1 − m))`` where ``m`` is 1 if the surrogate's screen says the arm (at
  its replica count) meets the target and ``k`` the prior weight;
* a Gaussian posterior on the log cost per Mtok, prior mean from the surrogate, updated with
  the observed cost by the conjugate known-variance rule
  :math:`\mu' = (\mu/\sigma^2 + \sum x/s^2)/(1/\sigma^2 + n/s^2)`.

Arms are sized for the job's observed request rate when it drifted above the declared one
(koi's rule); the multipliers stand in for the proposer's later-round headroom.  Every tick
each job samples ``θ ~ Beta`` and ``c ~ N`` per arm and scores it ``θ·e^{-c}``
(SLO windows per dollar); jobs are placed greedily in priority order on their best sampled
arm that fits, and a running job moves only when the sampled best beats its own arm's sample
by ``switch_margin``.  It learns from what it observes, but it has no model of why.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

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
    Rank,
)

__all__ = ["ArmPosterior", "Thompson"]

#: (GPU type, config, replica multiplier).
Arm = tuple[str, Config, float]


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


def _success(job: Job, obs: Observation) -> bool:
    return obs.healthy and meets_target(job, obs.outcomes)


@attrs.define
class Thompson:
    """Thompson sampling per job over its arm set; see the module docstring."""

    toolkit: Toolkit
    rng: np.random.Generator
    cfg: BaselineConfig = attrs.field(factory=BaselineConfig)
    name: str = "thompson"
    posteriors: dict[str, dict[Arm, ArmPosterior]] = attrs.field(factory=dict)
    #: The arm each job runs on (what its observations are evidence about).
    running: dict[str, Arm] = attrs.field(factory=dict)

    def replicas(self, arm: Arm, sized: SizedOption) -> int:
        """The arm's replica count: the surrogate's sizing times the arm's multiplier."""
        return max(1, math.ceil(sized.replicas * arm[2] - 1e-9))

    def _arms(self, job: Job, snapshot: ClusterSnapshot) -> dict[Arm, SizedOption]:
        tk = self.toolkit
        ranked = tk.ranked(tk.options(job, snapshot), snapshot)
        configs: dict[tuple[str, Config], SizedOption] = {}
        # The best per GPU type first (diversity), then the rest by rank.
        seen: set[str] = set()
        for sized in ranked:
            if sized.option.gpu not in seen:
                seen.add(sized.option.gpu)
                configs[sized.option.gpu, sized.option.config] = sized
        for sized in ranked:
            configs.setdefault((sized.option.gpu, sized.option.config), sized)
        arms = {
            (gpu, config, m): sized
            for (gpu, config), sized in list(configs.items())[: self.cfg.thompson_arms]
            for m in self.cfg.thompson_replica_multipliers
        }
        post = self.posteriors.setdefault(job.id, {})
        cheapest = tk.cheapest_gpu_price(snapshot)
        for arm, s in arms.items():
            if arm not in post:
                post[arm] = self._prior(job, arm, s, snapshot, cheapest)
        return arms

    def _prior(
        self,
        job: Job,
        arm: Arm,
        sized: SizedOption,
        snapshot: ClusterSnapshot,
        cheapest: Mapping[str, float],
    ) -> ArmPosterior:
        """The surrogate's verdict on the arm at its own replica count."""
        tk, k = self.toolkit, self.cfg.thompson_prior
        n = self.replicas(arm, sized)
        meets, cost = sized.meets_target, tk.option_cost(sized, cheapest)
        if n != sized.replicas:
            chain = Chain(job.model, sized.option.shape, sized.option.config)
            pred = tk.surrogate.screen(job, Ladder((Rank(chain, n),)), now_s=snapshot.time_s)
            if pred.feasible:
                meets = meets_target(job, pred.outcomes)
                cost *= pred.outcomes.cost_per_mtok_usd / max(
                    sized.prediction.outcomes.cost_per_mtok_usd, 1e-12
                )
        m = 1.0 if meets else 0.0
        log_cost = math.log(max(cost, 1e-9))
        return ArmPosterior(1.0 + k * m, 1.0 + k * (1 - m), log_cost, self.cfg.thompson_cost_sd)

    def _arm_of(self, job_id: str, chain: Chain) -> Arm:
        arm = self.running.get(job_id)
        if arm is not None and arm[:2] == (chain.environment.gpu, chain.config):
            return arm
        return chain.environment.gpu, chain.config, 1.0

    def _learn(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> None:
        jobs = {j.id: j for j in snapshot.jobs}
        for obs in observations:
            job = jobs.get(obs.job_id)
            post = self.posteriors.get(obs.job_id, {}).get(self._arm_of(obs.job_id, obs.chain))
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

    def _resized(
        self,
        job: Job,
        arm: Arm,
        arms: Mapping[Arm, SizedOption],
        mine: Ladder,
        snapshot: ClusterSnapshot,
        room: Mapping[str, int],
    ) -> Ladder | None:
        """The running arm at its current replica count, on its own pools first; ``None`` when
        the count did not change or the new size does not fit."""
        sized = arms.get(arm)
        if sized is None:
            return None
        n = self.replicas(arm, sized)
        if n == mine.replicas:
            return None
        tk = self.toolkit
        ladder = tk.place(job, sized, snapshot, room, replicas=n, pool_ids=mine.gpus_by_pool())
        ladder = ladder or tk.place(job, sized, snapshot, room, replicas=n)
        return ladder if ladder is not None and ladder != mine else None

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        tk = self.toolkit
        snapshot = tk.observe(snapshot, observations)
        self._learn(snapshot, observations)
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
                own: defaultdict[Arm, int] = defaultdict(int)
                for r in mine.ranks:
                    own[self._arm_of(job.id, r.chain)] += r.replicas
                main = max(own, key=lambda a: own[a])
                own_draw = draws.get(main)
                if own_draw is None:
                    own_draw = post[main].sample(self.rng) if main in post else 0.0
                best = max(draws, key=lambda a: draws[a])
                if best == main or draws[best] <= (1 + self.cfg.thompson_switch_margin) * own_draw:
                    # Keep the arm; re-size it when the job's sizing moved (observed rate).
                    resized = self._resized(job, main, arms, mine, snapshot, room)
                    if resized is not None:
                        for pid, g in resized.gpus_by_pool().items():
                            room[pid] -= g
                        free = room
                        actions[job.id] = JobAction(
                            job.id, ActionKind.RECONFIGURE, resized, "thompson: arm re-sized"
                        )
                    continue
            chosen: Ladder | None = None
            picked: Arm | None = None
            for arm in sorted(draws, key=lambda a: -draws[a]):
                n = self.replicas(arm, arms[arm])
                chosen, picked = tk.place(job, arms[arm], snapshot, room, replicas=n), arm
                if chosen is not None:
                    break
            if chosen is None or picked is None or chosen == mine:
                continue
            self.running[job.id] = picked
            for pid, g in chosen.gpus_by_pool().items():
                room[pid] -= g
            free = room
            kind = ActionKind.PLACE if mine is None else ActionKind.RECONFIGURE
            actions[job.id] = JobAction(job.id, kind, chosen, "thompson: best sampled arm")
        return safe_plan(snapshot, actions, tk.surrogate)

"""``milp-truth``: the rolling joint MILP with the simulated fleet's truth as its step model.

A reference, never a competitor, and (with ``koi-truth``) the only planner that touches the
truth.  It is not a ceiling: it shows what the rolling MILP does with perfect knowledge of step
times, and planners that learn or hedge can beat it.  Its surrogate's step times come from a
copy of the world's truth drawn for the same seed (``koi.sim.reference_truth``: the hidden
hardware is a pure function of the seed; a chain is timed on its GPU's multi-GPU instance type
with the worst interconnect, since the surrogate's profile interface carries no instance type),
its GPU speeds follow the scenario's engine/driver updates as they happen (drawn exactly as the
world draws them), and it plans with the drifted workloads.  In the measured world it sees true
step times but not the engines' hidden memory and scheduler settings (its surrogate keeps koi's
feasibility and KV arithmetic).  What it cannot know in advance — which replica will fail to
materialize or run slow, when spot capacity is preempted — it learns only from the snapshots,
like everyone else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from koi.baselines._common import Toolkit
from koi.baselines._milp import RollingMilp
from koi.selector import SelectorConfig
from koi.sim import Event, EventKind, MeasuredTruth, Scenario, TruthModel, event_rng
from koi.surrogate import Surrogate
from koi.surrogate.replay import StepTimeModel
from koi.types import (
    ClusterSnapshot,
    Config,
    GpuSpec,
    Job,
    LengthDist,
    ModelSpec,
    Observation,
    Plan,
)

__all__ = ["MilpTruth", "TruthProfiles"]


@attrs.define
class TruthProfiles:
    """A :class:`~koi.surrogate.ProfileSource` that measures every chain with the truth."""

    truth: TruthModel | MeasuredTruth
    name: str = "truth"

    def covers(self, gpu: GpuSpec, model: ModelSpec) -> bool:
        del gpu, model
        return True

    def step_model(self, gpu: GpuSpec, model: ModelSpec, config: Config) -> StepTimeModel:
        return self.truth.step_model(gpu, model, config)


def _scaled(d: LengthDist, f: float) -> LengthDist:
    return attrs.evolve(d, mean=min(d.mean * f, float(d.max)))


class MilpTruth(RollingMilp):
    """Rolling MILP over the truth; see the module docstring."""

    def __init__(
        self,
        *,
        gpus: Mapping[str, GpuSpec],
        models: Mapping[str, ModelSpec],
        scenario: Scenario,
        world_seed: int,
        truth: TruthModel | MeasuredTruth,
        max_candidates: int = 12,
        selector: SelectorConfig | None = None,
    ) -> None:
        self._gpus, self._models = dict(gpus), dict(models)
        self._truth = truth
        self._seed = world_seed
        self._events = sorted(scenario.events, key=lambda e: e.at_s)
        self._next = 0
        self._drift: dict[str, list[Event]] = {}
        super().__init__(
            self._fresh_toolkit(),
            max_candidates=max_candidates,
            selector=selector or SelectorConfig(),
            name="milp-truth",
        )

    def _fresh_toolkit(self) -> Toolkit:
        # Predictions are cached by ladder: a speed change needs a fresh surrogate.
        surrogate = Surrogate(self._gpus, self._models, profiles=TruthProfiles(self._truth))
        return Toolkit(self._gpus, self._models, surrogate)

    def _advance(self, now: float) -> None:
        """Apply the scenario's events due by ``now`` to this planner's copy of the truth."""
        changed = False
        while self._next < len(self._events) and self._events[self._next].at_s <= now:
            e, k = self._events[self._next], self._next
            self._next += 1
            if e.kind is EventKind.DRIVER_UPDATE and e.gpu is not None:
                # The same generator the world uses for event k, so the same speed is drawn.
                rng = event_rng(self._seed, k)
                self._truth.driver_update(e.gpu, rng, engine=e.engine, speed=e.speed)
                changed = True
            elif e.kind is EventKind.WORKLOAD_DRIFT and e.job is not None:
                self._drift.setdefault(e.job, []).append(e)
        if changed:
            self.toolkit = self._fresh_toolkit()

    def planned(
        self, snapshot: ClusterSnapshot, observations: Sequence[Observation]
    ) -> ClusterSnapshot:
        """The declared snapshot: the true workloads come from the scenario (:meth:`jobs`)."""
        del observations
        return snapshot

    def jobs(self, snapshot: ClusterSnapshot) -> list[Job]:
        out = []
        for job in snapshot.jobs:
            w = job.workload
            for e in self._drift.get(job.id, ()):
                w = attrs.evolve(
                    w,
                    input_len=_scaled(w.input_len, e.input_scale),
                    output_len=_scaled(w.output_len, e.output_scale),
                    rate_rps=None if w.rate_rps is None else w.rate_rps * e.rate_scale,
                )
            out.append(job if w == job.workload else attrs.evolve(job, workload=w))
        return out

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        self._advance(snapshot.time_s)
        return super().decide(snapshot, observations)

"""Per-job state of the simulated world (internal)."""

from __future__ import annotations

import attrs
import numpy as np

from koi.sim._deploy import Deployment
from koi.types import Job, Ladder, Rank, WorkloadProfile

__all__ = ["ID_BLOCK", "JobState"]

ID_BLOCK = 10_000_000  # request id = window index * block + counter: the id carries its weight


@attrs.define(eq=False)
class JobState:
    """A job as the world tracks it: declared and true workload, deployments, progress."""

    job: Job  # as declared: what the snapshot shows (completed_requests kept current)
    actual: WorkloadProfile  # the truth after drift
    rng: np.random.Generator
    deployments: list[Deployment] = attrs.field(factory=list)
    outgoing: list[Deployment] = attrs.field(factory=list)
    since_s: float = 0.0
    clock: float = 0.0  # engine time cursor shared by the job's deployments
    scales: list[float] = attrs.field(factory=list)  # world requests per replayed one, by window
    scale: float = 1.0
    completed: float = 0.0
    unissued: float = 0.0
    issued_ids: int = 0
    done_s: float | None = None
    by_deadline: float = 0.0
    batch_tokens: float = 0.0
    admitted: bool = False

    @property
    def window(self) -> int:
        return len(self.scales) - 1

    def ladder(self) -> Ladder:
        ranks = [Rank(d.chain, d.shown) for d in self.deployments if d.shown > 0]
        return Ladder(tuple(ranks))

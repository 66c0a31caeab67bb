"""What one simulated run records: the per-run trace the evaluator reads.

Counts are world counts: when a window is replayed on a sampled sub-window, each replayed
request stands for several real ones and the counts are scaled (docs/evaluation.md).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

__all__ = ["BatchRecord", "JobWindow", "TickRecord", "Trace"]


@attrs.frozen
class JobWindow:
    """One job over one planning window.

    ``offered`` counts online requests that arrived (served or not); ``ttft_ok``, ``tpot_ok`` and
    ``slo_ok`` count requests that finished in the window meeting the TTFT bound, the TPOT bound
    and both.  ``slo_tokens`` are the output tokens of ``slo_ok`` requests; ``output_tokens`` all
    output tokens of requests finished in the window; ``batch_completed`` batch requests done.
    ``gpus`` are the GPUs the job held (serving, launching or draining) and ``cost_usd`` what
    they cost over the window.
    """

    job_id: str
    offered: float = 0.0
    offered_tokens: float = 0.0
    finished: float = 0.0
    ttft_ok: float = 0.0
    tpot_ok: float = 0.0
    slo_ok: float = 0.0
    slo_tokens: float = 0.0
    output_tokens: float = 0.0
    batch_completed: float = 0.0
    gpus: int = 0
    cost_usd: float = 0.0
    dropped: float = 0.0


@attrs.frozen
class TickRecord:
    """One planning tick and the window ``[start_s, end_s)`` that follows it."""

    index: int
    start_s: float
    end_s: float
    plan_time_s: float
    swaps: int
    keeps: int
    places: int
    stops: int
    rejected: tuple[str, ...]
    gpus_by_type: Mapping[str, int]
    cost_usd: float
    jobs: tuple[JobWindow, ...]
    events: tuple[str, ...] = ()


@attrs.frozen
class BatchRecord:
    """How one batch job ended: requests done by its deadline, and when it finished."""

    job_id: str
    requested: int
    requested_tokens: float
    completed_by_deadline: float
    done_s: float | None
    deadline_s: float
    admitted: bool
    output_tokens: float

    @property
    def met_deadline(self) -> bool:
        return self.done_s is not None and self.done_s <= self.deadline_s


@attrs.frozen
class Trace:
    """Everything the evaluator needs from one run.

    ``in_flight`` counts, per online job, the requests still running (admitted to a batch)
    when the run ended: neither served nor refused, so the evaluator leaves them out of what
    was offered.  Traces written before it existed load with none.
    """

    scenario: str
    policy: str
    seed: int
    duration_s: float
    online_jobs: tuple[str, ...]
    ticks: tuple[TickRecord, ...]
    batch: tuple[BatchRecord, ...]
    reference_cost_per_token_usd: float
    in_flight: Mapping[str, float] = attrs.field(factory=dict)

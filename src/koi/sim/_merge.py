"""Join consecutive replay windows of one engine into one (a window cut by mid-window events)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from koi.surrogate.replay import WindowStats

__all__ = ["merge_windows"]

_ARRAYS = (
    "request_ids",
    "arrival_s",
    "first_token_s",
    "finish_s",
    "input_tokens",
    "output_tokens",
    "ttft_ms",
    "tpot_ms",
    "tpot_replica",
)
_COUNTS = (
    "arrivals",
    "first_tokens",
    "output_tokens_generated",
    "preemptions",
    "rejected",
    "requeued",
    "busy_s",
    "compute_s",
    "memory_s",
    "comm_s",
    "bubble_s",
    "overhead_s",
)
# Per-replica time averages: weight each piece by its replica-seconds.
_PER_REPLICA = (
    "kv_cache_util",
    "mean_batch_size",
    "queue_depth",
    "preemption_rate",
    "busy_fraction",
)


def merge_windows(parts: Sequence[WindowStats]) -> WindowStats:
    """One :class:`WindowStats` spanning consecutive ``parts`` of the same engine.

    Request arrays and counts concatenate and add; per-replica averages are weighted by each
    part's replica-seconds, ``prefill_share`` by busy time; the end-of-window state (unserved
    ages, queue and running counts) is the last part's.
    """
    if len(parts) == 1:
        return parts[0]
    first, last = parts[0], parts[-1]
    replica_s = sum(p.replica_s for p in parts)
    busy = sum(p.busy_s for p in parts)
    kw: dict[str, object] = {
        "start_s": first.start_s,
        "end_s": last.end_s,
        "replica_s": replica_s,
        "unserved_age_ms": last.unserved_age_ms,
        "queued_end": last.queued_end,
        "running_end": last.running_end,
    }
    for name in _ARRAYS:
        kw[name] = np.concatenate([getattr(p, name) for p in parts])
    for name in _COUNTS:
        kw[name] = sum(getattr(p, name) for p in parts)
    for name in _PER_REPLICA:
        kw[name] = (
            sum(getattr(p, name) * p.replica_s for p in parts) / replica_s if replica_s else 0.0
        )
    kw["prefill_share"] = sum(p.prefill_share * p.busy_s for p in parts) / busy if busy else 0.0
    return WindowStats(**kw)  # type: ignore[arg-type]

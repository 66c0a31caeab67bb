"""The world's shared prompt prefixes: which prefix each request of a job starts with.

A workload with a shared prefix (``WorkloadProfile.shared_prefix_tokens``) sends every prompt
with one of its ``prefix_count`` prefixes.  In the world the prefixes are not equally popular:
the ``k``-th is drawn with weight ``1/k^s`` (``TruthConfig.prefix_zipf``), which the planners do
not know.  The replicas' prefix caches (``ReplicaSpec.prefix_cache``) then decide the hits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from koi.surrogate.replay import Request
from koi.types import WorkloadProfile

__all__ = ["prefix_ids", "with_prefixes"]


def prefix_ids(
    workload: WorkloadProfile, rng: np.random.Generator, n: int, zipf: float
) -> list[int]:
    """``n`` prefix ids of ``workload``, Zipf-distributed with exponent ``zipf``."""
    k = workload.prefix_count
    if k == 1:
        return [0] * n
    weights = 1.0 / np.arange(1, k + 1, dtype=float) ** zipf
    return [int(x) for x in rng.choice(k, size=n, p=weights / weights.sum())]


def with_prefixes(
    requests: Sequence[Request], workload: WorkloadProfile, rng: np.random.Generator, zipf: float
) -> list[Request]:
    """``requests`` with their shared prefix (unchanged when the workload shares none)."""
    tokens = workload.shared_prefix_tokens
    if tokens <= 0 or not requests:
        return list(requests)
    ids = prefix_ids(workload, rng, len(requests), zipf)
    return [
        Request(r.id, r.arrival_s, r.input_tokens, r.output_tokens, p, tokens)
        for r, p in zip(requests, ids, strict=True)
    ]

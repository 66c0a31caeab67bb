"""Routing as a searched decision: it matters where a job shares prompt prefixes."""

from __future__ import annotations

import attrs

from koi.types import Job, Ladder, Routing

__all__ = ["routing_matters", "with_routing"]


def routing_matters(job: Job) -> bool:
    """Whether routing changes the job's prefix-cache hits: it shares prefixes, and more than
    one (with one prefix every replica caches it under any routing)."""
    w = job.workload
    return w.shared_prefix_tokens > 0 and w.prefix_count > 1


def with_routing(ladder: Ladder, routing: Routing) -> Ladder:
    """``ladder`` with every multi-replica rank routed by ``routing`` (a single replica has
    nothing to route)."""
    ranks = tuple(
        attrs.evolve(
            r, chain=attrs.evolve(r.chain, config=attrs.evolve(r.chain.config, routing=routing))
        )
        if r.replicas > 1
        else r
        for r in ladder.ranks
    )
    return Ladder(ranks)

"""The surrogate's prefix-cache model: the expected hit rate of a replica's prefix cache.

vLLM and SGLang keep the KV blocks of finished prompts and reuse them when a later prompt starts
with the same tokens.  What a job gains depends on three things this module puts in one closed
form (docs/surrogate.md, "Prefix caching"):

* the workload: ``K`` distinct shared prefixes of ``S`` tokens (only whole KV blocks of
  ``block`` tokens are reused, so ``S_b = block·⌊S/block⌋``);
* routing: prefix-affinity routing gives each replica ``K_r = ⌈K/n⌉`` of the ``K`` prefixes of a
  rank of ``n`` replicas; round robin and least-loaded routing send every prefix everywhere
  (``K_r = K``);
* KV space: a running request's prefix lives in shared blocks, pinned while it runs; with ``B``
  running requests drawing uniformly from ``K_r`` prefixes, ``D = K_r·(1 − (1 − 1/K_r)^B)``
  distinct prefixes are pinned.  What is left of the cache, ``F = cap − B·(I − S_b + O/2) −
  D·S_b`` (``I``, ``O`` the mean prompt and output), holds ``F/S_b`` idle prefixes, evicted
  least-recently-used under pressure.

The hit probability of a request is ``h = min(1, (D + F/S_b)/K_r)`` (uniform popularity: an LRU
cache of ``m`` of ``K_r`` equally popular items hits ``m/K_r`` of the time), and a hit skips the
``S_b`` prefix tokens of its prefill.  The serving estimates then see prompts shorter by
``h·S_b`` and a KV cache of ``cap − D·S_b + B·(1 − h)·S_b`` tokens: each running request really
holds ``I − S_b`` private tokens plus its share of the ``D`` pinned prefixes, which is what the
shortened prompts and the adjusted capacity add up to at the batch ``B``.

The world's prefix cache (:mod:`koi.sim`) is a real LRU over sampled requests whose prefix
popularity is not uniform, so its hit rate is the truth this model is corrected against (the
``prefix_hit_rate`` mediator).
"""

from __future__ import annotations

import math

import attrs

from koi.surrogate._analytic import RankLoad
from koi.types import MAX_CV, LengthDist, Routing, WorkloadProfile

__all__ = ["PrefixHit", "cached_load", "prefix_hit", "prefixes_per_replica"]


@attrs.frozen
class PrefixHit:
    """The expected effect of the prefix cache on one replica.

    ``probability`` is the chance a request finds its prefix cached; ``cached_tokens`` the
    prompt tokens a request skips on average (probability × block-aligned prefix);
    ``kv_offset_tokens`` what the KV capacity the serving estimates see is smaller by (the
    pinned prefixes, less what the shortened prompts over-charge the misses); ``rate`` the
    fraction of prompt tokens served from the cache — what vLLM and SGLang export.
    """

    probability: float
    cached_tokens: float
    kv_offset_tokens: float
    rate: float


NO_HIT = PrefixHit(0.0, 0.0, 0.0, 0.0)


def prefixes_per_replica(prefixes: int, replicas: int, routing: Routing) -> int:
    """How many distinct prefixes one replica sees: ``⌈K/n⌉`` under prefix affinity, else K."""
    if routing is Routing.PREFIX_AFFINITY:
        return max(1, math.ceil(prefixes / max(replicas, 1)))
    return prefixes


def prefix_hit(
    workload: WorkloadProfile,
    *,
    replicas: int,
    routing: Routing,
    kv_capacity_tokens: float,
    running: float,
    block_tokens: int,
    correction: float = 1.0,
) -> PrefixHit:
    """Expected prefix-cache hits of one replica with ``running`` requests in its batch.

    ``correction`` (observed / predicted hit rate, learned from telemetry) scales the hit
    probability, capped at 1.
    """
    shared = block_tokens * (workload.shared_prefix_tokens // block_tokens)
    mean_in = workload.input_len.mean
    if shared <= 0 or mean_in <= 0:
        return NO_HIT
    k = prefixes_per_replica(workload.prefix_count, replicas, routing)
    b = max(running, 0.0)
    pinned = k * (1.0 - (1.0 - 1.0 / k) ** b) if k > 1 else min(b, 1.0)
    private = max(mean_in - shared, 1.0) + workload.output_len.mean / 2.0
    free = max(kv_capacity_tokens - b * private - pinned * shared, 0.0)
    h = min(1.0, min(1.0, (pinned + free / shared) / k) * correction)
    cached = h * shared
    offset = pinned * shared - b * (1.0 - h) * shared
    return PrefixHit(h, cached, offset, min(cached / mean_in, 1.0))


def cached_load(load: RankLoad, hit: PrefixHit) -> RankLoad:
    """``load`` with the prefix cache's savings: prompts shorter by the cached tokens (the
    prefill work a hit skips) and the KV cache offset by the pinned prefixes (see the module
    doc).  The prompt spread keeps its absolute width, up to the widest a length distribution
    may have (a prefix that covers nearly every prompt leaves a token or two whose relative
    spread would be thousands); the capacity stays within [½, 2]× of the load's."""
    if hit.cached_tokens <= 0:
        return load
    inp = load.input_len
    mean = max(inp.mean - hit.cached_tokens, 1.0)
    shorter = LengthDist(mean=mean, cv=min(inp.cv * inp.mean / mean, MAX_CV), max=inp.max)
    full = load.kv_capacity_tokens
    cap = min(max(int(full - hit.kv_offset_tokens), full // 2), 2 * full)
    return attrs.evolve(load, input_len=shorter, kv_capacity_tokens=cap)

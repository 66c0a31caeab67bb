"""One replica's prefix cache: shared prompt prefixes kept as KV blocks, evicted LRU.

Internal to the replica (``ReplicaSpec.prefix_cache``).  A prefix is *pinned* while running
requests use it (its blocks count once in the KV cache, however many requests share it) and
*idle* once the last one has left: idle prefixes live in the free part of the KV cache, most
recently used last, and the least recently used go first when running requests need the room
(:meth:`PrefixCache.trim`).  A request whose prefix is pinned or idle skips that part of its
prefill (a hit).
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["PrefixCache"]


class PrefixCache:
    """Pinned and idle prefixes of one replica, with the token counts the replica needs."""

    __slots__ = ("block", "idle", "idle_tokens", "refs")

    def __init__(self, block_tokens: int) -> None:
        self.block = block_tokens
        self.idle: OrderedDict[int, int] = OrderedDict()  # prefix -> tokens, LRU first
        self.idle_tokens = 0
        self.refs: dict[int, list[int]] = {}  # prefix -> [running users, tokens]

    def aligned(self, prefix_tokens: int, prompt_tokens: int) -> int:
        """Tokens of a prefix the cache can hold for a prompt: whole blocks, and never the whole
        prompt (the last prompt token is always computed: it samples the first output)."""
        shared = min(prefix_tokens, prompt_tokens - 1)
        return self.block * (shared // self.block) if shared > 0 else 0

    def holds(self, prefix: int) -> bool:
        return prefix in self.refs or prefix in self.idle

    def acquire(self, prefix: int, tokens: int) -> int:
        """A running request starts using ``prefix``; return the KV tokens newly pinned."""
        ref = self.refs.get(prefix)
        if ref is not None:
            ref[0] += 1
            return 0
        idle = self.idle.pop(prefix, None)
        if idle is not None:
            self.idle_tokens -= idle
        self.refs[prefix] = [1, tokens]
        return tokens

    def release(self, prefix: int) -> int:
        """A running request stops using ``prefix``; return the KV tokens no longer pinned
        (the prefix then stays cached, idle, as the most recently used)."""
        ref = self.refs[prefix]
        ref[0] -= 1
        if ref[0]:
            return 0
        del self.refs[prefix]
        self.idle[prefix] = ref[1]
        self.idle_tokens += ref[1]
        return ref[1]

    def trim(self, free_tokens: float) -> None:
        """Evict idle prefixes, least recently used first, until they fit ``free_tokens``."""
        idle = self.idle
        while self.idle_tokens > free_tokens and idle:
            _, tokens = idle.popitem(last=False)
            self.idle_tokens -= tokens

    def clear(self) -> None:
        self.idle.clear()
        self.idle_tokens = 0
        self.refs.clear()

"""What one replay window measured."""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np
from numpy.typing import ArrayLike

__all__ = ["WindowStats"]


def _frozen_array(x: ArrayLike) -> np.ndarray:
    a = np.array(x, dtype=float)
    a.setflags(write=False)
    return a


def _empty() -> np.ndarray:
    return _frozen_array(())


_EQ: Any = attrs.cmp_using(eq=np.array_equal)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else 0.0


@attrs.frozen
class WindowStats:
    """What happened in the window ``(start_s, end_s]`` of a :class:`ReplayEngine`.

    Per-request arrays
        ``request_ids``, ``arrival_s``, ``first_token_s``, ``finish_s``, ``input_tokens``,
        ``output_tokens`` describe every request that *finished* in the window; ``tpot_ms`` is
        ``(finish - first token) / (output - 1)`` over those with more than one output token,
        and ``tpot_replica`` the serial of the replica each of those finished on
        (:attr:`ReplayEngine.replica_serials`): a slow replica shows in its own TPOTs.
        ``ttft_ms`` is over every request whose *first token* came in the window, so a long
        generation does not hide its TTFT until it ends.  ``ttft_ms``, ``tpot_ms`` and the
        unserved ages are what this engine measured: a request handed over from another
        engine (:meth:`ReplayEngine.hand_over`) counts from when it arrived here, and its TPOT
        is left out when its first token came from the other; the per-request times keep
        its original arrival and first token.
    Unserved work
        ``unserved`` requests (queued, prefilling or held without a replica) had no first token
        at ``end_s``; ``unserved_age_ms`` holds their ages (lower bounds of their TTFTs) and
        ``oldest_unserved_age_s`` the largest.  An overloaded queue therefore cannot hide:
        :meth:`p99_ttft_with_unserved_ms` counts the ages as censored TTFT samples.
    Mediators (time averages over the window)
        ``kv_cache_util`` (used / capacity), ``mean_batch_size`` (running sequences per
        replica), ``queue_depth`` (waiting requests per replica, held ones included),
        ``preemption_rate`` (KV evictions per second per replica), ``busy_fraction`` (share of
        replica time spent in iterations) and ``prefill_share`` (share of *busy* time spent in
        iterations that carry prefill tokens).  "Per replica" divides by ``replica_s``, the
        integral of the replica count over the window, so replicas that come and go count for
        the time they existed.
    Step-time components
        ``busy_s``, ``compute_s``, ``memory_s``, ``comm_s``, ``bubble_s`` and ``overhead_s`` sum
        the :class:`StepTime` components of every iteration in the window (replica-seconds);
        :attr:`compute_util`, :attr:`mem_bw_util`, :attr:`comm_share` and
        :attr:`bubble_fraction` derive the mediators from them.
    Prefix cache
        ``prefix_query_tokens`` are the prompt tokens admitted on replicas with a prefix cache
        and ``prefix_hit_tokens`` those served from it (the counters vLLM exports as
        ``prefix_cache_queries`` / ``prefix_cache_hits``); :attr:`prefix_hit_rate` is their
        ratio.
    """

    start_s: float
    end_s: float
    replica_s: float
    request_ids: np.ndarray = attrs.field(
        converter=_frozen_array, eq=_EQ, hash=False, factory=_empty
    )
    arrival_s: np.ndarray = attrs.field(converter=_frozen_array, eq=_EQ, hash=False, factory=_empty)
    first_token_s: np.ndarray = attrs.field(
        converter=_frozen_array, eq=_EQ, hash=False, factory=_empty
    )
    finish_s: np.ndarray = attrs.field(converter=_frozen_array, eq=_EQ, hash=False, factory=_empty)
    input_tokens: np.ndarray = attrs.field(
        converter=_frozen_array, eq=_EQ, hash=False, factory=_empty
    )
    output_tokens: np.ndarray = attrs.field(
        converter=_frozen_array, eq=_EQ, hash=False, factory=_empty
    )
    ttft_ms: np.ndarray = attrs.field(converter=_frozen_array, eq=_EQ, hash=False, factory=_empty)
    tpot_ms: np.ndarray = attrs.field(converter=_frozen_array, eq=_EQ, hash=False, factory=_empty)
    tpot_replica: np.ndarray = attrs.field(
        converter=_frozen_array, eq=_EQ, hash=False, factory=_empty
    )
    unserved_age_ms: np.ndarray = attrs.field(
        converter=_frozen_array, eq=_EQ, hash=False, factory=_empty
    )
    arrivals: int = 0
    first_tokens: int = 0
    output_tokens_generated: int = 0
    preemptions: int = 0
    rejected: int = 0
    requeued: int = 0
    queued_end: int = 0
    running_end: int = 0
    kv_cache_util: float = 0.0
    mean_batch_size: float = 0.0
    queue_depth: float = 0.0
    preemption_rate: float = 0.0
    busy_fraction: float = 0.0
    prefill_share: float = 0.0
    busy_s: float = 0.0
    compute_s: float = 0.0
    memory_s: float = 0.0
    comm_s: float = 0.0
    bubble_s: float = 0.0
    overhead_s: float = 0.0
    prefix_hit_tokens: int = 0
    prefix_query_tokens: int = 0

    @property
    def prefix_hit_rate(self) -> float:
        """Fraction of the prompt tokens served from the prefix cache (0 without queries)."""
        return min(1.0, _ratio(self.prefix_hit_tokens, self.prefix_query_tokens))

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def finished(self) -> int:
        """Requests that finished in the window."""
        return len(self.finish_s)

    @property
    def unserved(self) -> int:
        """Requests without a first token at ``end_s``."""
        return len(self.unserved_age_ms)

    @property
    def oldest_unserved_age_s(self) -> float:
        return float(self.unserved_age_ms.max()) / 1e3 if len(self.unserved_age_ms) else 0.0

    @property
    def backlog_end(self) -> int:
        """Queued plus running requests at ``end_s``."""
        return self.queued_end + self.running_end

    @property
    def throughput_tok_s(self) -> float:
        """Output tokens generated per second of window, over all replicas."""
        return _ratio(self.output_tokens_generated, self.duration_s)

    @property
    def request_throughput_rps(self) -> float:
        return _ratio(self.finished, self.duration_s)

    @property
    def mean_replicas(self) -> float:
        return _ratio(self.replica_s, self.duration_s)

    @property
    def compute_util(self) -> float:
        """Share of replica time the compute-bound parts of iterations take."""
        return min(1.0, _ratio(self.compute_s, self.replica_s))

    @property
    def mem_bw_util(self) -> float:
        """Share of replica time the memory-bound parts of iterations take."""
        return min(1.0, _ratio(self.memory_s, self.replica_s))

    @property
    def comm_share(self) -> float:
        """Share of busy time spent in collective communication."""
        return min(1.0, _ratio(self.comm_s, self.busy_s))

    @property
    def bubble_fraction(self) -> float:
        """Share of busy time lost to pipeline bubbles."""
        return min(1.0, _ratio(self.bubble_s, self.busy_s))

    @property
    def overhead_share(self) -> float:
        return min(1.0, _ratio(self.overhead_s, self.busy_s))

    @staticmethod
    def p50(x: ArrayLike) -> float:
        """Median of ``x``; NaN when empty."""
        a = np.asarray(x, dtype=float)
        return float(np.percentile(a, 50)) if a.size else math.nan

    @staticmethod
    def p99(x: ArrayLike) -> float:
        """99th percentile of ``x`` (linear interpolation); NaN when empty."""
        a = np.asarray(x, dtype=float)
        return float(np.percentile(a, 99)) if a.size else math.nan

    def p99_ttft_with_unserved_ms(self) -> float:
        """p99 TTFT counting each unserved request's age as a (censored) TTFT sample.

        A lower bound on the true p99 that grows with the backlog, where :attr:`ttft_ms` alone
        would only see the lucky requests that were served.  NaN when there is no sample.
        """
        return self.p99(np.concatenate([self.ttft_ms, self.unserved_age_ms]))

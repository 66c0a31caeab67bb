"""Load protocols: how a load generator drives a deployment, and so what its numbers mean.

Public serving benchmarks differ in how they load the server and how they summarise: an
open-loop Poisson stream at a rate, or a closed loop of ``C`` clients that all start at
``t = 0`` and run a fixed number of requests (so the initial burst of ``C`` simultaneous
prompts is part of the reported mean), or a closed loop measured in steady-state windows after
a warm-up.  Lengths are fixed or drawn uniformly from a range around the nominal length.
docs/surrogate.md §7 ("Load protocols") lists which suite does what, with sources.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from koi.errors import InvalidInput

__all__ = ["MAX_CONCURRENCY", "MAX_REQUESTS", "PROTOCOL_PRESETS", "LoadProtocol", "protocol_preset"]

#: Clients a closed loop keeps in flight.  A replica's batch is capped at a few hundred to a
#: few thousand sequences (vLLM's --max-num-seqs defaults to 256) and the replay simulates at
#: most 64 replicas, so 64 x 1,024 clients keep every batch full and the rest only queue; the
#: replay builds each of a run's requests in memory (at this bound about 300 MB and seconds;
#: 100,000,000 clients ran out of memory).
MAX_CONCURRENCY = 65_536
#: Requests in a closed-loop run, each built in memory: the default run (10 x C) at the
#: largest concurrency.
MAX_REQUESTS = 10 * MAX_CONCURRENCY


def _length_range(value: object) -> tuple[float, float]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise InvalidInput(f"length_range: must be a pair (low, high), got {value!r}")
    lo, hi = float(value[0]), float(value[1])
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= 1 <= hi):
        raise InvalidInput(f"length_range: need 0 < low <= 1 <= high, got {value!r}")
    return lo, hi


@attrs.frozen
class LoadProtocol:
    """One load generator's protocol.

    Exactly one of ``rate_rps`` (open loop, Poisson arrivals) or ``concurrency`` (closed loop:
    every finished request issues the next) is set.  Closed loop only:

    * ``burst``: the ``concurrency`` clients start together at ``t = 0`` and the statistics
      cover the whole run of ``request_count`` requests, burst and drain included (what
      benchmark_serving-style tools and genai-perf/aiperf with ``--request-count`` report).
      False: the statistics cover a steady-state window after a warm-up (genai-perf's default
      measurement windows).
    * ``request_count``: requests in a burst run; default ``10 · concurrency``.
    * ``length_range``: each request's input and output lengths are drawn uniformly from
      ``[low · L, high · L]`` around the nominal ``L``; ``(1, 1)`` is fixed lengths.
    """

    rate_rps: float | None = None
    concurrency: int | None = None
    burst: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    request_count: int | None = None
    length_range: tuple[float, float] = attrs.field(default=(1.0, 1.0), converter=_length_range)

    def __attrs_post_init__(self) -> None:
        if (self.rate_rps is None) == (self.concurrency is None):
            raise InvalidInput("protocol: give exactly one of rate_rps or concurrency")
        c = self.concurrency
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise InvalidInput(f"concurrency: must be an integer >= 1, got {c!r}")
        if c is not None and c > MAX_CONCURRENCY:
            raise InvalidInput(f"concurrency: must be <= {MAX_CONCURRENCY}, got {c}")
        r = self.rate_rps
        if r is not None and not (math.isfinite(r) and r > 0):
            raise InvalidInput(f"rate_rps: must be > 0, got {r!r}")
        n = self.request_count
        if n is not None:
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise InvalidInput(f"request_count: must be an integer >= 1, got {n!r}")
            if c is None:
                raise InvalidInput("request_count: only a closed-loop protocol has one")
            if n < c:
                raise InvalidInput(f"request_count: must be >= concurrency {c}, got {n}")
            if n > MAX_REQUESTS:
                raise InvalidInput(f"request_count: must be <= {MAX_REQUESTS}, got {n}")

    @classmethod
    def closed_loop(
        cls,
        concurrency: int,
        *,
        request_count: int | None = None,
        length_spread: float = 0.0,
        burst: bool = True,
    ) -> LoadProtocol:
        """``concurrency`` clients; lengths uniform within ``±length_spread`` (a fraction)."""
        if not (math.isfinite(length_spread) and 0 <= length_spread < 1):
            raise InvalidInput(f"length_spread: must be in [0, 1), got {length_spread!r}")
        return cls(
            concurrency=concurrency,
            burst=burst,
            request_count=request_count,
            length_range=(1.0 - length_spread, 1.0 + length_spread),
        )

    @classmethod
    def open_loop(cls, rate_rps: float) -> LoadProtocol:
        """Poisson arrivals at ``rate_rps`` requests per second."""
        return cls(rate_rps=rate_rps)

    @property
    def requests(self) -> int:
        """Requests in a burst run (closed loop): ``request_count`` or ``10 · concurrency``."""
        if self.concurrency is None:
            raise InvalidInput("requests: an open-loop protocol has no request count")
        return self.request_count if self.request_count is not None else 10 * self.concurrency

    def lengths(self, nominal: int, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lengths around ``nominal`` tokens: uniform integers in the range, at least 1."""
        lo, hi = self.length_range
        if lo == hi == 1.0:
            return np.full(n, nominal, dtype=np.int64)
        low = max(math.floor(lo * nominal), 1)
        high = max(math.floor(hi * nominal), low)
        return rng.integers(low, high + 1, size=n)


# Named protocols of public suites (docs/surrogate.md §7 gives the sources).
PROTOCOL_PRESETS = ("poisson", "inferencemax", "genai-perf-count", "genai-perf-steady")


def protocol_preset(
    name: str, *, concurrency: int | None = None, rate_rps: float | None = None
) -> LoadProtocol:
    """The protocol of a named suite at a load.

    ``poisson``: open loop at ``rate_rps``.  ``inferencemax``: InferenceMAX's client
    (benchmark_serving, ``--num-prompts 10·C --max-concurrency C --request-rate inf
    --random-range-ratio 0.8``; lengths uniform in ``[0.8 L, L]`` as that script's random
    dataset draws them).  ``genai-perf-count``: genai-perf/aiperf with ``--concurrency C
    --request-count 10·C`` and zero length stddev (aiconfigurator's eval runner).
    ``genai-perf-steady``: genai-perf's default steady-state measurement windows, fixed lengths.
    """
    if name == "poisson":
        if rate_rps is None:
            raise InvalidInput("protocol poisson: needs a rate")
        return LoadProtocol.open_loop(rate_rps)
    if concurrency is None:
        raise InvalidInput(f"protocol {name}: needs a concurrency")
    if name == "inferencemax":
        return LoadProtocol(concurrency=concurrency, length_range=(0.8, 1.0))
    if name == "genai-perf-count":
        return LoadProtocol(concurrency=concurrency)
    if name == "genai-perf-steady":
        return LoadProtocol(concurrency=concurrency, burst=False)
    raise InvalidInput(f"protocol: must be one of {', '.join(PROTOCOL_PRESETS)}, got {name!r}")

"""Requests and how they are sampled from a workload profile."""

from __future__ import annotations

import math

import attrs
import numpy as np

from koi.errors import InvalidInput
from koi.types import Arrival, LengthDist, WorkloadProfile

__all__ = ["Request", "batch_requests", "sample_lengths", "sample_requests"]


@attrs.frozen
class Request:
    """One inference request: it arrives, prefills ``input_tokens`` and emits ``output_tokens``.

    Fields are not validated here (millions are built per simulated run); the engine checks
    them when they are submitted.  ``prefix`` names the shared prompt prefix the request starts
    with (-1: none) and ``prefix_tokens`` its length; a replica with a prefix cache
    (:attr:`ReplicaSpec.prefix_cache`) reuses the KV blocks of a prefix it holds.
    """

    id: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    prefix: int = -1
    prefix_tokens: int = 0


def sample_lengths(dist: LengthDist, rng: np.random.Generator, n: int) -> np.ndarray:
    r"""Draw ``n`` token lengths from a :class:`~koi.types.LengthDist`.

    Log-normal with the distribution's mean :math:`m` and coefficient of variation :math:`v`,

    .. math:: \sigma^2 = \ln(1 + v^2), \qquad \mu = \ln m - \sigma^2 / 2,

    rounded to integers and truncated to ``[1, max]`` (so the realised mean is slightly lower
    than :math:`m` when the truncation bites).  ``cv = 0`` gives the constant ``round(mean)``.
    """
    if dist.cv == 0.0:
        value = min(max(round(dist.mean), 1), dist.max)
        return np.full(n, value, dtype=np.int64)
    sigma2 = math.log1p(dist.cv * dist.cv)
    mu = math.log(dist.mean) - sigma2 / 2.0
    draws = rng.lognormal(mu, math.sqrt(sigma2), size=n)
    return np.clip(np.rint(draws), 1, dist.max).astype(np.int64)


def _gaps(workload: WorkloadProfile, rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    if workload.arrival is Arrival.GAMMA:
        # Gamma inter-arrival times with mean 1/rate and the profile's CV: shape k = 1/cv^2.
        shape = 1.0 / (workload.gamma_cv * workload.gamma_cv)
        return rng.gamma(shape, 1.0 / (rate * shape), size=n)
    return rng.exponential(1.0 / rate, size=n)


def sample_requests(
    workload: WorkloadProfile,
    rng: np.random.Generator,
    start_s: float,
    end_s: float,
    *,
    id_start: int = 0,
    rate_scale: float = 1.0,
) -> list[Request]:
    r"""Open-loop arrivals of ``workload`` in ``[start_s, end_s)``.

    Inter-arrival gaps are exponential (Poisson arrivals), constant ``1/rate``, or gamma with
    the profile's ``gamma_cv`` (shape :math:`1/cv^2`, mean :math:`1/\lambda`); the first arrival
    comes one gap after ``start_s``.  Lengths come from :func:`sample_lengths`.  Ids are
    consecutive from ``id_start``.  ``rate_scale`` multiplies the profile's rate (workload drift,
    or a rank's share of a job's traffic).

    Raises
    ------
    InvalidInput
        If the workload has no ``rate_rps`` (a batch workload: use :func:`batch_requests`), or
        the window or scale is invalid.
    """
    if workload.rate_rps is None:
        raise InvalidInput("workload.rate_rps: open-loop sampling needs a request rate")
    if not (math.isfinite(start_s) and math.isfinite(end_s)) or end_s < start_s:
        raise InvalidInput(f"end_s: must be finite and >= start_s ({start_s}), got {end_s}")
    if not (rate_scale > 0 and math.isfinite(rate_scale)):
        raise InvalidInput(f"rate_scale: must be > 0, got {rate_scale}")
    rate = workload.rate_rps * rate_scale
    span = end_s - start_s
    expected = rate * span
    if workload.arrival is Arrival.CONSTANT:
        # Exact multiples of the period: a cumulative sum would drift at window edges.
        count = math.ceil(span * rate) + 1
        arrivals = start_s + np.arange(1, count + 1) / rate
        return _with_lengths(workload, rng, arrivals[arrivals < end_s], id_start)
    times: list[np.ndarray] = []
    t = start_s
    while t < end_s:
        # Draw a little more than expected so one round almost always covers the window.
        n = int(expected + 6.0 * math.sqrt(expected) + 16)
        arr = t + np.cumsum(_gaps(workload, rng, n, rate))
        times.append(arr)
        t = float(arr[-1])
    arrivals = np.concatenate(times) if times else np.empty(0)
    return _with_lengths(workload, rng, arrivals[arrivals < end_s], id_start)


def _with_lengths(
    workload: WorkloadProfile, rng: np.random.Generator, arrivals: np.ndarray, id_start: int
) -> list[Request]:
    n = len(arrivals)
    inputs = sample_lengths(workload.input_len, rng, n)
    outputs = sample_lengths(workload.output_len, rng, n)
    return [
        Request(id_start + i, a, int(x), int(y))
        for i, (a, x, y) in enumerate(
            zip(arrivals.tolist(), inputs.tolist(), outputs.tolist(), strict=True)
        )
    ]


def batch_requests(
    workload: WorkloadProfile,
    rng: np.random.Generator,
    n: int,
    *,
    arrival_s: float = 0.0,
    id_start: int = 0,
) -> list[Request]:
    """``n`` closed-loop requests with lengths from ``workload``, all stamped ``arrival_s``.

    A closed-loop source (:meth:`ReplayEngine.feed`) re-stamps each request with the time it is
    actually issued.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidInput(f"n: must be an integer >= 0, got {n!r}")
    inputs = sample_lengths(workload.input_len, rng, n)
    outputs = sample_lengths(workload.output_len, rng, n)
    return [
        Request(id_start + i, arrival_s, int(x), int(y))
        for i, (x, y) in enumerate(zip(inputs.tolist(), outputs.tolist(), strict=True))
    ]

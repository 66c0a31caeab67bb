"""Was a window in steady state, and what can its observation be compared on?

The surrogate predicts a rank in steady state: requests complete as fast as they arrive.  A
rank offered more than it can serve builds a backlog, and then its p99 TTFT grows with how long
the backlog has been growing (tens of seconds after a few windows) and its batch, queue and
step times sit at their limits: no step-time factor explains that, and learning one from it
corrects every other rank of the stratum for a backlog they do not have.  What such a window
measures reliably is how much the rank served — its capacity — and at what cost.

So S2 compares an overloaded window (completions short of arrivals by more than the
tolerance) on throughput and cost only, and takes its capacity as a sample of the step
correction of the phase its p99 TPOT shows slow (``_corrections.capacity_samples``); a
window that carried a backlog (its queue held more than the tolerance of the window's
arrivals) or drained one (completions above arrivals by more than the tolerance)
likewise, without the capacity sample (its backlog may have emptied part-way).  With
``corrections.batch_windows`` a batch job's window with work queued ran flat out by design
and is read as an overloaded one (saturated).  Latencies, mediators, the risk band's
residuals, band coverage and the detectors then learn only from windows in steady state.

Why the decode step by default: the surrogate's capacity is mostly set by its decode step (on one
H100 replica, doubling the decode time cuts capacity by 45–50 % for most online jobs of the
benchmark mix, doubling the prefill time by 0–10 %; the jobs with a handful of output tokens
and a prefill-bound TP-4 chain are the exceptions), so the implied factor ``in force ×
predicted capacity / served`` is about the one that explains the window, and where capacity
is less elastic it lands between that one and the factor in force (converging from below,
never overshooting).  It is the sample steady windows take from p99 TPOT, by another
measurement.
"""

from __future__ import annotations

import enum
import math

from koi.surrogate import RankPrediction
from koi.types import Mediator, Observation, Outcome

__all__ = ["FLAT_OUT", "Regime", "capacity_sample", "compared_on", "window_regime"]


class Regime(enum.StrEnum):
    """How a rank's window relates to the steady state the surrogate predicts."""

    STEADY = "steady"
    OVERLOADED = "overloaded"  # a backlog grew: completions short of arrivals
    BACKLOGGED = "backlogged"  # a backlog was carried or drained
    SATURATED = "saturated"  # batch work kept queued: the rank ran flat out by design


#: The regimes in which a rank served flat out: its throughput is its capacity.
FLAT_OUT = frozenset({Regime.OVERLOADED, Regime.SATURATED})


#: What a window out of steady state still measures: how much was served, at what cost.
_UNSTEADY = frozenset({Outcome.THROUGHPUT.value, Outcome.COST.value})


def window_regime(o: Observation, tolerance: float, *, batch: bool = False) -> Regime:
    """The regime of ``o``'s window: completions against arrivals, and the requests waiting
    (queue depth per replica × replicas) against arrivals, within ``tolerance``.

    A ``batch`` job's window whose queue held requests ran flat out by design (its host keeps
    work queued for it): saturated -- its throughput is its capacity, and its latencies
    measure how long the queued work waited, not the steps (read as steady, they would teach
    TTFT factors that the chain's online jobs borrow).  A window without arrivals or, for a
    batch job, with nothing queued (its last requests) counts as steady."""
    queue = o.measured(Mediator.QUEUE_DEPTH)
    if batch and queue is not None and queue > 0.0:
        return Regime.SATURATED
    if o.requests <= 0:
        return Regime.STEADY
    if o.completed < (1.0 - tolerance) * o.requests:
        return Regime.OVERLOADED
    waiting = 0.0 if queue is None else queue * max(o.replicas_up, 1)
    if o.completed > (1.0 + tolerance) * o.requests or waiting > tolerance * o.requests:
        return Regime.BACKLOGGED
    return Regime.STEADY


def compared_on(regime: Regime, variable: str) -> bool:
    """Is ``variable`` evidence about the surrogate in a window of ``regime``?"""
    return regime is Regime.STEADY or variable in _UNSTEADY


def capacity_sample(
    o: Observation, rp: RankPrediction, *, settled: bool
) -> tuple[float, float] | None:
    """``(predicted capacity, observed throughput)`` of a window that served flat out
    (overloaded, or saturated batch work), or ``None``.

    The rank served flat out, so its throughput is its capacity, and a slower step is what
    lowers a capacity: the caller turns the pair into step samples (see the module
    docstring).  ``settled``: the rank ran unchanged
    through the whole window — in the window after a launch or resize, part of it was still
    starting and its throughput understates what it can serve.
    """
    if not settled:
        return None
    served = o.measured(Outcome.THROUGHPUT.value)
    capacity = rp.capacity_tok_s
    if served is None or not (0.0 < served < math.inf and 0.0 < capacity < math.inf):
        return None
    return capacity, served

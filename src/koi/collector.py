"""The cyclic garbage collector's pace for long planning runs (a process-wide setting).

A planner tick allocates millions of small objects — predictions, memo keys, candidate
records — and keeps many of them across ticks in its memos.  With CPython's default
thresholds, ``(700, 10, 10)``, that allocation rate runs a full collection, a walk over every
live object of the process, two or three times a tick: a quarter of the process's CPU on
`fleet-xl`'s first two hours (docs/scale.md, "The collector").  Reference counting frees
almost everything a tick discards; the collector is only needed for reference cycles, which
can wait longer.

The setting belongs to the process, not to the planner: :class:`koi.planner.Planner` never
changes it.  koi's own long runs — a ``koi bench`` or ``koi sweep`` run, ``koi agent``'s
loop, ``benchmarks/tick.py`` — run inside :func:`relaxed_collector`; a host that imports koi
may do the same around its own loop.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from koi.errors import InvalidInput

__all__ = ["RELAXED_THRESHOLDS", "relaxed_collector"]

#: Collect the youngest generation every 100,000 net allocations instead of every 700, and
#: the older two after 50 and 100 of the younger (CPython's own 25 % rule still gates the
#: full collection).
RELAXED_THRESHOLDS = (100_000, 50, 100)


@contextmanager
def relaxed_collector(thresholds: tuple[int, int, int] = RELAXED_THRESHOLDS) -> Iterator[None]:
    """Run the body with the collector's ``thresholds`` (``gc.set_threshold``), restoring the
    process's own on exit."""
    if len(thresholds) != 3 or any(
        isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in thresholds
    ):
        raise InvalidInput(f"thresholds: expected three integers >= 1, got {thresholds!r}")
    before = gc.get_threshold()
    gc.set_threshold(*thresholds)
    try:
        yield
    finally:
        gc.set_threshold(*before)

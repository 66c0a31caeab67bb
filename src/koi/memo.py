"""A memo bounded by what recent ticks used: the planner's caches without unbounded growth.

The planner keeps memos across ticks (screens, predictions, step times) because the same
jobs and ladders come back every tick.  Most keys also carry something that moves — a
correction, a batch job's clock — so a memo that only grows holds mostly entries no tick
will ask for again: a planner left running for days would run out of memory.  A
:class:`Memo` keeps two generations: :meth:`age` (once per tick) turns the new generation
into the old one and drops the old one, and a hit in the old generation moves the entry back
to the new one.  So it holds what the last two ticks used, whatever the fleet's size and
however long the planner runs.  ``limit`` caps one
generation as well (it ages early when the new one fills), for callers that never age it.
"""

from __future__ import annotations

from typing import Generic, TypeVar, cast

from koi.errors import InvalidInput

__all__ = ["Memo"]

K = TypeVar("K")
V = TypeVar("V")
_MISSING = object()


class Memo(Generic[K, V]):
    """Two generations of memoized values (see the module docstring); ``None`` is a value."""

    __slots__ = ("_new", "_old", "limit")

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInput(f"limit: must be an integer >= 1, got {limit!r}")
        self.limit = limit
        self._new: dict[K, V] = {}
        self._old: dict[K, V] = {}

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value memoized for ``key`` (moved to the new generation), else ``default``."""
        hit = self._new.get(key, _MISSING)
        if hit is _MISSING:
            hit = self._old.pop(key, _MISSING)
            if hit is _MISSING:
                return default
            self._new[key] = cast(V, hit)
        return cast(V, hit)

    def put(self, key: K, value: V) -> V:
        """Memoize ``value`` for ``key`` and return it."""
        if len(self._new) >= self.limit and key not in self._new:
            self.age()
        self._new[key] = value
        return value

    def age(self) -> None:
        """End a generation: what was not used since the last call is forgotten at the next."""
        self._old = self._new
        self._new = {}

    def __contains__(self, key: object) -> bool:
        return key in self._new or key in self._old

    def __len__(self) -> int:
        return len(self._new) + len(self._old)

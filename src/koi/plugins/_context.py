"""The typed batches the plugin facade hands back to the planner."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from koi.dag import MechanismProposal
from koi.errors import InvalidInput, PluginError
from koi.types import Ladder, LaunchResult, Observation

__all__ = [
    "LaunchBatch",
    "MechanismBatch",
    "ProposalBatch",
    "Rejection",
    "TelemetryBatch",
]


def _mapping(value: Mapping[str, Any]) -> Mapping[str, Any]:
    # A private copy: a proposer can neither see later edits nor make any.
    return dict(value)


def _any_tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(value)


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class Rejection:
    """A proposal that was dropped, who made it, and why (goes into the tick report).

    .. versionadded:: 0.1
    """

    plugin: str
    reason: str
    ladder: Ladder | None = None


@attrs.frozen
class ProposalBatch:
    """Validated ladders for one job, deduplicated and sorted canonically.

    ``sources[k]`` names the plugins that proposed ``ladders[k]``; ``errors`` holds one
    :class:`PluginError` per proposer that failed outright (it was skipped), ``rejections``
    the individual proposals that were dropped.

    .. versionadded:: 0.1
    """

    ladders: tuple[Ladder, ...] = ()
    sources: tuple[tuple[str, ...], ...] = ()
    errors: tuple[PluginError, ...] = attrs.field(default=(), eq=False)
    rejections: tuple[Rejection, ...] = ()

    def __attrs_post_init__(self) -> None:
        if len(self.sources) != len(self.ladders):
            msg = f"sources: must have one entry per ladder ({len(self.ladders)})"
            raise InvalidInput(f"{msg}, got {len(self.sources)}")


@attrs.frozen
class TelemetryBatch:
    """Observations from every telemetry source, sorted by ``(job_id, chain, start_s)``.

    ``skipped`` explains each observation that was dropped; ``errors`` each source that raised.

    .. versionadded:: 0.1
    """

    observations: tuple[Observation, ...] = ()
    errors: tuple[PluginError, ...] = attrs.field(default=(), eq=False)
    skipped: tuple[Rejection, ...] = ()


@attrs.frozen
class LaunchBatch:
    """What the launchers report, sorted by ``(job_id, plugin)``.

    ``sources[k]`` is the launcher that produced ``results[k]``.

    .. versionadded:: 0.1
    """

    results: tuple[LaunchResult, ...] = ()
    sources: tuple[str, ...] = ()
    errors: tuple[PluginError, ...] = attrs.field(default=(), eq=False)

    def materialized(self, job_id: str) -> Ladder:
        """Every rank that came up for ``job_id``, across launchers."""
        ranks = [r for res in self.results if res.job_id == job_id for r in res.materialized.ranks]
        return Ladder(tuple(ranks))


@attrs.frozen
class MechanismBatch:
    """Mechanism proposals in plugin-name order, with the plugin that made each.

    .. versionadded:: 0.1
    """

    proposals: tuple[MechanismProposal, ...] = attrs.field(default=(), hash=False)
    sources: tuple[str, ...] = ()
    errors: tuple[PluginError, ...] = attrs.field(default=(), eq=False)

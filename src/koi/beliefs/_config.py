"""Every default of the beliefs package in one frozen config."""

from __future__ import annotations

import attrs

from koi.beliefs._invariance import InvarianceConfig
from koi.beliefs._update import UpdateTable

__all__ = ["BeliefConfig"]


@attrs.frozen
class BeliefConfig:
    """Update magnitudes per quadrant and verdict, and the invariance test's settings."""

    table: UpdateTable = attrs.field(factory=UpdateTable)
    invariance: InvarianceConfig = attrs.field(factory=InvarianceConfig)

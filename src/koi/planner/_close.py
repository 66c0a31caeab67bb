"""S7: the state the tick leaves behind, and the report the audit hook gets.

The slow loop (paper §2.5) sees each committed tick's Q1 rate and reconfiguration rate; a
fallback tick or an ablation without learning leaves the calibration as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from koi.calibration import TickSignals
from koi.config import KoiConfig
from koi.planner._report import TickResult
from koi.planner._state import LedgerEntry, PlannerState
from koi.types import ActionKind, Chain, ClusterSnapshot

__all__ = ["closed_state", "tick_report"]


def closed_state(
    state: PlannerState,
    snapshot: ClusterSnapshot,
    result: TickResult,
    ledger: Mapping[tuple[str, Chain], LedgerEntry],
    cfg: KoiConfig,
    *,
    applied: bool = True,
) -> PlannerState:
    """``state`` after the tick: the new ledger, the calibration step, the tick counter.

    An advisory tick (``applied`` false) changed nothing in the fleet: no reconfiguration for
    the slow loop's λ to follow."""
    active = len(snapshot.active)
    reconfigured = (
        sum(a.kind is ActionKind.RECONFIGURE for a in result.plan.actions) if applied else 0
    )
    calibration = state.calibration
    if not result.fallback and cfg.planner.learning:
        calibration = calibration.observe(
            TickSignals(
                q1_rate=result.learning.q1_rate,
                reconfig_rate=reconfigured / active if active else 0.0,
            ),
            cfg.calibration,
        )
    return attrs.evolve(
        state,
        ledger=dict(ledger),
        calibration=calibration,
        tick=state.tick + 1,
        last_time_s=snapshot.time_s,
    )


def tick_report(state: PlannerState, result: TickResult, *, launched: bool) -> dict[str, Any]:
    """What ``koi_plan_committed`` hooks receive with the plan."""
    return {
        "tick": state.tick,
        "launched": launched,
        "selector": result.selector_status,
        "knobs": dict(result.knobs),
        "errors": list(result.errors),
    }

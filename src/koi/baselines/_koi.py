"""koi and its ablations as benchmark policies, recording the calibration signals per tick."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs

from koi.config import KoiConfig
from koi.planner import Planner
from koi.types import ClusterSnapshot, Observation, Plan

__all__ = ["KoiPolicy", "koi_config"]


def koi_config(name: str, base: KoiConfig | None = None) -> KoiConfig:
    """koi's benchmark configuration for ``koi``, ``koi-frozen`` (no online updates) or
    ``koi-nograph`` (no causal graph: no strata, mechanisms or exploration).

    No wall-clock limit on the proposers, the solver or the tick: a benchmark run must depend
    only on (scenario, seed, planner), never on how busy the machine is."""
    cfg = base or KoiConfig()
    cfg = attrs.evolve(
        cfg,
        planner=attrs.evolve(cfg.planner, proposer_timeout_s=None, tick_deadline_s=None),
        selector=attrs.evolve(cfg.selector, time_limit_s=None),
    )
    if name == "koi-frozen":
        return attrs.evolve(cfg, planner=attrs.evolve(cfg.planner, learning=False))
    if name == "koi-nograph":
        return attrs.evolve(cfg, planner=attrs.evolve(cfg.planner, causal_graph=False))
    return cfg


def _num(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


class KoiPolicy:
    """A :class:`~koi.planner.Planner` run as a policy, keeping each tick's evidence and knobs.

    ``calibration`` holds, per tick: the mean edge uncertainty, the Q1 rate, the evidence
    coverage, ε and the band's empirical coverage, β, λ, the swap budget, the number of
    admitted mechanisms, whether the tick fell back to the safe plan, and the tick's stage
    timings (where planning time goes).
    """

    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        self.name = planner.name
        self.calibration: list[dict[str, Any]] = []

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        result = self.planner.tick(snapshot, observations)
        learned, kn = result.learning, result.knobs
        self.calibration.append(
            {
                "time_s": snapshot.time_s,
                "mean_uncertainty": _num(learned.mean_uncertainty),
                "q1_rate": _num(learned.q1_rate),
                "evidence_coverage": _num(learned.coverage),
                "compared": _num(learned.compared if not result.fallback else None),
                "mechanisms": _num(learned.mechanisms if not result.fallback else None),
                "epsilon": _num(kn.get("epsilon")),
                "coverage": _num(kn.get("coverage")),
                "beta": _num(kn.get("beta")),
                "lambda": _num(kn.get("lambda")),
                "swap_budget": _num(kn.get("swap_budget")),
                "fallback": bool(result.fallback),
                "timings_s": {k: float(v) for k, v in result.timings_s.items()},
                "errors": len(result.errors),
            }
        )
        return result.plan

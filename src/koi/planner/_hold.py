"""Held inputs: what the plan reads of the learning, moved only when it moved materially.

The estimates koi learns from telemetry — the corrections a chain borrows, the risk band's
residuals and radius ε, each job's ideal point — move a little on every tick that brings an
observation.  Planning on the raw estimates made every candidate's inputs differ from the tick
before, so no evaluation or sizing was ever reused in a running fleet (docs/scale.md).  Each is
held the way a deployed chain's own correction already is (``sticky`` with
``corrections.hysteresis``): the value in force stays while the fresh estimate is within a band
of it and is released — replaced by the estimate — once the estimate leaves the band
(docs/planner.md, "Held inputs").

One frozen value in the planner state: S3 updates the band's inputs and the ideal points from
the state alone; the borrowed corrections are the ones the tick planned with, recorded after
it (:meth:`HeldInputs.with_borrowed`), as a deployed chain's signature is recorded when it is
observed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from koi.beliefs import Stratum
from koi.config import KoiConfig
from koi.errors import InvalidInput, KoiError
from koi.planner._corrections import (
    HELD_VARIABLES,
    stratum_part,
)
from koi.risk import ResidualHistory, band
from koi.types import Outcome

__all__ = ["HeldInputs", "held_inputs"]

#: The outcomes the risk band covers (``_learn.BAND_OUTCOMES``).
_BAND = (Outcome.TTFT.value, Outcome.TPOT.value, Outcome.THROUGHPUT.value)


@attrs.frozen
class HeldInputs:
    """The values in force: the ``borrowed`` corrections per chain key (as
    :func:`~koi.planner._corrections.correction_signature`, when the chain last borrowed them),
    the band's ``eps`` (``None``: ε as calibrated), the ``residuals`` per (stratum, band
    outcome) the band is drawn from, and each job's ideal point ``z_star``."""

    borrowed: Mapping[str, tuple[float, ...]] = attrs.field(factory=dict)
    eps: float | None = None
    residuals: ResidualHistory | None = None
    z_star: Mapping[str, Mapping[Outcome, float]] = attrs.field(factory=dict)

    def with_borrowed(self, planned: Mapping[str, tuple[float, ...]]) -> HeldInputs:
        """These inputs with the borrowed corrections a tick planned with."""
        if all(self.borrowed.get(k) == v for k, v in planned.items()):
            return self
        return attrs.evolve(self, borrowed={**self.borrowed, **planned})

    def to_data(self) -> dict[str, Any]:
        return {
            "borrowed": {k: list(v) for k, v in sorted(self.borrowed.items())},
            "eps": self.eps,
            "residuals": None if self.residuals is None else self.residuals.to_data(),
            "z_star": {
                job: {o.value: z for o, z in sorted(zs.items())}
                for job, zs in sorted(self.z_star.items())
            },
        }

    @classmethod
    def from_data(cls, data: Any) -> HeldInputs:
        try:
            residuals = data["residuals"]
            eps = data["eps"]
            if eps is not None and not (isinstance(eps, int | float) and math.isfinite(eps)):
                raise InvalidInput(f"eps: must be a finite number, got {eps!r}")
            return cls(
                borrowed={
                    str(k): tuple(float(x) for x in v) for k, v in dict(data["borrowed"]).items()
                },
                eps=None if eps is None else float(eps),
                residuals=None if residuals is None else ResidualHistory.from_data(residuals),
                z_star={
                    job: {Outcome(o): float(z) for o, z in zs.items()}
                    for job, zs in dict(data["z_star"]).items()
                },
            )
        except KeyError as exc:
            raise InvalidInput(f"held: required field {exc} missing") from None
        except (TypeError, ValueError, KoiError) as exc:
            raise InvalidInput(f"held: {exc}") from None


def held_inputs(
    old: HeldInputs,
    *,
    eps: float,
    residuals: ResidualHistory,
    z_star: Mapping[str, Mapping[Outcome, float]],
    stale: Iterable[tuple[str, str]] = (),
    cfg: KoiConfig,
) -> HeldInputs:
    """The inputs in force after S3 learned ``eps``, ``residuals`` and ``z_star``: each old
    value kept while its fresh estimate is within its band, else the estimate.  The borrowed
    corrections are held per chain as they are planned (:func:`correction_fn` compares the
    estimate with them); those of a stratum whose step corrections a divergence reset
    (``stale`` (stratum, variable) pairs) are released here."""
    risk = cfg.risk
    held_eps = old.eps
    if held_eps is None or _prior_edge_shift(held_eps, eps, cfg) > risk.band_hysteresis:
        held_eps = eps
    reset = {s for s, v in stale if v in HELD_VARIABLES}
    return HeldInputs(
        borrowed={k: v for k, v in old.borrowed.items() if stratum_part(k) not in reset},
        eps=held_eps,
        residuals=_held_residuals(old.residuals, residuals, held_eps, cfg),
        z_star=_held_ideal_points(old.z_star, z_star, cfg.corrections.hysteresis),
    )


def _prior_edge_shift(held: float, fresh: float, cfg: KoiConfig) -> float:
    """How far the widest band with no history (``U = 1``) moves its edges, relative to the
    prediction, when ε goes from ``held`` to ``fresh``: ``2·|Δε|·σ_prior``."""
    a = band(1.0, (), held, prior_uncertainty=1.0, cfg=cfg.risk)
    b = band(1.0, (), fresh, prior_uncertainty=1.0, cfg=cfg.risk)
    return max(abs(a.lower - b.lower), abs(a.upper - b.upper))


def _held_residuals(
    old: ResidualHistory | None, fresh: ResidualHistory, eps: float, cfg: KoiConfig
) -> ResidualHistory:
    """Per (stratum, band outcome): the residual window in force, kept while the band drawn
    from the fresh window (at ε in force, at both ends of the prior's uncertainty, between
    which the band is affine) has both edges within ``risk.band_hysteresis`` of the held one."""
    series: dict[tuple[Stratum, str], tuple[float, ...]] = {}
    observed = fresh.keys()  # a history's keys, sorted
    for stratum, objective in observed:
        if objective not in _BAND:
            continue
        now = fresh.get(stratum, objective)
        before = old.get(stratum, objective) if old is not None else ()
        keep = bool(before) and all(
            _edge_shift(before, now, eps, u, cfg) <= cfg.risk.band_hysteresis for u in (0.0, 1.0)
        )
        series[(stratum, objective)] = before if keep else now
    return ResidualHistory(fresh.window, series)


def _edge_shift(
    a: tuple[float, ...], b: tuple[float, ...], eps: float, u: float, cfg: KoiConfig
) -> float:
    x = band(1.0, a, eps, prior_uncertainty=u, cfg=cfg.risk)
    y = band(1.0, b, eps, prior_uncertainty=u, cfg=cfg.risk)
    return max(abs(x.lower - y.lower), abs(x.upper - y.upper))


def _held_ideal_points(
    old: Mapping[str, Mapping[Outcome, float]],
    fresh: Mapping[str, Mapping[Outcome, float]],
    within: float,
) -> dict[str, dict[Outcome, float]]:
    """Per job and objective: the ideal point in force, kept while the tracked best is within
    ``within`` (relative) of it."""
    out: dict[str, dict[Outcome, float]] = {}
    for job, zs in fresh.items():
        mine = old.get(job, {})
        out[job] = {
            o: z if (h := mine.get(o)) is None or abs(z - h) > within * abs(h) else h
            for o, z in zs.items()
        }
    return out

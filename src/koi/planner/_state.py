"""Everything the planner carries from one tick to the next, and its JSON form.

The state is one frozen value: beliefs, mechanisms, CUSUM detectors, residual histories,
residual corrections, the ε calibrator, the slow-loop knobs, the ideal points and the prediction
ledger.  ``to_data``/``from_data`` give the versioned checkpoint body.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from koi.beliefs import EvidenceStore
from koi.calibration import CalibrationState
from koi.cusum import CusumConfig, Detector
from koi.dag import Mechanism
from koi.errors import InvalidInput, KoiError, StateError
from koi.planner._corrections import CorrectionStore
from koi.risk import EpsilonCalibrator, ResidualHistory
from koi.types import Chain, Mediators, Outcome, Outcomes, from_data, to_data

__all__ = ["DetectorKey", "LedgerEntry", "PlannerState"]

DetectorKey = tuple[str, str]  # (stratum key, variable name)


@attrs.frozen
class LedgerEntry:
    """The prediction stored when a rank was committed (DESIGN §3, S6)."""

    job_id: str
    chain: Chain
    replicas: int
    committed_s: float
    outcomes: Outcomes
    mediators: Mediators


@attrs.frozen
class PlannerState:
    """The planner's memory; every field is replaced, never mutated."""

    calibration: CalibrationState
    epsilon: EpsilonCalibrator
    evidence: EvidenceStore = attrs.field(factory=EvidenceStore)
    mechanisms: tuple[Mechanism, ...] = ()
    mechanism_strata: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    detectors: Mapping[DetectorKey, Detector] = attrs.field(factory=dict)
    signatures: Mapping[str, tuple[float, ...]] = attrs.field(factory=dict)
    residuals: ResidualHistory = attrs.field(factory=ResidualHistory)
    corrections: CorrectionStore = attrs.field(factory=CorrectionStore)
    z_star: Mapping[str, Mapping[Outcome, float]] = attrs.field(factory=dict)
    ledger: Mapping[tuple[str, Chain], LedgerEntry] = attrs.field(factory=dict)
    tick: int = 0
    last_time_s: float | None = None

    # ---- checkpoint body ------------------------------------------------------------------
    def to_data(self) -> dict[str, Any]:
        return {
            "tick": self.tick,
            "last_time_s": self.last_time_s,
            "calibration": to_data(self.calibration),
            "epsilon": self.epsilon.to_data(),
            "evidence": self.evidence.to_data(),
            "mechanisms": [m.to_data() for m in self.mechanisms],
            "mechanism_strata": {k: list(v) for k, v in sorted(self.mechanism_strata.items())},
            "detectors": [
                {"stratum": s, "variable": v, "detector": d.to_data()}
                for (s, v), d in sorted(self.detectors.items())
            ],
            "signatures": {k: list(v) for k, v in sorted(self.signatures.items())},
            "residuals": self.residuals.to_data(),
            "corrections": to_data(self.corrections),
            "z_star": {
                job: {o.value: z for o, z in sorted(zs.items())}
                for job, zs in sorted(self.z_star.items())
            },
            "ledger": [to_data(e) for e in self.ledger.values()],
        }

    @classmethod
    def from_data(cls, data: Any, *, cusum: CusumConfig) -> PlannerState:
        """Rebuild a state from :meth:`to_data` output; bad data raises :class:`StateError`
        naming the field (a knob that is NaN, infinite, negative or of the wrong type is
        refused here rather than giving a planner that falls back on every tick)."""
        try:
            if not isinstance(data, Mapping):
                raise InvalidInput(f"must be an object, got {type(data).__name__}")
            _check_knobs(data)
            ledger = [from_data(e, LedgerEntry, where="ledger") for e in data["ledger"]]
            return cls(
                tick=data["tick"],
                last_time_s=data["last_time_s"],
                calibration=from_data(data["calibration"], CalibrationState, where="calibration"),
                epsilon=EpsilonCalibrator.from_data(data["epsilon"]),
                evidence=EvidenceStore.from_data(data["evidence"]),
                mechanisms=tuple(Mechanism.from_data(m) for m in data["mechanisms"]),
                mechanism_strata={k: tuple(v) for k, v in dict(data["mechanism_strata"]).items()},
                detectors={
                    (d["stratum"], d["variable"]): Detector.from_data(d["detector"], cfg=cusum)
                    for d in data["detectors"]
                },
                signatures={
                    k: tuple(float(x) for x in v) for k, v in dict(data["signatures"]).items()
                },
                residuals=ResidualHistory.from_data(data["residuals"]),
                corrections=from_data(data["corrections"], CorrectionStore, where="corrections"),
                z_star={
                    job: {Outcome(o): float(z) for o, z in zs.items()}
                    for job, zs in dict(data["z_star"]).items()
                },
                ledger={(e.job_id, e.chain): e for e in ledger},
            )
        except KeyError as exc:
            raise StateError(f"checkpoint state: required field {exc} missing") from None
        except (TypeError, ValueError, KoiError) as exc:
            raise StateError(f"checkpoint state: {exc}") from None


def _number(value: Any, where: str, *, low: float = -math.inf, allow_inf: bool = False) -> None:
    """A JSON number (not a boolean or a string), not NaN, at least ``low``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{where}: must be a number, got {value!r}")
    if math.isnan(value) or (math.isinf(value) and not allow_inf) or value < low:
        bound = "" if low == -math.inf else f" >= {low:g}"
        raise InvalidInput(f"{where}: must be a finite number{bound}, got {value!r}")


def _integer(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{where}: must be an integer >= 0, got {value!r}")


def _check_knobs(data: Mapping[str, Any]) -> None:
    """The scalars the slow loop and the risk band run on, checked strictly: the packages'
    own ``from_data`` convert with ``float()``/``int()``, which would take ``"0.5"`` or ``true``."""
    _integer(data["tick"], "tick")
    if data["last_time_s"] is not None:
        _number(data["last_time_s"], "last_time_s", low=0.0)
    eps = data["epsilon"]
    if not isinstance(eps, Mapping):
        raise InvalidInput(f"epsilon: must be an object, got {type(eps).__name__}")
    _number(eps["eps"], "epsilon.eps", low=0.0)
    _integer(eps["hits"], "epsilon.hits")
    _integer(eps["outcomes"], "epsilon.outcomes")
    if eps["hits"] > eps["outcomes"]:
        raise InvalidInput(f"epsilon.hits: {eps['hits']} exceeds outcomes {eps['outcomes']}")
    for job, zs in dict(data["z_star"]).items():
        for o, z in dict(zs).items():
            _number(z, f"z_star.{job}.{o}", allow_inf=True)
    for k, v in dict(data["signatures"]).items():
        for i, x in enumerate(v):
            _number(x, f"signatures.{k}[{i}]", allow_inf=True)

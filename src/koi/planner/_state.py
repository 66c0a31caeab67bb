"""Everything the planner carries from one tick to the next, and its JSON form.

The state is one frozen value: beliefs, mechanisms, CUSUM detectors, residual histories,
residual corrections, the ε calibrator, the slow-loop knobs, the ideal points and the prediction
ledger.  ``to_data``/``from_data`` give the versioned checkpoint body.
"""

from __future__ import annotations

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
        """Rebuild a state from :meth:`to_data` output; bad data raises :class:`StateError`."""
        try:
            ledger = [from_data(e, LedgerEntry, where="ledger") for e in data["ledger"]]
            return cls(
                tick=int(data["tick"]),
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
        except (KeyError, TypeError, ValueError, InvalidInput, KoiError) as exc:
            raise StateError(f"checkpoint state is malformed: {exc!r}") from None

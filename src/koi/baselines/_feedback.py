"""``feedback-milp``: the rolling MILP plus latency and capacity corrections from telemetry.

What a good engineer would build without a causal model.  Every observed rank of a running job
is compared with what the surrogate, with the corrections in force, predicts for the job's
current ladder; the implied factor (the factor in force × observed / predicted, so that a
correction does not feed back on itself) is smoothed exponentially — weight ``alpha`` on the
newest window — per (GPU type, model, tensor parallelism, engine) and variable:

* **decode step time**, from p99 TPOT: it scales the surrogate's step model, so predicted TPOT,
  capacity and the queueing part of TTFT all follow;
* **p99 TTFT**, applied to the predicted TTFT on top of that;
* **capacity**: the proposer sizes replicas from its uncorrected screen, so every proposed rank
  is also offered with its replica count scaled by the decode factor (capacity per replica is
  inversely proportional to the step time); both ladders are candidates.

Sizing follows the observed request rate and the proposer's later-round headroom as in
``rolling-milp``.  Plain headroom only: no causal graph, no risk band, no C3, no exploration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from koi.baselines._milp import RollingMilp
from koi.surrogate import RankCorrection
from koi.types import Chain, ClusterSnapshot, Job, Ladder, Observation, Outcome

__all__ = ["FeedbackMilp", "correction_key"]

#: (GPU type, model, tensor parallelism, engine).
CorrectionKey = tuple[str, str, int, str]
_DECODE, _TTFT = "decode_time", "p99_ttft_ms"


def correction_key(chain: Chain) -> CorrectionKey:
    """What a correction is learned per."""
    return chain.environment.gpu, chain.model, chain.config.tp, chain.config.engine


@attrs.define
class FeedbackMilp(RollingMilp):
    """Rolling MILP on a surrogate corrected by exponentially weighted observed/predicted
    ratios; see the module docstring."""

    alpha: float = 0.3
    max_factor: float = 4.0
    factors: dict[tuple[CorrectionKey, str], float] = attrs.field(factory=dict)
    name: str = "feedback-milp"

    def __attrs_post_init__(self) -> None:
        self.toolkit.corrections = self.correction

    def factor(self, chain: Chain, variable: str) -> float:
        return self.factors.get((correction_key(chain), variable), 1.0)

    def correction(self, chain: Chain) -> RankCorrection:
        """The corrections in force for ``chain`` (identity where nothing was observed)."""
        ttft = self.factor(chain, _TTFT)
        return RankCorrection(
            decode_time=self.factor(chain, _DECODE),
            outcomes={Outcome.TTFT: ttft} if ttft != 1.0 else {},
        )

    def learn(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> None:
        """Fold the window's observed/predicted ratios into the smoothed factors."""
        tk = self.toolkit
        jobs = {j.id: j for j in snapshot.jobs}
        current = snapshot.current_ladders
        implied: list[tuple[tuple[CorrectionKey, str], float]] = []
        for obs in observations:
            job, ladder = jobs.get(obs.job_id), current.get(obs.job_id)
            if job is None or ladder is None or obs.requests <= 0 or obs.replicas_up <= 0:
                continue
            pred = tk.surrogate.predict(
                job, ladder, now_s=snapshot.time_s, corrections=self.correction
            )
            if not pred.feasible:
                continue
            rank = next((rp for rp in pred.ranks if rp.rank.chain == obs.chain), None)
            if rank is None:
                continue
            key = correction_key(obs.chain)
            for variable, measured, seen, expected in (
                (_DECODE, "p99_tpot_ms", obs.outcomes.p99_tpot_ms, rank.outcomes.p99_tpot_ms),
                (_TTFT, "p99_ttft_ms", obs.outcomes.p99_ttft_ms, rank.outcomes.p99_ttft_ms),
            ):
                if measured in obs.missing:
                    continue  # the window did not measure it
                if not (0 < seen < math.inf and 0 < expected < math.inf):
                    continue
                ratio = self.factor(obs.chain, variable) * seen / expected
                implied.append(((key, variable), ratio))
        for k, ratio in implied:
            ratio = min(self.max_factor, max(1.0 / self.max_factor, ratio))
            old = self.factors.get(k, 1.0)
            self.factors[k] = (1 - self.alpha) * old + self.alpha * ratio

    def planned(
        self, snapshot: ClusterSnapshot, observations: Sequence[Observation]
    ) -> ClusterSnapshot:
        planned = super().planned(snapshot, observations)
        self.learn(planned, observations)
        return planned

    def resized(self, ladder: Ladder) -> Ladder:
        """``ladder`` with every rank's replicas scaled by its chain's decode factor."""
        ranks = tuple(
            attrs.evolve(
                r, replicas=max(1, math.ceil(r.replicas * self.factor(r.chain, _DECODE) - 1e-9))
            )
            for r in ladder.ranks
        )
        return Ladder(ranks)

    def ladders(self, job: Job, snapshot: ClusterSnapshot, search_round: int) -> list[Ladder]:
        out = super().ladders(job, snapshot, search_round)
        return list(dict.fromkeys([*out, *(self.resized(lad) for lad in out)]))

"""``KoiConfig``: every default of koi in one frozen value, one section per subsystem.

No constant lives anywhere else: each subsystem's section class documents its own knobs, and
the planner passes each section to the code that needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from koi.beliefs import BeliefConfig
from koi.calibration import CalibrationConfig
from koi.candidates import ProposerConfig
from koi.cusum import CusumConfig
from koi.errors import InvalidInput
from koi.risk import RiskConfig
from koi.scoring import ScoringConfig
from koi.selector import BudgetConfig, SelectorConfig
from koi.surrogate import SurrogateConfig
from koi.types.validators import (
    above_one,
    boolean,
    fraction,
    non_negative,
    non_negative_int,
    optional,
    positive,
    positive_int,
)

__all__ = ["CorrectionConfig", "KoiConfig", "PlannerConfig", "with_knobs"]


@attrs.frozen
class PlannerConfig:
    """Knobs of the S0–S7 loop.

    ``tau`` is C3's bound on the predicted SLO-breach probability. ``search_rounds`` bounds the
    S4↔S5 loop; ``max_candidates`` bounds what each proposer may return per job and round.
    ``proposer_timeout_s`` is each proposer's wall-clock budget per round (``None``: no
    wall-clock limit, the benchmark's setting; the solver's limits are ``KoiConfig.selector``'s).
    ``mechanism_min_confidence`` is the belief a mechanism needs before it carries corrections
    to other strata in its scope.
    ``preemption_horizon_s`` is the horizon over which a spot rank's preemption counts as risk.
    ``replay_top`` changes per job (best first, plus the keep ladder) are re-predicted with the
    replay engine after the closed-form screen; the rest keep their screened prediction.
    An online job whose observed request rate exceeds its declared rate by more than
    ``drift_tolerance`` is planned for the observed rate (workload drift); that rate counts
    the requests its ranks hold queued, up to ``backlog_drain`` times the window's arrivals
    (``koi.candidates.observed_rates``).
    ``decide_after`` quiet CUSUM samples make a variable "match" for the quadrants.
    ``tick_deadline_s`` bounds a whole tick in wall-clock time (snapshot, telemetry, proposals,
    selection, launch and audit plugins): a plugin still running at its deadline is abandoned
    and reported, and a tick whose planning runs out of time returns the safe plan.  ``None``
    (as ``koi bench`` runs) means no deadline, so that decisions never depend on machine speed.
    A snapshot of more than ``max_jobs`` jobs is refused with a clear error (S0) rather than
    planned past any reasonable tick time.
    Admission (making room, best effort): ``make_room`` lets the planner propose, for up to
    ``make_room_jobs`` jobs per tick with no candidate within C3 on free capacity, ladders on
    GPUs that jobs of no higher priority could release within their own targets, together
    with those jobs' smaller ladders; a job whose policy is ``serve_best_effort`` also gets its
    ``best_effort_candidates`` ladders on free capacity that carry most of its traffic (then
    the least risky), each worth ``refusal_margin`` times the share it drops less (a pending
    job's first also in smaller sizes, for what the jobs within their targets leave), and
    deferring an online job is worth ``refusal_margin`` less than the worst of them (a batch
    job's deferral keeps its deadline-slack price).
    ``spread_best_effort`` (off by default: it serves more jobs and scores lower, see
    docs/benchmark.md) makes best effort elastic: when no GPU type carries a job alone, ladders
    spread over several are offered; an option that carries a share of the traffic is worth
    that share of serving it (the rest counts as refused); and a running job judged hopeless
    gives way to jobs of no higher priority that can be served within their targets.
    ``slow_replica_ratio``: a replica whose median TPOT is more than this many times its
    siblings' (``Observation.replica_tpot_ms``) in each of the last two windows is a fault — a
    bad GPU, a throttled host — and the plan asks the host to replace it (``JobAction.recycle``)
    rather than sizing the whole job for it; ``None`` (the default: on the benchmark it gained
    nothing, see docs/planner.md) never recycles; 1.5 is the measured choice.
    A running job with nothing new since its last full review (same ladder and declaration,
    traffic within ``drift_tolerance``, clear of its bounds, its keep within C3) is only
    re-checked, keep or stop, and reviewed in full at least every ``review_every`` ticks
    (``1``: every job every tick; see ``koi.planner._review``).
    ``learning`` and ``causal_graph`` exist for the ablations: without learning the evidence
    state never changes (``koi-frozen``); without the causal graph there are no strata, no
    mechanisms and no exploration, and evidence is pooled fleet-wide (``koi-nograph``).
    """

    tau: float = attrs.field(default=0.3, validator=fraction)
    search_rounds: int = attrs.field(default=2, validator=positive_int)
    max_candidates: int = attrs.field(default=12, validator=positive_int)
    proposer_timeout_s: float | None = attrs.field(default=5.0, validator=optional(positive))
    mechanism_min_confidence: float = attrs.field(default=0.6, validator=fraction)
    preemption_horizon_s: float = attrs.field(default=1800.0, validator=positive)
    decide_after: int = attrs.field(default=4, validator=positive_int)
    replay_top: int = attrs.field(default=1, validator=non_negative_int)
    drift_tolerance: float = attrs.field(default=0.15, validator=fraction)
    backlog_drain: float = attrs.field(default=1.0, validator=non_negative)
    max_jobs: int = attrs.field(default=1000, validator=positive_int)
    tick_deadline_s: float | None = attrs.field(default=120.0, validator=optional(positive))
    make_room: bool = attrs.field(default=True, validator=boolean)
    make_room_jobs: int = attrs.field(default=4, validator=non_negative_int)
    best_effort_candidates: int = attrs.field(default=2, validator=non_negative_int)
    refusal_margin: float = attrs.field(default=1.0, validator=non_negative)
    spread_best_effort: bool = attrs.field(default=False, validator=boolean)
    slow_replica_ratio: float | None = attrs.field(default=None, validator=optional(above_one))
    review_every: int = attrs.field(default=4, validator=positive_int)
    learning: bool = attrs.field(default=True, validator=boolean)
    causal_graph: bool = attrs.field(default=True, validator=boolean)


@attrs.frozen
class CorrectionConfig:
    """``window`` implied factors are kept per (stratum, variable); ``min_samples`` are needed
    before a correction applies; factors are clipped to ``[1/max_factor, max_factor]`` and
    rounded to a relative grid of ``quantum`` (so repeated predictions hit the cache).  The
    step times and the p99 latency factors are clipped below at ``min_factor`` instead: the
    surrogate's steps sit near a roofline a real step cannot beat by much (its capacity bias
    against the measured world is within ±0.35 in log on every GPU type), so a window that
    implies a step many times faster measures something else (a prediction past saturation,
    a backlog the world hid) — learned as it was, a 32B model decoded at 2 ms a token.  When a
    stratum's corrections move by more than ``recalibration`` (relative), its CUSUM detectors
    restart: the old predictor's residuals must not accumulate against the new one.  The step
    corrections in force change only when the estimate moves by more than ``hysteresis``.

    A window whose completed requests fell short of its arrivals by more than
    ``backlog_tolerance`` (relative) was overloaded: its latencies measure how long the backlog
    has been growing, not the step time, so they correct nothing and stay out of the risk band;
    its throughput is the rank's capacity and corrects the decode step instead, by at most
    ``overload_step`` times the factor in force per window (a backlog crowds the batch with
    prompts still in prefill, so the throughput understates the capacity).  A window that
    drained a backlog (completions above arrivals by as much) or carried one (its queue held
    more than that share of its arrivals) is left out of latency learning too
    (``koi.planner._regime``).

    ``batch_windows`` (opt-in) learns from a batch job's windows, which report completions
    and no arrivals (its work is queued): one with work queued is saturated, its throughput
    a capacity sample as an overloaded window's.  Off, they are skipped as serving no
    traffic.  On the heterogeneous fleets it gained (``hetero-3h``, ten seeds: a point of
    composite and eight of deadlines; ``hetero-12h``, three seeds: 1.6 points), and on the
    H100-only ``homo-12h`` it lost 3.1 points over six seeds, five of them lower
    (docs/benchmark.md, "Batch windows teach capacity")."""

    window: int = attrs.field(default=12, validator=positive_int)
    min_samples: int = attrs.field(default=1, validator=positive_int)
    max_factor: float = attrs.field(default=20.0, validator=positive)
    min_factor: float = attrs.field(default=0.5, validator=positive)
    quantum: float = attrs.field(default=0.02, validator=positive)
    recalibration: float = attrs.field(default=0.1, validator=positive)
    hysteresis: float = attrs.field(default=0.05, validator=positive)
    backlog_tolerance: float = attrs.field(default=0.15, validator=positive)
    overload_step: float = attrs.field(default=3.0, validator=positive)
    batch_windows: bool = attrs.field(default=False, validator=boolean)


@attrs.frozen
class KoiConfig:
    """All of koi's defaults.  Override a section with ``attrs.evolve``::

    cfg = attrs.evolve(KoiConfig(), planner=attrs.evolve(PlannerConfig(), tau=0.2))
    """

    planner: PlannerConfig = attrs.field(factory=PlannerConfig)
    proposer: ProposerConfig = attrs.field(factory=ProposerConfig)
    surrogate: SurrogateConfig = attrs.field(factory=SurrogateConfig)
    beliefs: BeliefConfig = attrs.field(factory=BeliefConfig)
    cusum: CusumConfig = attrs.field(factory=CusumConfig)
    risk: RiskConfig = attrs.field(factory=RiskConfig)
    corrections: CorrectionConfig = attrs.field(factory=CorrectionConfig)
    scoring: ScoringConfig = attrs.field(factory=ScoringConfig)
    selector: SelectorConfig = attrs.field(factory=SelectorConfig)
    budget: BudgetConfig = attrs.field(factory=BudgetConfig)
    calibration: CalibrationConfig = attrs.field(factory=CalibrationConfig)


def _knob_value(path: str, default: object, value: object) -> object:
    """``value`` in the type of the field's ``default`` (TOML has no tuples; an int may stand
    for a float), or :class:`InvalidInput` naming the knob."""
    if attrs.has(type(default)):
        raise InvalidInput(f"knob {path!r}: is a section; name one of its fields")
    if default is None:
        # An optional field that is off (``slow_replica_ratio``, a time limit): its validator
        # judges the value; a TOML integer stands for a float as elsewhere.
        is_int = isinstance(value, int) and not isinstance(value, bool)
        return float(value) if is_int else value  # type: ignore[arg-type]
    if isinstance(default, bool) or isinstance(value, bool):
        ok = isinstance(default, bool) and isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, int | float)
        value = float(value) if ok else value  # type: ignore[arg-type]
    elif isinstance(default, tuple):
        ok = isinstance(value, list | tuple)
        value = tuple(value) if ok else value  # type: ignore[arg-type]
    else:
        ok = isinstance(value, type(default))
    if not ok:
        kind = type(default).__name__
        raise InvalidInput(f"knob {path!r}: expected a value of type {kind}, got {value!r}")
    return value


def _with_knob(obj: Any, path: str, section: str, parts: list[str], value: object) -> Any:
    names = [f.name for f in attrs.fields(type(obj))]
    head, rest = parts[0], parts[1:]
    if head not in names:
        choices = ", ".join(names)
        raise InvalidInput(f"knob {path!r}: {section} has no field {head!r} (fields: {choices})")
    current = getattr(obj, head)
    if rest and not attrs.has(type(current)):
        raise InvalidInput(f"knob {path!r}: {section}.{head} is a value, not a section")
    new = (
        _with_knob(current, path, f"{section}.{head}", rest, value)
        if rest
        else _knob_value(path, current, value)
    )
    try:
        return attrs.evolve(obj, **{head: new})
    except InvalidInput as exc:
        raise InvalidInput(f"knob {path!r}: {exc}") from None


def with_knobs(cfg: KoiConfig, knobs: Mapping[str, object]) -> KoiConfig:
    """``cfg`` with each knob set, a knob named by its dotted path (``"planner.tau"``,
    ``"selector.time_limit_s"``), its value checked by the field's validator::

        with_knobs(KoiConfig(), {"planner.tau": 0.2, "planner.search_rounds": 1})
    """
    for path, value in knobs.items():
        parts = path.split(".")
        if not all(parts):
            raise InvalidInput(f"knob {path!r}: expected a dotted path like 'planner.tau'")
        cfg = _with_knob(cfg, path, "KoiConfig", parts, value)
    return cfg

"""Residual corrections (DESIGN §4.5.1): per stratum, what the surrogate gets wrong.

Each observation of a deployed rank implies a correction factor for its stratum, its chain and
the job on the chain: the factor in force when the prediction was made times
``observed / predicted``.  The correction is the median of the implied factors since the last
reset, so it converges in a tick or two, shrugs off outliers, and does not feed back on
itself.  The decode step time is corrected from TPOT (it generalises across replica counts and
batch sizes, because the surrogate re-derives queueing from it): its factor is the one under
which the surrogate predicts the TPOT measured (:func:`solved_decode`); p99 TTFT, which mixes
prefill with queueing, and the mediators are corrected directly.  CUSUM divergence resets a variable
so that stale evidence does not linger after the world changed.

This module is the one home of residual corrections: the store (S3 records into it), the
per-chain corrections in force (:func:`correction_fn`, which S2, S5 and the ledger use), and
what the planner remembers of them per stratum.  The surrogate only applies a
:class:`koi.surrogate.RankCorrection`; it never decides one.

Longer than most modules: the store, the corrections in force and the samples S3 records share
one key scheme (stratum, chain, job on the chain) and one factor arithmetic; apart, each would
re-derive them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from koi.config import CorrectionConfig, KoiConfig
from koi.dag import Mechanism, RankContext
from koi.planner._regime import FLAT_OUT, Regime, capacity_sample, compared_on
from koi.planner._strata import GLOBAL, stratum_for
from koi.surrogate import RankCorrection, RankPrediction
from koi.types import Chain, GpuSpec, Job, Mediator, ModelSpec, Observation, Outcome, Rank

if TYPE_CHECKING:  # the state holds a CorrectionStore: import its type only for checking
    from koi.planner._state import PlannerState

__all__ = [
    "DECODE_TIME",
    "PREFILL_TIME",
    "Callbacks",
    "CorrectionEntry",
    "CorrectionStore",
    "SharedCorrections",
    "compared_pairs",
    "correction_fn",
    "correction_key",
    "correction_moved",
    "correction_samples",
    "correction_signature",
    "job_key",
    "outcomes_only",
    "scope_context",
    "tried",
]

DECODE_TIME = "decode_time"
PREFILL_TIME = "prefill_time"
_STEPS = (DECODE_TIME, PREFILL_TIME)
_TTFT = Outcome.TTFT.value
_TPOT = Outcome.TPOT.value

# Additive floors keep ratios of near-zero quantities (an empty queue) from exploding.
_FLOORS: Mapping[str, float] = {
    Mediator.QUEUE_DEPTH.value: 0.5,
    Mediator.MEAN_BATCH.value: 0.5,
    Mediator.PREEMPTION_RATE.value: 0.05,
}
_FRACTION_FLOOR = 0.02
#: The factors no window takes below ``CorrectionConfig.min_factor`` (its docstring says why).
_FLOORED = frozenset((*_STEPS, _TTFT, _TPOT))


@attrs.frozen
class CorrectionEntry:
    """Implied factors for one (stratum, variable)."""

    stratum: str
    variable: str
    factors: tuple[float, ...]


def floor_of(variable: str) -> float:
    """Additive floor for the ratio of ``variable``."""
    if variable in _STEPS or variable.startswith("p99_"):
        return 0.0
    return _FLOORS.get(variable, _FRACTION_FLOOR)


#: How many ``|``-separated fields a stratum key has (``Stratum.key``); a chain key adds more.
_STRATUM_FIELDS = len(GLOBAL.key.split("|"))
_CHAIN_FIELDS = _STRATUM_FIELDS + 2  # the stratum's, then model and tensor parallelism


@attrs.frozen
class CorrectionStore:
    """Immutable map (stratum, variable) -> recent implied factors."""

    entries: tuple[CorrectionEntry, ...] = ()
    _index: Mapping[tuple[str, str], tuple[float, ...]] = attrs.field(
        init=False, eq=False, hash=False, repr=False
    )
    _chains: Mapping[tuple[str, str], list[str]] = attrs.field(
        init=False, eq=False, hash=False, repr=False
    )
    _siblings: Mapping[tuple[str, str], list[str]] = attrs.field(
        init=False, eq=False, hash=False, repr=False
    )
    _engines: Mapping[tuple[str, str], list[str]] = attrs.field(
        init=False, eq=False, hash=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        index = {(e.stratum, e.variable): e.factors for e in self.entries}
        object.__setattr__(self, "_index", index)
        chains: dict[tuple[str, str], list[str]] = {}  # chain keys by (engine, model)
        siblings: dict[tuple[str, str], list[str]] = {}  # and by (stratum, model)
        engines: dict[tuple[str, str], list[str]] = {}  # and by (GPU type, model)
        for key in sorted({k for k, _ in index if k.count("|") == _CHAIN_FIELDS - 1}):
            parts = key.split("|")
            model = parts[_STRATUM_FIELDS]
            chains.setdefault((parts[_STRATUM_FIELDS - 1], model), []).append(key)
            siblings.setdefault(("|".join(parts[:_STRATUM_FIELDS]), model), []).append(key)
            engines.setdefault((parts[0], model), []).append(key)
        object.__setattr__(self, "_chains", chains)
        object.__setattr__(self, "_siblings", siblings)
        object.__setattr__(self, "_engines", engines)

    def chains_of(self, engine: str, model: str, cfg: CorrectionConfig) -> list[str]:
        """The chain keys of ``model`` on ``engine`` (any GPU type) with evidence, sorted."""
        return [k for k in self._chains.get((engine, model), ()) if self.has_evidence(k, cfg)]

    def engines_of(self, gpu: str, model: str, cfg: CorrectionConfig) -> list[str]:
        """The chain keys of ``model`` on GPU type ``gpu`` (any engine, any tensor
        parallelism) with evidence, sorted."""
        return [k for k in self._engines.get((gpu, model), ()) if self.has_evidence(k, cfg)]

    def siblings_of(self, stratum: str, model: str, cfg: CorrectionConfig) -> list[str]:
        """The chain keys of ``model`` in ``stratum`` (its GPU type, any tensor parallelism)
        with evidence, sorted."""
        return [k for k in self._siblings.get((stratum, model), ()) if self.has_evidence(k, cfg)]

    def factor(self, stratum: str, variable: str, cfg: CorrectionConfig) -> float | None:
        """The current correction, or ``None`` while there is too little evidence."""
        factors = self._index.get((stratum, variable), ())
        if len(factors) < cfg.min_samples:
            return None
        return statistics.median(factors)

    def samples(self, stratum: str, variable: str) -> int:
        return len(self._index.get((stratum, variable), ()))

    def has_evidence(self, key: str, cfg: CorrectionConfig) -> bool:
        """Does ``key`` have a step correction (decode or prefill step, p99 TTFT) in force?"""
        return any(self.samples(key, v) >= cfg.min_samples for v in (*_STEPS, _TTFT, _TPOT))

    def record(
        self,
        items: Iterable[tuple[str, str, float, float, float]],
        cfg: CorrectionConfig,
    ) -> CorrectionStore:
        """Add ``(stratum, variable, factor_in_force, observed, predicted)`` samples."""
        index = dict(self._index)
        for stratum, variable, in_force, observed, predicted in items:
            floor = floor_of(variable)
            if not (math.isfinite(observed) and math.isfinite(predicted)):
                continue
            if predicted + floor <= 0 or observed + floor <= 0:
                continue
            implied = in_force * (observed + floor) / (predicted + floor)
            least = cfg.min_factor if variable in _FLOORED else 1.0 / cfg.max_factor
            implied = min(cfg.max_factor, max(least, implied))
            key = (stratum, variable)
            index[key] = (*index.get(key, ()), implied)[-cfg.window :]
        return CorrectionStore._from_index(index)

    def reset(self, keys: Iterable[tuple[str, str]]) -> CorrectionStore:
        """Forget the evidence of these (stratum, variable) pairs, the stratum's own and that
        of every chain key inside it (:func:`correction_key`)."""
        drop = set(keys)
        kept = {k: v for k, v in self._index.items() if (_stratum_part(k[0]), k[1]) not in drop}
        if len(kept) == len(self._index):
            return self
        return CorrectionStore._from_index(kept)

    @classmethod
    def _from_index(cls, index: Mapping[tuple[str, str], tuple[float, ...]]) -> CorrectionStore:
        return cls(
            tuple(
                CorrectionEntry(stratum=s, variable=v, factors=f)
                for (s, v), f in sorted(index.items())
            )
        )


def correction_key(chain: Chain, stratum_key: str) -> str:
    """Where a chain's own corrections are learned: its stratum, model and tensor parallelism
    (``gpu|class|engine|model|tpN``).  Every sample is recorded under this key and under the
    stratum's; a chain's own corrections win, and a chain with none yet gets its stratum's.
    Without the causal graph (one global stratum) evidence stays pooled fleet-wide."""
    if stratum_key == GLOBAL.key:
        return stratum_key
    return f"{stratum_key}|{chain.model}|tp{chain.config.tp}"


def job_key(chain_key: str, job_id: str) -> str:
    """Where one job's own corrections on a chain are learned: the chain key and the job.

    Two jobs of one model on one chain can miss differently (a long-prompt job's decode steps
    carry prefill chunks a chat job's do not), and one median of both flips with whichever
    reported last.  Without the causal graph (a chain key that is the global stratum)
    evidence stays pooled fleet-wide."""
    if chain_key.count("|") != _CHAIN_FIELDS - 1:
        return chain_key
    return f"{chain_key}|{job_id}"


def tried(
    store: CorrectionStore, chain: Chain, stratum_key: str, job_id: str, cfg: CorrectionConfig
) -> bool:
    """Has the job run on the chain: does it have step corrections of its own there?"""
    return store.has_evidence(job_key(correction_key(chain, stratum_key), job_id), cfg)


def _stratum_part(key: str) -> str:
    """The stratum key of a stratum or chain correction key."""
    return "|".join(key.split("|")[:_STRATUM_FIELDS])


def correction_fn(
    state: PlannerState,
    job: Job,
    *,
    gpus: Mapping[str, GpuSpec],
    models: Mapping[str, ModelSpec],
    cfg: KoiConfig,
    shared: dict[tuple[Chain, object], RankCorrection] | None = None,
) -> Callable[[Chain], RankCorrection]:
    """The residual corrections in force for ``job``, as the surrogate's per-chain callback.

    The job's own corrections on the chain (:func:`job_key`) once it has any step correction
    there, else the chain's (its model and tensor parallelism in its stratum,
    :func:`correction_key`) once it has any, else the median of its model's other chains in
    the stratum (the same GPU type at other tensor parallelism), else its stratum's.
    Where the stratum has none either, its model's on the same GPU type under other engines,
    else on other GPU types with the same engine (medians; docs/planner.md).  What is still
    without evidence is borrowed through admitted mechanisms (DESIGN §4.5.1): every mechanism
    whose belief has reached ``planner.mechanism_min_confidence`` and whose scope covers the
    chain lends the median correction of the strata it was tested in.

    ``shared`` (:class:`SharedCorrections`) holds the corrections that do not read the job's
    own evidence, for every job with the same :func:`scope_context`.
    """
    cache: dict[Chain, RankCorrection] = {}
    store, cc = state.corrections, cfg.corrections
    confident = [
        m for m in state.mechanisms if m.belief.confidence >= cfg.planner.mechanism_min_confidence
    ]
    context = scope_context(job) if confident else None

    applying: dict[Chain, list[Mechanism]] = {}  # per chain: its variables ask in turn

    def borrowed(chain: Chain, spec: ModelSpec, variable: str) -> float:
        gpu = gpus.get(chain.environment.gpu)
        if gpu is None or not confident:
            return 1.0
        mechanisms = applying.get(chain)
        if mechanisms is None:
            ctx = RankContext.from_rank(Rank(chain, 1), spec, gpu, job)
            mechanisms = applying[chain] = [m for m in confident if m.applies_to(ctx)]
        factors = [
            f
            for m in mechanisms
            for skey in state.mechanism_strata.get(m.id, ())
            if (f := store.factor(skey, variable, cc)) is not None
        ]
        return statistics.median(factors) if factors else 1.0

    def correct(chain: Chain) -> RankCorrection:
        hit = cache.get(chain)
        if hit is not None:
            return hit
        spec = models.get(chain.model)
        if spec is None:
            return RankCorrection()
        skey = stratum_for(chain, spec, cfg).key
        key = correction_key(chain, skey)
        # The job's own evidence on the chain, else the chain's, else its model's at other TP
        # on the GPU type, else its stratum's, else its model's elsewhere, each as a whole: the
        # TTFT factor is relative to the decode step in force when it was learned.
        own = job_key(key, job.id)
        personal = own != key and store.has_evidence(own, cc)
        if personal:
            key = own
        elif shared is not None:
            hit = shared.get((chain, context))
            if hit is not None:
                cache[chain] = hit
                return hit
        sources = [key] if store.has_evidence(key, cc) else [skey]
        if sources[0] != key:
            siblings = store.siblings_of(skey, chain.model, cc)
            if siblings:
                sources = siblings
            elif not store.has_evidence(skey, cc):
                sources = (
                    store.engines_of(chain.environment.gpu, chain.model, cc)
                    or store.chains_of(skey.split("|")[-1], chain.model, cc)
                    or sources
                )

        def learned(variable: str) -> float | None:
            found = [f for s in sources if (f := store.factor(s, variable, cc)) is not None]
            return statistics.median(found) if found else None

        def factor(variable: str) -> float:
            own = learned(variable)
            return own if own is not None else borrowed(chain, spec, variable)

        mediators = {
            m: quantized(f, cc.quantum) for m in Mediator if (f := learned(m.value)) is not None
        }
        # Hysteresis: keep the step corrections in force unless the estimate really moved, so
        # predictions stay cached across ticks and CUSUM is not restarted by noise.
        held = state.signatures.get(key)
        ttft = quantized(factor(Outcome.TTFT.value), cc.quantum)
        decode = quantized(factor(DECODE_TIME), cc.quantum)
        prefill = quantized(factor(PREFILL_TIME), cc.quantum)
        tpot = quantized(factor(_TPOT), cc.quantum)
        if held is not None:
            ttft = sticky(held[0], ttft, cc.hysteresis)
            decode = sticky(held[1], decode, cc.hysteresis)
            if len(held) > _PREFILL_INDEX:  # a signature from before prefill corrections has none
                prefill = sticky(held[_PREFILL_INDEX], prefill, cc.hysteresis)
            if len(held) > _TPOT_INDEX:
                tpot = sticky(held[_TPOT_INDEX], tpot, cc.hysteresis)
        result = RankCorrection(
            prefill_time=prefill,
            decode_time=decode,
            outcomes={Outcome.TTFT: ttft, Outcome.TPOT: tpot},
            mediators=mediators,
        )
        cache[chain] = result
        if shared is not None and not personal:
            shared[chain, context] = result
        return result

    return correct


#: A job's corrections callbacks: all corrections, and the outcome and step corrections only.
Callbacks = tuple[Callable[[Chain], RankCorrection], Callable[[Chain], RankCorrection]]


def scope_context(job: Job) -> tuple[object, ...]:
    """What a mechanism's scope can read of a job (:meth:`RankContext.from_rank`): its class
    and mean request sizes."""
    return (job.job_class, job.workload.input_len.mean, job.workload.output_len.mean)


class SharedCorrections:
    """The corrections in force per chain, worked out once for every job that reads the same
    and kept across ticks while the state they read is unchanged (a memo: it only saves work).

    :func:`correction_fn` reads a job for two things only: its own evidence on a chain
    (:func:`job_key`) and, where a mechanism is confident, what the mechanisms' scopes match
    (:func:`scope_context`).  A chain's correction without the job's own evidence is the same
    for every job of one scope context — for every job while no mechanism is confident — and
    reads no more of the state than the correction store, the signatures and the mechanisms.
    Tenants' copies of a model ask for the same chains, and a tick with no new evidence asks
    for the same corrections as the tick before."""

    def __init__(self) -> None:
        self._inputs: tuple[object, ...] | None = None
        self._by_chain: dict[tuple[Chain, object], RankCorrection] = {}
        self._per_job: dict[tuple[str, object], Callbacks] = {}

    def functions(
        self,
        state: PlannerState,
        job: Job,
        *,
        gpus: Mapping[str, GpuSpec],
        models: Mapping[str, ModelSpec],
        cfg: KoiConfig,
    ) -> Callbacks:
        """``job``'s callbacks: all corrections, and outcome and step corrections only (the
        mediators left out)."""
        inputs = (state.corrections, state.signatures, state.mechanisms)
        if (
            self._inputs is None
            or self._inputs[3] is not cfg
            or self._inputs[4] is not models
            or self._inputs[5] is not gpus
            or self._inputs[:3] != inputs
        ):
            self._inputs = (*inputs, cfg, models, gpus)
            self._by_chain, self._per_job = {}, {}
        key = (job.id, scope_context(job))
        fns = self._per_job.get(key)
        if fns is None:
            full = correction_fn(
                state, job, gpus=gpus, models=models, cfg=cfg, shared=self._by_chain
            )
            fns = self._per_job[key] = (full, outcomes_only(full))
        return fns


def outcomes_only(
    full: Callable[[Chain], RankCorrection],
) -> Callable[[Chain], RankCorrection]:
    """``full`` without the mediator corrections (memoized per chain): scoring does not read
    the predicted mediators, so leaving them out keeps a mediator-only change from
    invalidating cached screens (the outcomes are exactly the same)."""
    memo: dict[Chain, RankCorrection] = {}

    def outcome_only(chain: Chain) -> RankCorrection:
        hit = memo.get(chain)
        if hit is None:
            hit = memo[chain] = attrs.evolve(full(chain), mediators=())
        return hit

    return outcome_only


def sticky(held: float, estimate: float, band: float) -> float:
    return held if abs(math.log(estimate / held)) <= band else estimate


def quantized(factor: float, quantum: float) -> float:
    """Round a correction to a relative grid: predictions with equal corrections share the
    surrogate's cache across ticks, and a 2 % step is well below telemetry noise."""
    if factor == 1.0 or quantum <= 0:
        return factor
    return math.exp(round(math.log(factor) / quantum) * quantum)


def correction_signature(c: RankCorrection) -> tuple[float, ...]:
    """The correction in force, as the comparable tuple the state remembers per stratum:
    TTFT factor, decode step, the mediators, prefill step, TPOT factor (the last two last: a
    checkpoint written before they were learned holds signatures without them)."""
    return (
        c.outcome(Outcome.TTFT),
        c.decode_time,
        *(c.mediator(m) for m in Mediator),
        c.prefill_time,
        c.outcome(Outcome.TPOT),
    )


_MEDIATOR_INDEX = {m.value: 2 + k for k, m in enumerate(Mediator)}
_PREFILL_INDEX = 2 + len(Mediator)
_TPOT_INDEX = _PREFILL_INDEX + 1


def correction_moved(
    a: Sequence[float], b: Sequence[float], variable: str, threshold: float
) -> bool:
    """Did a correction that ``variable``'s prediction depends on move by more than
    ``threshold`` (relative)?  Every variable depends on the TTFT factor and the two step
    factors and the TPOT factor; a mediator also on its own factor."""
    index = [0, 1]
    index.extend(i for i in (_PREFILL_INDEX, _TPOT_INDEX) if min(len(a), len(b)) > i)
    if variable in _MEDIATOR_INDEX:
        index.append(_MEDIATOR_INDEX[variable])
    return any(abs(math.log(b[i] / a[i])) > threshold for i in index)


def observed_value(o: Observation, variable: str, predicted: float) -> float | None:
    """The observed value the learning compares with ``predicted``: ``None`` when it was not
    measured; inside a resolution interval (a histogram bucket), the point of the interval
    nearest the prediction, so that only the part of a miss that the measurement's resolution
    cannot explain counts as evidence."""
    value = o.measured(variable)
    if value is None:
        return None
    bounds = o.bounds(variable)
    if bounds is None or not math.isfinite(predicted):
        return value
    return bounds.closest(predicted)


def compared_pairs(
    o: Observation, rp: RankPrediction, regime: Regime
) -> list[tuple[str, float, float]]:
    """(variable, observed, predicted) for every variable the observation measured and its
    window's regime lets it be compared on."""
    out = []
    for name, pred in [
        *((oc.value, rp.outcomes.get(oc)) for oc in Outcome),
        *((m.value, rp.mediators.get(m)) for m in Mediator),
    ]:
        if compared_on(regime, name) and (obs := observed_value(o, name, pred)) is not None:
            out.append((name, obs, pred))
    return out


def correction_samples(
    skey: str,
    o: Observation,
    rp: RankPrediction,
    in_force: RankCorrection,
    *,
    regime: Regime = Regime.STEADY,
    settled: bool = True,
    capacity_of: CapacityOf | None = None,
    tpot_of: TpotOf | None = None,
    tpot_at: TpotOf | None = None,
    max_factor: float = math.inf,
    overload_step: float = math.inf,
) -> list[tuple[str, str, float, float, float]]:
    """Implied correction samples from one observation (see the module docstring).

    Variables the observation did not measure give no sample.  A steady window's decode step
    factor is the one under which ``tpot_at`` (the rank's p99 TPOT at the window's traffic)
    predicts the TPOT measured (:func:`solved_decode`).  A window out of steady state
    (:mod:`koi.planner._regime`) gives only the step samples of an overloaded, ``settled``
    rank's capacity (:func:`capacity_samples`, which ``capacity_of``, ``tpot_of`` and
    ``max_factor`` are passed to)."""
    if regime is not Regime.STEADY:
        sample = capacity_sample(o, rp, settled=settled)
        if regime not in FLAT_OUT or sample is None:
            return []
        return capacity_samples(
            skey,
            o,
            rp,
            in_force,
            *sample,
            capacity_of=capacity_of,
            tpot_of=tpot_of,
            max_factor=max_factor,
            overload_step=overload_step,
        )
    samples = []
    tpot_pred = rp.outcomes.p99_tpot_ms
    if (tpot := observed_value(o, Outcome.TPOT.value, tpot_pred)) is not None:
        decode = solved_decode(in_force, tpot, tpot_pred, tpot_at, max_factor)
        samples.append((skey, DECODE_TIME, 1.0, decode, 1.0))
    # p99 TTFT mixes prefill with queueing behind decode steps, so no single step-time factor
    # explains it; it gets a direct outcome factor (the prediction scales with it exactly).
    ttft_pred = rp.outcomes.p99_ttft_ms
    if (ttft := observed_value(o, Outcome.TTFT.value, ttft_pred)) is not None:
        samples.append((skey, Outcome.TTFT.value, in_force.outcome(Outcome.TTFT), ttft, ttft_pred))
    for m in Mediator:
        pred = rp.mediators.get(m)
        if (obs := observed_value(o, m.value, pred)) is not None:
            samples.append((skey, m.value, in_force.mediator(m), obs, pred))
    return samples


#: Log-space tolerance and evaluation budget of :func:`solved_decode`: well inside the 2 %
#: quantum corrections are rounded to, in the few screens a tick can spend per rank.
_SOLVE_TOL = 0.01
_SOLVE_STEPS = 5
_MIN_SLOPE = 0.25  # a flatter secant (noise, a capped prediction) would jump too far


def solved_decode(
    in_force: RankCorrection,
    observed: float,
    predicted: float,
    tpot_at: TpotOf | None,
    max_factor: float = math.inf,
) -> float:
    """The decode step factor under which the rank's predicted p99 TPOT is ``observed``.

    TPOT is not proportional to the decode step: a slower step holds more sequences in the
    batch, which slows the step again, so near saturation the prediction grows with the
    step's square or faster.  The proportional update ``in_force · observed / predicted``
    then overshoots and flips: on hetero-3h a Qwen3-30B-A3B rank measured at 13 ms went from
    factor 5.7 (predicted 76 ms) to 0.97, and the planner cut the job to an eighth of its
    replicas.  This solves ``log tpot_at(f) = log observed`` for ``f`` by secant steps in
    log space, kept inside a bracket once one is known (bisection when a step leaves it),
    starting from the factor in force and its prediction.  Without ``tpot_at`` the
    proportional update is the answer (NaN, which records nothing, for an unusable
    prediction)."""
    f0 = in_force.decode_time
    if tpot_at is None or not (0.0 < observed < math.inf and 0.0 < predicted < math.inf):
        return f0 * observed / predicted if 0.0 < predicted < math.inf else math.nan
    target = math.log(observed)
    bound = math.log(max_factor)
    x, g = math.log(f0), math.log(predicted) - target
    slope = 1.0  # d log TPOT / d log f: proportional until two points measure it
    below, above = -math.inf, math.inf  # log factors known to predict too little / too much
    best = (abs(g), x)
    for _ in range(_SOLVE_STEPS):
        if abs(g) <= _SOLVE_TOL:
            break
        if g < 0:
            below = max(below, x)
        else:
            above = min(above, x)
        nxt = min(bound, max(-bound, x - g / slope))
        if not below < nxt < above and math.isfinite(below + above):
            nxt = 0.5 * (below + above)
        if nxt == x:  # pinned at the factor's bound
            break
        tpot = tpot_at(attrs.evolve(in_force, decode_time=math.exp(nxt)))
        # No prediction (past saturation, infeasible) reads as far too slow.
        g_nxt = math.log(tpot) - target if tpot is not None and 0.0 < tpot < math.inf else 1.0
        if g_nxt != g:
            slope = max((g_nxt - g) / (nxt - x), _MIN_SLOPE)
        x, g = nxt, g_nxt
        best = min(best, (abs(g), x))
    return math.exp(best[1])


#: One replica's predicted capacity of the observed chain under a given correction.
CapacityOf = Callable[[RankCorrection], "float | None"]
#: The observed rank's p99 TPOT predicted at the window's traffic under a given correction.
TpotOf = Callable[[RankCorrection], "float | None"]


def capacity_samples(
    skey: str,
    o: Observation,
    rp: RankPrediction,
    in_force: RankCorrection,
    capacity: float,
    served: float,
    *,
    capacity_of: CapacityOf | None = None,
    tpot_of: TpotOf | None = None,
    max_factor: float = math.inf,
    overload_step: float = math.inf,
) -> list[tuple[str, str, float, float, float]]:
    """The step samples of an overloaded window that served ``served`` of a predicted
    ``capacity``: which phase the observations show slow decides which step is corrected.

    The window's p99 TPOT still measures the decode step (the batch runs flat out).  When it is
    at least as far above its prediction as the capacity is below (or was not measured, or no
    ``capacity_of`` is given), the decode step explains the miss and takes the capacity sample.
    When it is not — on homo-12h Mistral-Small on TP 4 served a quarter of its predicted
    capacity at the predicted TPOT — the decode step is corrected from the TPOT it showed and
    the prefill step takes the rest: the factor that brings the predicted capacity down to what
    was served, from the capacity's elasticity in the prefill step at the factor in force
    (``capacity_of`` at the prefill step doubled).  If no prefill factor within
    ``max_factor`` explains the rest (the surrogate's capacity barely moves with its prefill
    step), the decode step takes the capacity sample — the only step that moves the capacity
    that much — and p99 TPOT gets a direct outcome factor (as TTFT does) that keeps it at
    what the window measured (``tpot_of`` predicts it with the new decode step).  Either way
    the corrected prediction agrees with both measurements.  Learned from capacity alone,
    Mistral-Small's decode step was 4-5x too slow, every ladder was predicted past its TPOT
    bound and C3 rejected them all.

    ``short`` (predicted capacity / served) is capped at ``overload_step``: a backlogged
    rank's throughput is a lower bound on its capacity (queued prompts crowd its batch), so
    one window moves a step at most that much, and a rank still overloaded moves it again.
    """
    short = min(capacity / served, overload_step)
    decode_sample = (skey, DECODE_TIME, in_force.decode_time, short, 1.0)
    tpot_pred = rp.outcomes.p99_tpot_ms
    tpot = observed_value(o, Outcome.TPOT.value, tpot_pred)
    if capacity_of is None or tpot is None:
        return [decode_sample]
    if not (0.0 < tpot < math.inf and 0.0 < tpot_pred < math.inf) or tpot / tpot_pred >= short:
        return [decode_sample]
    decode = in_force.decode_time * tpot / tpot_pred
    prefill = in_force.prefill_time
    base = capacity_of(in_force)
    at_decode = capacity_of(attrs.evolve(in_force, decode_time=decode))
    doubled = capacity_of(attrs.evolve(in_force, decode_time=decode, prefill_time=2 * prefill))
    if not (base and at_decode and doubled) or min(base, at_decode, doubled) <= 0:
        return [decode_sample]
    rest = short * at_decode / base  # still missing once the decode step is what TPOT showed
    tpot_sample = (skey, DECODE_TIME, in_force.decode_time, tpot, tpot_pred)
    if rest <= 1.0:
        return [tpot_sample]
    elasticity = math.log(at_decode / doubled) / math.log(2.0)
    if elasticity <= 0.0 or math.log(rest) / elasticity > math.log(max_factor / prefill):
        slower = attrs.evolve(in_force, decode_time=in_force.decode_time * short)
        tpot_at = tpot_of(slower) if tpot_of is not None else None
        if tpot_at is None or not 0.0 < tpot_at < math.inf:
            return [decode_sample]
        # The factor only takes back what the slower decode step added: between the measured
        # TPOT (factor 1) and the prediction scaled with the step (a saturated prediction can
        # grow faster than its step; a factor learned from that would be optimistic below it).
        tpot_at = min(max(tpot_at, tpot), tpot_pred * short)
        return [decode_sample, (skey, _TPOT, in_force.outcome(Outcome.TPOT), tpot, tpot_at)]
    # Bounded like the decode step's: where capacity barely moves with the prefill step, a
    # small shortfall implies a large factor (Llama-3.1-70B's windows taught 17x).
    implied = min(rest ** (1.0 / elasticity), overload_step)
    return [tpot_sample, (skey, PREFILL_TIME, prefill, implied, 1.0)]

"""The planner: one call of :meth:`Planner.tick` runs the S0–S7 loop of paper §2.1.

Each stage is a function of explicit inputs in its own module (DESIGN §3):

========  ============================================  ========================
stage     does                                          module
========  ============================================  ========================
S0, S1    snapshot, telemetry                           ``_observe``
S2, S3    compare with the ledger; update the evidence  ``_learn``, ``_mining``
S4        budget books, proposal rounds                 ``_books``, ``_propose``
S5        C2, prediction, C3, J, Switch, exploration    ``_evaluate``
S6        joint selection, plan, launch, ledger         ``_commit``, ``_stages``
S7        calibration step, checkpoint, audit report    ``_close``, ``_checkpoint``
========  ============================================  ========================

The planner object only holds what outlives a tick: the state, the plugins and the memos that
make the next tick cheaper (screens, cost references, exercised edges, observed rates).

Longer than most modules: what is left here is the order of the stages and the state they
share across a tick (the deadline, batch progress, the memos, the state-file lock), including
the one ordering that makes a tick safe (checkpoint, then launch, then audit); the stages'
logic lives in the modules above.
"""

from __future__ import annotations

import time
import traceback
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import attrs
import pluggy

from koi.beliefs import EdgeKey, Stratum
from koi.calibration import CalibrationState
from koi.candidates import (
    CandidateGenerator,
    ObservedRates,
    OutputLengths,
    with_observed,
)
from koi.catalog import Catalog, load_catalog
from koi.config import KoiConfig
from koi.dag import admit_mechanism, default_dag
from koi.errors import InvalidInput, KoiError, StateError
from koi.planner._admission import admit, struggling
from koi.planner._books import reference_cost
from koi.planner._checkpoint import CheckpointLock, load_checkpoint, save_checkpoint
from koi.planner._close import closed_state, tick_report
from koi.planner._commit import (
    fallback_result,
    ledger_after_launch,
    ledger_entries,
    select_plan,
    selection_problem,
)
from koi.planner._corrections import SharedCorrections
from koi.planner._deadline import TickDeadline
from koi.planner._evaluate import Evaluator, replay_short_lists
from koi.planner._evaluation_memo import EvaluationMemo
from koi.planner._learn import learn
from koi.planner._mining import mine_mechanisms
from koi.planner._observe import (
    checked_observations,
    collect_telemetry,
    take_snapshot,
    with_served_tokens,
)
from koi.planner._progress import (
    Progress,
    late_batch_jobs,
    observed_rate,
    price_deferrals,
    record_progress,
    with_observed_shortfall,
)
from koi.planner._propose import (
    Candidates,
    budget_books,
    dag_view,
    job_mechanisms,
    propose_and_evaluate,
)
from koi.planner._report import LearnReport, TickResult
from koi.planner._review import Review, reviewed, settled_jobs
from koi.planner._safety import finished_jobs, over_capacity, repairs_only, shrunk_ladder
from koi.planner._state import PlannerState
from koi.plugins import (
    DEFAULT_PROPOSER,
    DefaultProposer,
    LaunchBatch,
    PluginHost,
    make_plugin_manager,
    redact,
)
from koi.risk import EpsilonCalibrator, ResidualHistory
from koi.selector import BudgetBooks
from koi.surrogate import RankCorrection, Surrogate
from koi.types import Chain, ClusterSnapshot, Job, Ladder, Observation, Plan

__all__ = ["Planner"]

# The exercised-edges memo starts over past this many ladders (it is a cache, not state).
_EXERCISED_MEMO = 50_000
# The cost scales start over past this many (workload, pools with GPUs) pairs: drifting
# workloads and pools preempted to zero and back add keys a long-running planner never reuses.
_REFERENCE_MEMO = 4_096


class _Stopwatch:
    """Seconds per stage of one tick."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.timings[stage] = now - self._last
        self._last = now


class Planner:
    """Plans an LLM inference fleet, one tick at a time.

    Parameters
    ----------
    config
        Every default (:class:`koi.config.KoiConfig`).
    catalog
        GPU and model specs; the built-in catalog by default.
    plugins
        Plugin instances to register (host snapshot/telemetry/launch, proposers, audit sinks).
    plugin_manager
        A ready manager instead of ``plugins`` (from :func:`koi.plugins.make_plugin_manager`).
    state_path
        Where the state is checkpointed after every tick; an existing checkpoint is resumed.
    use_default_proposer
        Register the built-in deterministic proposer (on by default).
    surrogate
        The predictor; the built-in :class:`koi.surrogate.Surrogate` by default.
    name
        How reports and the benchmark call this planner.
    """

    def __init__(
        self,
        *,
        config: KoiConfig | None = None,
        catalog: Catalog | None = None,
        plugins: Iterable[object] = (),
        plugin_manager: pluggy.PluginManager | None = None,
        state_path: str | Path | None = None,
        use_default_proposer: bool = True,
        surrogate: Surrogate | None = None,
        name: str = "koi",
    ) -> None:
        self.config = config or KoiConfig()
        catalog = catalog or load_catalog()
        self.gpus = dict(catalog.gpus)
        self.models = dict(catalog.models)
        self.surrogate = surrogate or Surrogate(self.gpus, self.models, self.config.surrogate)
        self.name = name
        self.dag = default_dag()
        self.generator = CandidateGenerator(self.surrogate, self.config.proposer)
        pm = plugin_manager or make_plugin_manager(plugins=plugins, entry_points=False)
        if use_default_proposer and pm.get_plugin(DEFAULT_PROPOSER) is None:
            pm.register(DefaultProposer(generator=self.generator), name=DEFAULT_PROPOSER)
        # The built-in proposer runs first and in full; plugin proposers run beside it.
        self.host = PluginHost(pm, serial=frozenset({DEFAULT_PROPOSER}))
        self.books = BudgetBooks(self.config.budget)
        self._reference_costs: dict[object, float] = {}
        self._exercised: dict[Ladder, frozenset[tuple[EdgeKey, Stratum]]] = {}
        self._corrections = SharedCorrections()  # per chain, for every job, across ticks
        self._evaluations = EvaluationMemo()  # per job and candidate, while nothing changed
        self._observed_rates = ObservedRates(self.config.planner.backlog_drain)
        self._output_lengths = OutputLengths()
        self._progress: dict[str, Progress] = {}  # batch progress at the last tick
        self._struggling: frozenset[str] = frozenset()  # jobs telemetry shows near their bounds
        # The window before the last: a replica is recycled when slow in both.
        self._earlier: tuple[Observation, ...] = ()
        self._reviews: dict[str, Review] = {}  # per running job, what its last full review saw
        self._deadline = TickDeadline()
        self.state_path = Path(state_path) if state_path is not None else None
        # One writer per state file: a second planner would overwrite this one's learning.
        self._lock = CheckpointLock(self.state_path) if self.state_path is not None else None
        if self.state_path is not None and self.state_path.exists():
            try:
                data = load_checkpoint(self.state_path)
                self.state = PlannerState.from_data(data, cusum=self.config.cusum)
            except KoiError:
                self.close()  # a refused planner leaves the file to the next attempt
                raise
        else:
            self.state = self.initial_state(self.config)

    def close(self) -> None:
        """Release the state file for another planner (also done when this one is collected)."""
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> Planner:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @staticmethod
    def initial_state(config: KoiConfig) -> PlannerState:
        """The state of a planner that has seen nothing yet."""
        scoring = config.scoring
        return PlannerState(
            calibration=CalibrationState.initial(beta=scoring.beta, lam=scoring.lambda_switch),
            epsilon=EpsilonCalibrator.start(config.risk),
            residuals=ResidualHistory(window=config.risk.window),
        )

    # ---- the tick ---------------------------------------------------------------------------
    def tick(
        self,
        snapshot: ClusterSnapshot | None = None,
        observations: Sequence[Observation] | None = None,
        *,
        launch: bool = True,
    ) -> TickResult:
        """Run S0–S7 once and return the committed plan with its justification.

        ``snapshot`` defaults to the ``koi_snapshot`` hooks; ``observations`` are added to what
        the ``koi_collect_telemetry`` hooks report.  Bad input raises :class:`KoiError` before
        any state changes; a failure inside a stage, or planning past four fifths of
        ``PlannerConfig.tick_deadline_s``, gives the safe plan (keep every active job, defer
        every pending one, stop finished jobs, shed what a shrunk pool no longer holds) with
        the error in the result.  The checkpoint is written before the plan is launched; a
        failed write launches nothing and returns the safe plan with ``committed=False``.

        ``launch=False`` is advisory mode (``koi agent --dry-run``): the plan is made, reported
        and checkpointed, but no ``koi_launch`` hook is called and the prediction ledger keeps
        describing the ladders that really run, since nothing changed in the fleet.
        """
        watch = _Stopwatch()
        self._deadline = deadline = TickDeadline.start(self.config.planner.tick_deadline_s)
        snapshot = take_snapshot(  # S0: bad input raises here
            snapshot,
            self.host,
            gpus=self.gpus,
            models=self.models,
            max_jobs=self.config.planner.max_jobs,
            deadline_s=deadline.plan_by,
            last_time_s=self.state.last_time_s,
        )
        given = checked_observations(observations or (), snapshot)
        # One memo generation per tick: the memos keep what this tick and the last one use.
        self.surrogate.age()
        watch.lap("S0_snapshot")
        errors: list[str] = []
        state = self.state
        obs: Sequence[Observation] = given
        try:
            obs = with_served_tokens(
                collect_telemetry(  # S1
                    self.host, snapshot, given, state.last_time_s, errors, deadline.plan_by
                ),
                snapshot.jobs,
            )
            watch.lap("S1_telemetry")
            state, learned = self._learn(state, snapshot, obs, errors)  # S2 + S3
            watch.lap("S2_S3_learn")
            self._observed_rates.update(obs)
            self._output_lengths.update(obs)
            self._struggling = struggling(obs, snapshot.jobs, self.config.proposer.risk_margin)
            deadline.check("learning")
            result = self._plan(snapshot, state, learned, errors, watch)  # S4–S6
        except KoiError as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            state, result = self.state, fallback_result(snapshot, self.state, errors)
        except Exception as exc:
            errors.append(f"internal error: {exc!r}\n{traceback.format_exc(limit=4)}")
            state, result = self.state, fallback_result(snapshot, self.state, errors)
        ratio = self.config.planner.slow_replica_ratio
        if ratio is not None:  # a slow replica is a fault to replace, whatever the plan does
            plan = result.plan.recycling(obs, self._earlier, ratio, snapshot.pools)
            result = attrs.evolve(result, plan=plan)
        self._earlier = tuple(obs)
        result = self._commit(state, snapshot, result, launch=launch)  # S6 launch + S7
        watch.lap("S7_close")
        errors_out = tuple(redact(e) for e in result.errors)
        return attrs.evolve(result, timings_s=dict(watch.timings), errors=errors_out)

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        """The policy interface of :mod:`koi.sim`: the plan of :meth:`tick`."""
        return self.tick(snapshot, observations).plan

    def corrections_in_force(self, job: Job, chain: Chain) -> RankCorrection:
        """The residual corrections koi's predictions of ``job`` on ``chain`` start from, as
        learned so far: the job's own evidence on the chain, else what it borrows from other
        jobs, chains and GPU types (docs/planner.md, "Corrections in force").  It says why a
        chain is predicted slower or faster than the prior; the state is not changed."""
        if not isinstance(job, Job) or not isinstance(chain, Chain):
            raise InvalidInput(
                "corrections_in_force: needs a Job and a Chain, got "
                f"{type(job).__name__} and {type(chain).__name__}"
            )
        if chain.model != job.model:
            raise InvalidInput(
                f"chain: runs {chain.model!r}, but job {job.id!r} serves {job.model!r}"
            )
        full, _ = self._corrections.functions(
            self.state, job, gpus=self.gpus, models=self.models, cfg=self.config
        )
        return full(chain)

    # ---- S2 + S3 ----------------------------------------------------------------------------
    def _learn(
        self,
        state: PlannerState,
        snapshot: ClusterSnapshot,
        obs: Sequence[Observation],
        errors: list[str],
    ) -> tuple[PlannerState, LearnReport]:
        """Compare and update, then admit the mechanisms this tick's divergences suggest."""
        state = self._ensure_ledger(state, snapshot)  # S2 needs a prediction per rank
        if not self.config.planner.learning:
            return state, LearnReport()
        state, learned = learn(
            state,
            snapshot,
            obs,
            surrogate=self.surrogate,
            gpus=self.gpus,
            models=self.models,
            dag=self.dag,
            cfg=self.config,
        )
        if self.config.planner.causal_graph:
            state = self._admit_mechanisms(state, learned, errors)
        return state, learned

    def _ensure_ledger(self, state: PlannerState, snapshot: ClusterSnapshot) -> PlannerState:
        """Store a prediction for active ranks koi did not commit (e.g. before it started)."""
        missing = [
            a
            for a in snapshot.active
            for r in a.ladder.ranks
            if (a.job_id, r.chain) not in state.ledger
        ]
        if not missing:
            return state
        ledger = dict(state.ledger)
        for a in missing:
            ledger.update(
                ledger_entries(
                    state,
                    snapshot.job(a.job_id),
                    a.ladder,
                    now_s=snapshot.time_s,
                    surrogate=self.surrogate,
                    gpus=self.gpus,
                    models=self.models,
                    cfg=self.config,
                )
            )
        return attrs.evolve(state, ledger=ledger)

    def _admit_mechanisms(
        self, state: PlannerState, learned: LearnReport, errors: list[str]
    ) -> PlannerState:
        """Mechanisms mined from this tick's divergences and proposed by plugins."""
        proposals = mine_mechanisms(
            learned.diverged, learned.examples, dag=self.dag, gpus=self.gpus, models=self.models
        )
        if learned.diverged:
            batch = self.host.propose_mechanisms(self.dag.view(), deadline_s=self._deadline.plan_by)
            errors.extend(str(e) for e in batch.errors)
            proposals.extend(batch.proposals)
        mechanisms = list(state.mechanisms)
        for proposal in proposals:
            admission = admit_mechanism(proposal, self.dag, mechanisms)
            if admission.mechanism is not None:
                mechanisms.append(admission.mechanism)
        if len(mechanisms) == len(state.mechanisms):
            return state
        return attrs.evolve(state, mechanisms=tuple(mechanisms))

    # ---- S4–S6 ------------------------------------------------------------------------------
    def _plan(
        self,
        snapshot: ClusterSnapshot,
        state: PlannerState,
        learned: LearnReport,
        errors: list[str],
        watch: _Stopwatch,
    ) -> TickResult:
        cfg = self.config
        deadline = self._deadline
        finished = finished_jobs(snapshot)
        over = over_capacity(snapshot)  # pools shrunk under what runs: shed the excess
        unfinished = [j for j in snapshot.jobs if j not in finished]
        late = late_batch_jobs(unfinished, snapshot, self._progress)
        running = [
            self._as_planned(
                j,
                snapshot,
                state,
                late_rps=observed_rate(j, snapshot, self._progress) if j.id in late else None,
            )
            for j in unfinished
        ]
        self._progress = record_progress(snapshot)
        # The cost scale is a property of the declared workload and the hardware on offer.
        refs = {j.id: self._reference_cost(snapshot.job(j.id), snapshot) for j in running}
        # Built before the books: they size with the corrections it predicts with.
        evaluator = Evaluator(
            snapshot=snapshot,
            state=state,
            surrogate=self.surrogate,
            gpus=self.gpus,
            models=self.models,
            dag=self.dag,
            cfg=cfg,
            reference_cost=refs,
            exercised=self._exercised_memo(),
            shared_corrections=self._corrections,
            memo=self._evaluations,
        )
        # Every job's keep first: it says which running jobs have nothing new to decide.
        candidates = self._incumbents(running, snapshot, evaluator, over)
        failing = self._struggling | late.keys()
        settled = settled_jobs(
            running,
            candidates,
            snapshot,
            self._reviews,
            tick=state.tick,
            every=cfg.planner.review_every,
            tau=cfg.planner.tau,
            tolerance=cfg.planner.drift_tolerance,
            rates=self._observed_rates.rates,
            unsettled=failing,
            shrunk_pools=over,
        )
        reviewing = [j for j in running if j.id not in settled]
        held: Counter[str] = Counter()
        for job_id in settled:
            held.update(snapshot.current_ladders[job_id].gpus_by_pool())
        books = budget_books(
            self.host,
            self.books,
            snapshot,
            reviewing,
            # A running job's book sizes the options of the engine it runs, which it keeps
            # unless its keep breaches (then its proposals reopen the engine, its book does not).
            screener=lambda job: self.generator.screener_for(snapshot.current_ladders.get(job.id)),
            gpus=self.gpus,
            reference_costs=refs,
            cfg=cfg,
            errors=errors,
            deadline_s=deadline.plan_by,
            corrections=evaluator.corrections,
            held=held,
        )
        watch.lap("S4_books")
        graph = cfg.planner.causal_graph
        propose_and_evaluate(
            reviewing,
            candidates,
            host=self.host,
            evaluator=evaluator,
            books=books,
            view=dag_view(self.dag, state.evidence, causal_graph=graph),
            mechanisms={
                j.id: job_mechanisms(
                    j, state.mechanisms, snapshot, gpus=self.gpus, models=self.models
                )
                for j in reviewing
            },
            evidence=state.evidence if graph else None,
            cfg=cfg,
            errors=errors,
            deadline=deadline,
            late=late,
        )
        if not deadline.passed:  # proposals cut short reviewed only some jobs: none count
            self._reviews = reviewed(
                self._reviews, running, snapshot, settled=settled, rates=self._observed_rates.rates
            )
        watch.lap("S4_S5_propose_evaluate")
        if not deadline.passed:
            replay_short_lists(running, candidates, evaluator)
        watch.lap("S5_replay")
        unpriced = price_deferrals(running, candidates, evaluator)
        for job in running:
            if job.id in late:  # its ladder misses the deadline, whatever the prediction says
                keep = snapshot.current_ladders[job.id]
                candidates[job.id][keep] = evaluator.evaluate(
                    job, keep, key="keep", breach_floor=1.0
                )
        for job_id in failing & snapshot.current_ladders.keys():
            current, mine = snapshot.current_ladders[job_id], candidates[job_id]
            on_over = any(p in over for p in current.gpus_by_pool())
            candidates[job_id] = {
                lad: mine[lad] for lad in repairs_only(mine, current, on_over_pool=on_over)
            }
        admission = admit(
            running,
            candidates,
            evaluator=evaluator,
            generator=self.generator,
            cfg=cfg,
            deadline_passed=deadline.passed,
            unsafe_donors=failing,
        )
        # A batch job the proposer offered nothing (its budget book empty on a full fleet) is
        # priced on the ladders admission added, not on the clock alone.
        price_deferrals(unpriced, candidates, evaluator)
        watch.lap("S5_admission")
        deadline.check("evaluation")
        problem = selection_problem(
            snapshot, state, running, candidates, evaluator, cfg, over, failing=failing
        )
        limit = deadline.solver_limit(cfg.selector.time_limit_s)
        cfg = attrs.evolve(cfg, selector=attrs.evolve(cfg.selector, time_limit_s=limit))
        result = select_plan(
            snapshot,
            state,
            running,
            finished,
            candidates,
            problem,
            learned=learned,
            cfg=cfg,
            errors=errors,
            admission=admission,
            late=late,
        )
        watch.lap("S6_select")
        return result

    def _as_planned(
        self, job: Job, snapshot: ClusterSnapshot, state: PlannerState, *, late_rps: float | None
    ) -> Job:
        """The job as S4–S6 plan it: an online job at its observed rate and output length
        when those drifted up, a late batch job for the work its ladder really gets through."""
        if job.is_online:
            return with_observed(
                job,
                self._observed_rates.get(job.id),
                self._output_lengths.mean(job.id),
                tolerance=self.config.planner.drift_tolerance,
            )
        ladder = snapshot.current_ladders.get(job.id)
        if late_rps is None or ladder is None:
            return job
        predicted = sum(
            e.outcomes.throughput_tok_s
            for r in ladder.ranks
            if (e := state.ledger.get((job.id, r.chain))) is not None
        )
        return with_observed_shortfall(job, predicted, late_rps)

    @staticmethod
    def _incumbents(
        jobs: Sequence[Job],
        snapshot: ClusterSnapshot,
        evaluator: Evaluator,
        over: Mapping[str, int] | None = None,
    ) -> Candidates:
        """Every job's empty ladder (defer or stop) and, if it runs, its keep ladder; on a
        pool shrunk under what runs, also the keep ladder shrunk to the pool's share."""
        current = snapshot.current_ladders
        candidates: Candidates = {}
        for job in jobs:
            mine = candidates.setdefault(job.id, {})
            mine[Ladder()] = evaluator.defer(job)
            if job.id in current:
                mine[current[job.id]] = evaluator.evaluate(job, current[job.id], key="keep")
                smaller = shrunk_ladder(current[job.id], snapshot, over or {})
                if not smaller.is_empty and smaller not in mine:
                    mine[smaller] = evaluator.evaluate(job, smaller, key="shrink")
        return candidates

    def _reference_cost(self, job: Job, snapshot: ClusterSnapshot) -> float:
        """The job's cost scale, memoized per workload and fleet shape (it is a property of the
        hardware on offer, not of the tick).  A pool with no GPUs now offers nothing: a cheap
        empty one would set a scale no ladder can reach, and every placement would then score
        below refusing the job."""
        offered = [p for p in snapshot.pools if p.capacity_gpus > 0]
        key = (job.model, job.job_class, job.workload, tuple(p.id for p in offered))
        hit = self._reference_costs.get(key)
        if hit is None:
            if len(self._reference_costs) >= _REFERENCE_MEMO:
                self._reference_costs.clear()
            screener = self.generator.screener
            hit = reference_cost(job, offered, screener, self.gpus, now_s=snapshot.time_s)
            self._reference_costs[key] = hit
        return hit

    def _exercised_memo(self) -> dict[Ladder, frozenset[tuple[EdgeKey, Stratum]]]:
        """The (edge, stratum) pairs per ladder, kept across ticks (the same ladders come
        back every tick); bounded by starting over."""
        if len(self._exercised) > _EXERCISED_MEMO:
            self._exercised.clear()
        return self._exercised

    # ---- S7 -----------------------------------------------------------------------------------
    def _commit(
        self, state: PlannerState, snapshot: ClusterSnapshot, result: TickResult, *, launch: bool
    ) -> TickResult:
        """S6 launch and S7: checkpoint the new state, then launch, then tell the audit sinks.

        The checkpoint comes first: a plan is handed to the launchers only once the state that
        expects it is on disk.  A failed write launches nothing, keeps the state in memory as
        it is on disk, and returns the safe plan with the error.
        """
        errors = list(result.errors)
        planned = self._closed(state, snapshot, result, launched=None, applied=launch)
        try:
            self._save(planned)
        except StateError as exc:
            errors.append(
                f"checkpoint: {exc}; nothing was launched, the state stays at tick "
                f"{self.state.tick}"
            )
            return attrs.evolve(fallback_result(snapshot, self.state, errors), committed=False)
        self.state = planned
        launched = LaunchBatch()
        if launch:
            launched = self.host.launch(result.plan, deadline_s=self._deadline.launch_by)
            errors.extend(f"launch: {e}" for e in launched.errors)
        if launched.results:  # what materialized may differ from the plan (partial launches)
            actual = self._closed(state, snapshot, result, launched=launched, applied=True)
            if actual.ledger != planned.ledger:
                try:
                    self._save(actual)
                    self.state = actual
                except StateError as exc:  # memory stays what the disk holds
                    errors.append(f"checkpoint after launch: {exc}; ledger from the plan kept")
        report = tick_report(
            self.state, attrs.evolve(result, errors=tuple(errors)), launched=launch
        )
        report["errors"] = [redact(e) for e in report["errors"]]
        failed = self.host.plan_committed(result.plan, report, deadline_s=self._deadline.launch_by)
        errors.extend(f"koi_plan_committed: {e}" for e in failed)
        return attrs.evolve(result, errors=tuple(errors))

    def _closed(
        self,
        state: PlannerState,
        snapshot: ClusterSnapshot,
        result: TickResult,
        *,
        launched: LaunchBatch | None,
        applied: bool,
    ) -> PlannerState:
        """The state after ``result``'s plan (as launched, when the launchers reported); an
        advisory tick (``applied`` false) keeps the ledger of what really runs."""
        ledger = (
            ledger_after_launch(
                state,
                snapshot,
                result.plan,
                launched,
                surrogate=self.surrogate,
                gpus=self.gpus,
                models=self.models,
                cfg=self.config,
            )
            if applied
            else dict(state.ledger)
        )
        return closed_state(state, snapshot, result, ledger, self.config, applied=applied)

    def _save(self, state: PlannerState) -> None:
        if self.state_path is not None:
            save_checkpoint(self.state_path, state.to_data())

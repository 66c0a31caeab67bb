"""The planner: one call of :meth:`Planner.tick` runs the S0–S7 loop of paper §2.1."""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import attrs
import pluggy

from koi.beliefs import Beta, EdgeKey, EvidenceStore, Stratum, stratum_of
from koi.calibration import CalibrationState, TickSignals, swap_budget
from koi.catalog import Catalog, load_catalog
from koi.config import KoiConfig
from koi.dag import (
    DagView,
    Mechanism,
    RankContext,
    admit_mechanism,
    default_dag,
    exercised_decisions,
    exercised_keys,
)
from koi.errors import InvalidInput, KoiError
from koi.planner._books import job_demand, reference_cost
from koi.planner._checkpoint import load_checkpoint, save_checkpoint
from koi.planner._evaluate import Evaluated, Evaluator
from koi.planner._learn import LearnReport, correction_fn, learn
from koi.planner._mining import mine_mechanisms
from koi.planner._report import CandidateReport, TickResult
from koi.planner._state import LedgerEntry, PlannerState
from koi.plugins import PluginHost, ProposalContext, make_plugin_manager
from koi.plugins._default_proposer import DefaultProposer, at_risk_outcomes
from koi.risk import EpsilonCalibrator, ResidualHistory
from koi.selector import (
    BudgetBook,
    BudgetBooks,
    Candidate,
    SelectionProblem,
    pool_capacities,
    select,
)
from koi.surrogate import Surrogate
from koi.types import (
    ActionKind,
    Chain,
    ClusterSnapshot,
    Config,
    Job,
    JobAction,
    Ladder,
    Observation,
    Plan,
    Rank,
)

__all__ = ["Planner"]

DEFAULT_PROPOSER = "koi.default_proposer"
_EXERCISED_MEMO = 50_000
# Scope fields a job fixes whatever ladder it gets.
_JOB_FIELDS = frozenset(
    {"model", "size_class", "is_moe", "params_b", "job_class", "input_len", "output_len"}
)
_RATE_STEP = 1.05


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
        explore = self._stratum_uncertainty if self.config.planner.causal_graph else None
        self.proposer = DefaultProposer(
            self.surrogate, cfg=self.config.proposer, uncertainty=explore
        )
        pm = plugin_manager or make_plugin_manager(plugins=plugins, entry_points=False)
        if use_default_proposer and pm.get_plugin(DEFAULT_PROPOSER) is None:
            pm.register(self.proposer, name=DEFAULT_PROPOSER)
        self.host = PluginHost(pm)
        self.books = BudgetBooks(self.config.budget)
        self._uncertainty_memo: dict[object, object] = {}
        self._reference_costs: dict[object, float] = {}
        self._exercised: dict[Ladder, frozenset[tuple[EdgeKey, Stratum]]] = {}
        self._observed_rates: dict[str, float] = {}
        self.state_path = Path(state_path) if state_path is not None else None
        if self.state_path is not None and self.state_path.exists():
            data = load_checkpoint(self.state_path)
            self.state = PlannerState.from_data(data, cusum=self.config.cusum)
        else:
            self.state = self.initial_state(self.config)
        self._evidence = self.state.evidence  # what this tick's proposers explore against

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
    ) -> TickResult:
        """Run S0–S7 once and return the committed plan with its justification.

        ``snapshot`` defaults to the ``koi_snapshot`` hooks; ``observations`` are added to what
        the ``koi_collect_telemetry`` hooks report.  Bad input raises :class:`KoiError` before
        any state changes; a failure inside a stage gives the safe plan (keep every active job,
        defer every pending one) with the error in the result.
        """
        timings: dict[str, float] = {}
        clock = time.perf_counter()

        def lap(stage: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[stage] = now - clock
            clock = now

        snapshot = self._snapshot(snapshot)  # S0: bad input raises here, nothing changed yet
        given = _checked_observations(observations or ())
        lap("S0_snapshot")
        errors: list[str] = []
        state = self.state
        try:
            obs = self._telemetry(snapshot, given, errors)  # S1
            lap("S1_telemetry")
            state = self._ensure_ledger(state, snapshot)  # S2 needs a prediction per rank
            learned = LearnReport()
            if self.config.planner.learning:
                state, learned = learn(
                    state,
                    snapshot,
                    obs,
                    surrogate=self.surrogate,
                    gpus=self.gpus,
                    models=self.models,
                    dag=self.dag,
                    cfg=self.config,
                )  # S2 + S3
                if self.config.planner.causal_graph:
                    state = self._admit_mechanisms(state, learned, errors)
            self._evidence = state.evidence
            lap("S2_S3_learn")
            self._observed_rates.update(_observed_rates(obs))
            result = self._plan(snapshot, state, learned, errors, timings, lap)  # S4–S6
        except KoiError as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            result = self._fallback(snapshot, errors, timings)
            state = self.state
        except Exception as exc:
            errors.append(f"internal error: {exc!r}\n{traceback.format_exc(limit=4)}")
            result = self._fallback(snapshot, errors, timings)
            state = self.state
        state = self._close(state, snapshot, result)  # S7
        lap("S7_close")
        return attrs.evolve(result, timings_s=dict(timings))

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        """The policy interface of :mod:`koi.sim`: the plan of :meth:`tick`."""
        return self.tick(snapshot, observations).plan

    # ---- S0 / S1 ----------------------------------------------------------------------------
    def _snapshot(self, snapshot: ClusterSnapshot | None) -> ClusterSnapshot:
        if snapshot is None:
            snapshot = self.host.snapshot(time.time())
            if snapshot is None:
                raise InvalidInput("snapshot: none given and no koi_snapshot plugin answered")
        if not isinstance(snapshot, ClusterSnapshot):
            raise InvalidInput(
                f"snapshot: expected a ClusterSnapshot, got {type(snapshot).__name__}"
            )
        unknown = sorted({j.model for j in snapshot.jobs} - set(self.models))
        if unknown:
            raise InvalidInput(
                f"snapshot.jobs: unknown model(s) {unknown}; add them to the catalog"
            )
        return snapshot

    def _telemetry(
        self,
        snapshot: ClusterSnapshot,
        given: Sequence[Observation],
        errors: list[str],
    ) -> list[Observation]:
        ranks = [(a.job_id, r) for a in snapshot.active for r in a.ladder.ranks]
        start = self.state.last_time_s
        if not ranks or start is None or start >= snapshot.time_s:
            return list(given)
        batch = self.host.collect_telemetry(ranks, (start, snapshot.time_s))
        errors.extend(str(e) for e in batch.errors)
        errors.extend(f"telemetry skipped ({s.plugin}): {s.reason}" for s in batch.skipped)
        return [*given, *batch.observations]

    def _ensure_ledger(self, state: PlannerState, snapshot: ClusterSnapshot) -> PlannerState:
        """Store a prediction for active ranks koi did not commit (e.g. before it started)."""
        missing = [
            (a, r)
            for a in snapshot.active
            for r in a.ladder.ranks
            if (a.job_id, r.chain) not in state.ledger
        ]
        if not missing:
            return state
        ledger = dict(state.ledger)
        for a, _ in missing:
            job = snapshot.job(a.job_id)
            ledger.update(self._ledger_entries(state, job, a.ladder, snapshot.time_s))
        return attrs.evolve(state, ledger=ledger)

    def _ledger_entries(
        self, state: PlannerState, job: Job, ladder: Ladder, now_s: float
    ) -> dict[tuple[str, Chain], LedgerEntry]:
        corr = correction_fn(state, job, gpus=self.gpus, models=self.models, cfg=self.config)
        pred = self.surrogate.screen(job, ladder, now_s=now_s, corrections=corr)
        return {
            (job.id, rp.rank.chain): LedgerEntry(
                job_id=job.id,
                chain=rp.rank.chain,
                replicas=rp.rank.replicas,
                committed_s=now_s,
                outcomes=rp.outcomes,
                mediators=rp.mediators,
            )
            for rp in pred.ranks
        }

    def _admit_mechanisms(
        self, state: PlannerState, learned: LearnReport, errors: list[str]
    ) -> PlannerState:
        """Mechanisms mined from this tick's divergences and proposed by plugins."""
        proposals = mine_mechanisms(
            learned.diverged, learned.examples, dag=self.dag, gpus=self.gpus, models=self.models
        )
        if learned.diverged:
            batch = self.host.propose_mechanisms(self.dag.view())
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

    def _with_observed_rate(self, job: Job) -> Job:
        """Plan an online job for the traffic it really carries when that exceeds its declared
        rate: workload drift shows only in telemetry, and the declaration stays the floor."""
        observed = self._observed_rates.get(job.id)
        declared = job.workload.rate_rps
        if not job.is_online or observed is None or declared is None:
            return job
        if observed <= declared * (1 + self.config.planner.drift_tolerance):
            return job
        # On a 5 % grid, so that a drifted job's screens and sizings stay cached across ticks.
        rate = declared * _RATE_STEP ** math.ceil(math.log(observed / declared, _RATE_STEP))
        return attrs.evolve(job, workload=attrs.evolve(job.workload, rate_rps=rate))

    def _reference_cost(self, job: Job, snapshot: ClusterSnapshot) -> float:
        """The job's cost scale, memoized per workload and fleet shape (it is a property of the
        hardware on offer, not of the tick)."""
        key = (job.model, job.job_class, job.workload, tuple(p.id for p in snapshot.pools))
        hit = self._reference_costs.get(key)
        if hit is None:
            hit = reference_cost(job, snapshot, self.proposer, self.gpus)
            self._reference_costs[key] = hit
        return hit

    def _stratum_uncertainty(self, chain: Chain) -> float:
        """Mean edge uncertainty U of the chain's stratum (1 where nothing was learned)."""
        evidence = self._evidence
        memo = self._uncertainty_memo
        if memo.get(None) is not evidence:  # the evidence changed: start over
            memo.clear()
            memo[None] = evidence
        spec = self.models.get(chain.model)
        if spec is None:
            return 1.0
        # U depends on the stratum and the decisions the chain sets, not on the pool or model:
        # keyed so, the thousands of chains a tick screens share a few dozen entries.
        key = (stratum_of(chain, spec), exercised_decisions(chain, 1))
        hit = memo.get(key)
        if isinstance(hit, float):
            return hit
        keys = exercised_keys(Rank(chain, 1), self.models, dag=self.dag)
        u = sum(evidence.uncertainty(e, s) for e, s in keys) / len(keys) if keys else 1.0
        memo[key] = u
        return u

    def _exercised_memo(self) -> dict[Ladder, frozenset[tuple[EdgeKey, Stratum]]]:
        """The (edge, stratum) pairs per ladder, kept across ticks (the same ladders come
        back every tick); bounded by starting over."""
        if len(self._exercised) > _EXERCISED_MEMO:
            self._exercised.clear()
        return self._exercised

    def _dag_view(self, evidence: EvidenceStore) -> DagView:
        """The graph as the proposers' backward query sees it: each edge with the fleet-pooled
        posterior of its beliefs (without the causal graph, the bare structure)."""
        if not self.config.planner.causal_graph:
            return self.dag.view()
        support: dict[EdgeKey, float] = {}
        against: dict[EdgeKey, float] = {}
        for (edge, _), belief in evidence.items():
            support[edge] = support.get(edge, 0.0) + belief.alpha - 1.0
            against[edge] = against.get(edge, 0.0) + belief.beta - 1.0

        def pooled(edge: EdgeKey) -> Beta:
            return Beta(1.0 + support.get(edge, 0.0), 1.0 + against.get(edge, 0.0))

        return self.dag.view(
            confidence=lambda e: pooled(e).confidence,
            uncertainty=lambda e: pooled(e).uncertainty,
        )

    def _job_mechanisms(
        self, job: Job, mechanisms: Sequence[Mechanism], snapshot: ClusterSnapshot
    ) -> tuple[Mechanism, ...]:
        """Admitted mechanisms whose scope can match ``job`` (its model and workload fields;
        the hardware and config fields are the proposer's to match per candidate)."""
        spec = self.models.get(job.model)
        pool = next((p for p in snapshot.pools if p.environment.gpu in self.gpus), None)
        if not mechanisms or spec is None or pool is None:
            return ()
        env = pool.environment
        probe = RankContext.from_rank(
            Rank(Chain(job.model, env, Config()), 1), spec, self.gpus[env.gpu], job
        )
        return tuple(
            m
            for m in mechanisms
            if all(p.matches(probe) for p in m.scope.predicates if p.field in _JOB_FIELDS)
        )

    # ---- S4–S6 ------------------------------------------------------------------------------
    def _plan(
        self,
        snapshot: ClusterSnapshot,
        state: PlannerState,
        learned: LearnReport,
        errors: list[str],
        timings: dict[str, float],
        lap: Callable[[str], None],
    ) -> TickResult:
        cfg = self.config
        finished = [j for j in snapshot.jobs if not (j.is_online or j.remaining_requests > 0)]
        running = [self._with_observed_rate(j) for j in snapshot.jobs if j not in finished]
        # The cost scale is a property of the declared workload and the hardware on offer.
        refs = {j.id: self._reference_cost(snapshot.job(j.id), snapshot) for j in running}
        books = self._budget_books(snapshot, running, refs, errors)
        lap("S4_books")
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
        )
        current = snapshot.current_ladders
        evaluated: dict[str, dict[Ladder, Evaluated]] = {}
        for job in running:
            mine = evaluated.setdefault(job.id, {})
            mine[Ladder()] = evaluator.defer(job)
            if job.id in current:
                mine[current[job.id]] = evaluator.evaluate(job, current[job.id], key="keep")
        feedback: dict[str, tuple[str, ...]] = {}
        dag_view = self._dag_view(state.evidence)  # one view per tick, shared by every job
        at_risk = {
            j.id: tuple(
                f"y:{o.value}" for o in at_risk_outcomes(j, keep.outcomes, cfg.proposer.risk_margin)
            )
            for j in running
            if j.id in current
            and (keep := evaluated[j.id][current[j.id]].prediction) is not None
            and keep.feasible
        }
        mechanisms = {j.id: self._job_mechanisms(j, state.mechanisms, snapshot) for j in running}
        for rnd in range(cfg.planner.search_rounds):
            asked = [j for j in running if rnd == 0 or _needs_another_round(evaluated[j.id])]
            if not asked:
                break
            for job in asked:
                context = ProposalContext(
                    snapshot=snapshot,
                    gpus=self.gpus,
                    models=self.models,
                    deadline_s=_deadline(cfg.planner.proposer_timeout_s),
                    budget=books.get(job.id),
                    dag=dag_view,
                    mechanisms=mechanisms[job.id],
                    incumbent=current.get(job.id),
                    feedback=feedback.get(job.id, ()),
                    round=rnd,
                    max_candidates=cfg.planner.max_candidates,
                    at_risk=at_risk.get(job.id, ()),
                )
                batch = self.host.propose_ladders(job, context)
                errors.extend(str(e) for e in batch.errors)
                mine = evaluated[job.id]
                for ladder, sources in zip(batch.ladders, batch.sources, strict=True):
                    if ladder not in mine:
                        key = f"r{rnd}c{len(mine)}"
                        mine[ladder] = evaluator.evaluate(job, ladder, key=key, sources=sources)
                feedback[job.id] = _feedback(mine.values())
        lap("S4_S5_propose_evaluate")
        for job in running:  # the short list gets the replay engine's p99s
            mine = evaluated[job.id]
            for ladder in _short_list(mine, cfg.planner.replay_top):
                ev = mine[ladder]
                again = evaluator.evaluate(
                    job, ladder, key=ev.report.key, sources=ev.report.sources, replay=True
                )
                mine[ladder] = again
        lap("S5_replay")
        problem = self._problem(snapshot, state, running, evaluated, evaluator)
        if running:
            selection = select(problem, cfg=cfg.selector)
            status, objective, gap = selection.status.value, selection.objective, selection.gap
            chosen, binding = dict(selection.chosen), selection.binding
        else:  # every job finished: nothing to choose
            status, objective, gap, chosen, binding = "empty", 0.0, 0.0, {}, ()
        lap("S6_select")
        actions: list[JobAction] = [
            JobAction(j.id, ActionKind.STOP, Ladder(), "finished") for j in finished
        ]
        reports: list[CandidateReport] = []
        for job in running:
            pick = chosen[job.id]
            for ev in evaluated[job.id].values():
                reports.append(attrs.evolve(ev.report, chosen=ev.report.key == pick))
            ev = next(e for e in evaluated[job.id].values() if e.report.key == pick)
            actions.append(
                JobAction(job.id, ev.report.kind, ev.report.ladder, _reason(ev, evaluated[job.id]))
            )
        plan = Plan(
            time_s=snapshot.time_s,
            actions=tuple(sorted(actions, key=lambda a: a.job_id)),
            diagnostics={"selector": status, "gap": gap},
        )
        return TickResult(
            plan=plan,
            candidates=tuple(reports),
            selector_status=status,
            objective=objective,
            gap=gap,
            binding=binding,
            knobs=self._knobs(state, problem.swap_budget),
            errors=tuple(errors),
            evidence={
                "compared": learned.compared,
                "q1_rate": learned.q1_rate,
                "coverage": learned.coverage,
                "quadrants": dict(learned.quadrants),
                "divergences": list(learned.divergences),
                "mean_uncertainty": state.evidence.mean_uncertainty(),
                "mechanisms": len(state.mechanisms),
                "skipped": list(learned.skipped),
            },
        )

    def _budget_books(
        self,
        snapshot: ClusterSnapshot,
        jobs: Sequence[Job],
        refs: Mapping[str, float],
        errors: list[str],
    ) -> Mapping[str, BudgetBook]:
        from_host = self.host.budget_books(snapshot)
        if from_host is not None:
            return from_host
        demands = []
        for job in jobs:
            d = job_demand(
                job,
                snapshot,
                self.proposer,
                self.gpus,
                reference_cost_per_mtok=refs[job.id],
                scoring=self.config.scoring,
            )
            if d is not None:
                demands.append(d)
        if not demands:
            return {}
        try:
            return self.books.solve(demands, pool_capacities(snapshot))
        except KoiError as exc:
            errors.append(f"budget books: {exc}; proposing over every pool")
            return {}

    def _problem(
        self,
        snapshot: ClusterSnapshot,
        state: PlannerState,
        jobs: Sequence[Job],
        evaluated: Mapping[str, Mapping[Ladder, Evaluated]],
        evaluator: Evaluator,
    ) -> SelectionProblem:
        candidates: list[Candidate] = [
            ev.candidate
            for job in jobs
            for ev in evaluated[job.id].values()
            if ev.candidate is not None
        ]
        held = {a.job_id: a.ladder.gpus_by_pool() for a in snapshot.active}
        regret = state.calibration.regret
        return SelectionProblem(
            candidates=candidates,
            pools=pool_capacities(snapshot),
            exploration_weights=evaluator.exploration_weights(),
            swap_budget=swap_budget(regret, len(snapshot.active), self.config.calibration),
            priority={j.id: j.priority for j in jobs},
            quota_group={j.id: j.quota_group for j in jobs if j.quota_group is not None},
            quota_caps={q.group: q.max_gpus for q in snapshot.quotas},
            held_gpus=held,
        )

    def _knobs(self, state: PlannerState, swap: int | None) -> dict[str, float]:
        c = state.calibration
        return {
            "beta": c.beta,
            "lambda": c.lam,
            "regret": c.regret,
            "epsilon": state.epsilon.eps,
            "coverage": state.epsilon.coverage,
            "swap_budget": float(swap if swap is not None else math.inf),
        }

    def _fallback(
        self, snapshot: ClusterSnapshot, errors: list[str], timings: dict[str, float]
    ) -> TickResult:
        """Keep every active job, defer every pending job (DESIGN §3 "safe fallback")."""
        current = snapshot.current_ladders
        actions = tuple(
            JobAction(j.id, ActionKind.KEEP, current[j.id], "safe fallback")
            if j.id in current
            else JobAction(j.id, ActionKind.DEFER, Ladder(), "safe fallback")
            for j in snapshot.jobs
        )
        plan = Plan(time_s=snapshot.time_s, actions=actions, diagnostics={"fallback": True})
        return TickResult(
            plan=plan,
            candidates=(),
            selector_status="fallback",
            objective=math.nan,
            gap=math.nan,
            knobs=self._knobs(self.state, None),
            errors=tuple(errors),
            fallback=True,
        )

    # ---- S6 launch + S7 close -----------------------------------------------------------------
    def _close(
        self, state: PlannerState, snapshot: ClusterSnapshot, result: TickResult
    ) -> PlannerState:
        plan = result.plan
        launched = self.host.launch(plan) if not result.fallback else None
        ledger = {k: v for k, v in state.ledger.items() if k[0] in plan.ladders}
        for action in plan.actions:
            if action.ladder.is_empty or action.kind is ActionKind.KEEP:
                continue
            ladder = action.ladder
            if launched is not None and any(r.job_id == action.job_id for r in launched.results):
                ladder = launched.materialized(action.job_id)
            if ladder.is_empty:
                continue
            job = snapshot.job(action.job_id)
            ledger = {k: v for k, v in ledger.items() if k[0] != job.id}
            ledger.update(self._ledger_entries(state, job, ladder, snapshot.time_s))
        active = len(snapshot.active)
        reconfigured = sum(a.kind is ActionKind.RECONFIGURE for a in plan.actions)
        calibration = state.calibration
        if not result.fallback and self.config.planner.learning:
            q1 = result.evidence.get("q1_rate")
            calibration = calibration.observe(
                TickSignals(
                    q1_rate=q1 if isinstance(q1, float) else None,
                    reconfig_rate=reconfigured / active if active else 0.0,
                ),
                self.config.calibration,
            )
        state = attrs.evolve(
            state,
            ledger=ledger,
            calibration=calibration,
            tick=state.tick + 1,
            last_time_s=snapshot.time_s,
        )
        self.state = state
        if self.state_path is not None:
            save_checkpoint(self.state_path, state.to_data())
        report = {
            "tick": state.tick,
            "selector": result.selector_status,
            "knobs": dict(result.knobs),
            "errors": list(result.errors),
        }
        self.host.plan_committed(plan, report)
        return state


def _deadline(timeout_s: float | None) -> float:
    """The monotonic instant ``timeout_s`` from now; never with no timeout."""
    return math.inf if timeout_s is None else time.monotonic() + timeout_s


def _observed_rates(observations: Sequence[Observation]) -> dict[str, float]:
    """Requests per second each job's ranks received in the last window."""
    requests: dict[str, int] = {}
    span: dict[str, tuple[float, float]] = {}
    for o in observations:
        requests[o.job_id] = requests.get(o.job_id, 0) + o.requests
        lo, hi = span.get(o.job_id, (o.start_s, o.end_s))
        span[o.job_id] = (min(lo, o.start_s), max(hi, o.end_s))
    return {j: n / (span[j][1] - span[j][0]) for j, n in requests.items() if n > 0}


def _checked_observations(observations: Sequence[Observation]) -> list[Observation]:
    out = list(observations)
    for k, o in enumerate(out):
        if not isinstance(o, Observation):
            raise InvalidInput(f"observations[{k}]: expected an Observation, got {o!r}")
    return out


def _short_list(candidates: Mapping[Ladder, Evaluated], top: int) -> list[Ladder]:
    """The keep ladder and the ``top`` best valid changes of one job."""
    changes = sorted(
        (
            (ev.report.value, ladder)
            for ladder, ev in candidates.items()
            if ev.candidate is not None
            and ev.report.kind in (ActionKind.PLACE, ActionKind.RECONFIGURE)
        ),
        key=lambda vl: -vl[0],
    )
    keep = [lad for lad, ev in candidates.items() if ev.report.kind is ActionKind.KEEP]
    return keep + [lad for _, lad in changes[:top]]


def _needs_another_round(candidates: Mapping[Ladder, Evaluated]) -> bool:
    """Invalid or non-improving: no candidate beats keeping/deferring (paper §2.1)."""
    baseline = max(
        (
            ev.report.value
            for ev in candidates.values()
            if ev.report.kind in (ActionKind.KEEP, ActionKind.DEFER, ActionKind.STOP)
        ),
        default=-math.inf,
    )
    return not any(
        ev.candidate is not None and ev.report.value > baseline
        for ev in candidates.values()
        if ev.report.kind in (ActionKind.PLACE, ActionKind.RECONFIGURE)
    )


def _feedback(candidates: Iterable[Evaluated]) -> tuple[str, ...]:
    """Diagnostics for the proposers' next round: why candidates were rejected or lost."""
    out = []
    for ev in candidates:
        r = ev.report
        if r.rejected:
            out.append(f"{r.key}: rejected ({r.rejected})")
        elif r.kind in (ActionKind.PLACE, ActionKind.RECONFIGURE):
            out.append(f"{r.key}: value {r.value:.3f}, breach {r.breach_probability:.2f}")
    return tuple(out[:12])


def _reason(chosen: Evaluated, candidates: Mapping[Ladder, Evaluated]) -> str:
    r = chosen.report
    others = sorted(
        (e.report for e in candidates.values() if e.report.key != r.key and not e.report.rejected),
        key=lambda c: -c.value,
    )
    text = f"value {r.value:.3f} (J {r.tchebycheff:.3f}, breach {r.breach_probability:.2f})"
    if others:
        text += f"; runner-up {others[0].key} value {others[0].value:.3f}"
    return text

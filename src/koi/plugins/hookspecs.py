# mypy: disable-error-code="empty-body"
"""The koi hook specifications: this module is the plugin reference.

Every hook is named ``koi_*``.  Implement any subset of them on a module or an object, mark each
implementation with :data:`koi.plugins.hookimpl`, and register the object with
:func:`koi.plugins.make_plugin_manager` (or publish it under the ``koi`` entry-point group).

koi never calls these hooks through ``pm.hook`` directly: :class:`koi.plugins.PluginHost` calls
each implementation itself, so it knows which plugin raised, validates what came back and sorts
it deterministically.  Consequences for plugin authors:

- argument names must match the spec exactly (pluggy checks this when the plugin is registered);
  an implementation may accept a subset of the arguments;
- hook wrappers (``wrapper=True`` / ``hookwrapper=True``) are refused for ``koi_*`` hooks;
- ``tryfirst`` / ``trylast`` only matter for the first-result hooks;
- return plain values (tuples, lists or generators); ``None`` counts as "nothing".

Types named here are imported for type checkers only, so importing this module never imports the
core packages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from koi.plugins._markers import hookspec

if TYPE_CHECKING:
    from koi.candidates import ProposalContext
    from koi.plugins._context import Rejection
    from koi.types import ClusterSnapshot, Job, Ladder, LaunchResult, Observation, Plan, Rank

__all__ = [
    "koi_budget_books",
    "koi_collect_telemetry",
    "koi_launch",
    "koi_plan_committed",
    "koi_propose_ladders",
    "koi_propose_mechanisms",
    "koi_snapshot",
]


@hookspec(firstresult=True)
def koi_snapshot(now: float) -> ClusterSnapshot | None:
    """Return the host's view of the fleet: jobs, current ladders and pools.

    Called once at the start of a tick (stage S0) when the caller did not pass a snapshot.
    **First result**: implementations are tried in pluggy order (last registered first,
    ``tryfirst``/``trylast`` respected) and the first non-``None`` answer wins.

    :param now: host time in seconds (the snapshot's ``time_s`` should equal it).
    :returns: a :class:`~koi.types.ClusterSnapshot`, or a plain ``dict`` in its JSON shape
        (parsed with :func:`koi.types.from_data`), or ``None`` to let another plugin answer.

    Failure policy: a plugin that raises, or returns anything else, stops the call with a
    :class:`~koi.errors.PluginError` naming it; there is no sensible fleet view to fall back on.

    .. versionadded:: 0.1
    """


@hookspec
def koi_collect_telemetry(
    ranks: Sequence[tuple[str, Rank]], window: tuple[float, float]
) -> Iterable[Observation]:
    """Return telemetry for the deployed ranks over one window (stage S1).

    **Collect all**: every implementation is called; results are concatenated, deduplicated and
    sorted by ``(job_id, chain, start_s)``.  A source answers only for the ranks it can see.

    :param ranks: ``(job_id, rank)`` pairs currently deployed, sorted by job id.
    :param window: ``(start_s, end_s)``, host time; observations must lie inside it.
    :returns: :class:`~koi.types.Observation` values, or plain ``dict`` s in their JSON shape.
        A variable the source did not measure goes into ``Observation.missing`` (never a 0
        that would read as a measurement); a value read from coarse data (a p99 from a
        histogram bucket) may carry its interval in ``Observation.resolution``.

    Failure policy: a source that raises is skipped and reported as a
    :class:`~koi.errors.PluginError` in :class:`~koi.plugins.TelemetryBatch.errors`; a single
    observation that is malformed (NaN, negative, wrong type), outside the window or for a rank
    that was not asked for is skipped with a :class:`~koi.errors.KoiWarning` and listed in
    :class:`~koi.plugins.TelemetryBatch.skipped`.  Telemetry never stops a tick.

    .. versionadded:: 0.1
    """


@hookspec
def koi_launch(plan: Plan) -> Iterable[LaunchResult]:
    """Apply a committed plan to the clouds this launcher manages (stage S6).

    **Collect all**: every launcher sees the whole plan and acts only on the ranks whose
    environment (``rank.chain.environment.cloud``) it owns; it returns one
    :class:`~koi.types.LaunchResult` per job it touched, saying what actually materialized.
    Partial launches are normal and are reported, not raised.  A job's ``recycle`` names
    replicas (as its telemetry named them) to replace with fresh ones of the same chain; a
    launcher that cannot tell its replicas apart may ignore it.

    :param plan: the committed plan; ``plan.ladders`` is the target state per running job.
    :returns: launch results; ``requested`` must be the part of the job's ladder this launcher
        owns and ``materialized`` a sub-ladder of it.

    Failure policy: a launcher that raises, or returns results for jobs the plan does not run,
    is reported as a :class:`~koi.errors.PluginError` in :class:`~koi.plugins.LaunchBatch.errors`;
    the other launchers' results are kept, so the host knows what did come up.

    .. versionadded:: 0.1
    """


@hookspec
def koi_propose_ladders(job: Job, context: ProposalContext) -> Iterable[Ladder | Rejection]:
    """Propose candidate ladders for one job (stage S4).

    **Collect all**: every proposer is called in plugin-name order until
    ``context.deadline_s`` passes; ladders are validated, deduplicated (a ladder proposed by two
    plugins is kept once, crediting both) and sorted canonically.  The planner adds ``keep`` and
    ``defer`` itself, so a proposer returns only new ladders.

    :param job: the job to place or reconfigure.
    :param context: the snapshot, catalogs, the job's budget book, the DAG backward-query view,
        matching mechanisms, the incumbent ladder, feedback from the previous S4↔S5 round and
        the proposer's limits (``max_candidates``, monotonic ``deadline_s``).
    :returns: at most ``context.max_candidates`` ladders for ``job.model`` on pools of
        ``context.snapshot``.  A proposer may also yield :class:`~koi.plugins.Rejection` values
        to explain what it dropped (they go into the tick report).

    Failure policy: a proposer that raises is skipped for this call and reported as a
    :class:`~koi.errors.PluginError` in :class:`~koi.plugins.ProposalBatch.errors`; the tick goes
    on without it.  A ladder for another model, on an unknown pool or GPU, over the candidate
    limit, or not a :class:`~koi.types.Ladder` at all is rejected with a reason.  Proposals are
    advisory: every ladder still passes prediction, scoring, validation and selection.

    .. versionadded:: 0.1
    """


@hookspec
def koi_propose_mechanisms(view: Any) -> Iterable[Any]:
    """Propose causal mechanisms for admission into the DAG (stage S3).

    **Collect all**: results are concatenated in plugin-name order.

    :param view: a read-only :class:`koi.dag.DagView` of the current graph and evidence.
    :returns: :class:`koi.dag.MechanismProposal` values; the DAG decides whether to admit them.

    Failure policy: a plugin that raises or returns anything but a ``MechanismProposal`` is
    reported in :class:`~koi.plugins.MechanismBatch.errors` and its proposals are dropped.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def koi_budget_books(snapshot: ClusterSnapshot) -> Mapping[str, Any] | None:
    """Override the default root planner's budget books (stage S4).

    **First result**: the first non-``None`` answer wins; return ``None`` to keep the default.

    :param snapshot: the tick's snapshot.
    :returns: job id -> :class:`koi.selector.BudgetBook`, for jobs of ``snapshot`` only.

    Failure policy: a plugin that raises, names unknown jobs or returns other types stops the
    call with a :class:`~koi.errors.PluginError` naming it (the tick falls back safely).

    .. versionadded:: 0.1
    """


@hookspec
def koi_plan_committed(plan: Plan, report: Mapping[str, Any]) -> None:
    """Audit sink: told about every committed plan and its tick report (stage S7).

    **Collect all**; return values are ignored.

    :param plan: the committed plan.
    :param report: the tick report (JSON-ready mapping); do not mutate it.

    Failure policy: a sink that raises is reported as a :class:`~koi.errors.PluginError`; the
    plan stays committed and the other sinks are still called.

    .. versionadded:: 0.1
    """

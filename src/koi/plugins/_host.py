"""The typed facade over the plugin manager: the only code that touches ``pm.hook``.

Each method fetches the hook's implementations and calls them one by one, so a failure is pinned
on the plugin that caused it.  What comes back is type-checked, validated and sorted by stable
keys (plugin names, canonical value keys), never by registration order.
"""

from __future__ import annotations

import json
import math
import time
import types
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import pluggy

from koi.candidates import ProposalContext
from koi.dag import DagView, MechanismProposal
from koi.errors import InvalidInput, KoiWarning, PluginError
from koi.plugins._checks import ladder_key, ladder_problems
from koi.plugins._context import (
    LaunchBatch,
    MechanismBatch,
    ProposalBatch,
    Rejection,
    TelemetryBatch,
)
from koi.selector import BudgetBook
from koi.types import (
    Chain,
    ClusterSnapshot,
    Job,
    Ladder,
    LaunchResult,
    Observation,
    Plan,
    Rank,
    from_data,
    to_data,
)

__all__ = ["PluginHost"]

_Impl = pluggy.HookImpl


def _call(impl: _Impl, hook: str, kwargs: Mapping[str, Any]) -> Any:
    """Call one implementation the way pluggy would, pinning any exception on its plugin."""
    try:
        return impl.function(*[kwargs[name] for name in impl.argnames])
    except Exception as exc:  # a plugin may raise anything; it must not escape unnamed
        raise PluginError(impl.plugin_name, f"{hook} raised {type(exc).__name__}: {exc}") from exc


def _items(impl: _Impl, hook: str, kwargs: Mapping[str, Any]) -> list[Any]:
    """Call a collect-all implementation and drain what it returned into a list."""
    result = _call(impl, hook, kwargs)
    if result is None:
        return []
    if isinstance(result, str | bytes | Mapping) or not isinstance(result, Iterable):
        msg = f"{hook} must return an iterable of values, got {type(result).__name__}"
        raise PluginError(impl.plugin_name, msg)
    try:
        return list(result)  # a generator may raise while it is drained
    except Exception as exc:  # same policy as a raise inside the call
        msg = f"{hook} raised {type(exc).__name__}: {exc}"
        raise PluginError(impl.plugin_name, msg) from exc


def _chain_key(chain: Chain) -> str:
    return json.dumps(to_data(chain), sort_keys=True)


def _sub_ladder(part: Ladder, whole: Ladder) -> bool:
    """Whether every chain of ``part`` is in ``whole`` with at most as many replicas."""
    have: Counter[Chain] = Counter()
    for r in whole.ranks:
        have[r.chain] += r.replicas
    need: Counter[Chain] = Counter()
    for r in part.ranks:
        need[r.chain] += r.replicas
    return all(n <= have[c] for c, n in need.items())


def _warn_skip(skip: Rejection) -> None:
    warnings.warn(KoiWarning(f"plugin {skip.plugin!r}: {skip.reason}"), stacklevel=3)


@attrs.frozen
class PluginHost:
    """Typed, validated, deterministic calls to every koi hook.

    Parameters
    ----------
    pm
        A manager from :func:`koi.plugins.make_plugin_manager`.

    .. versionadded:: 0.1
    """

    _pm: pluggy.PluginManager
    _clock: Callable[[], float] = attrs.field(default=time.monotonic, repr=False)

    @property
    def plugin_names(self) -> tuple[str, ...]:
        """Names of the registered plugins, sorted."""
        return tuple(sorted(n for n, p in self._pm.list_name_plugin() if p is not None))

    def _impls(self, hook: str, *, first_result: bool = False) -> list[_Impl]:
        impls = list(getattr(self._pm.hook, hook).get_hookimpls())
        if first_result:
            return impls[::-1]  # pluggy's own call order: tryfirst, then last registered
        return sorted(impls, key=lambda i: i.plugin_name)

    # -- S0 -----------------------------------------------------------------------------------

    def snapshot(self, now: float) -> ClusterSnapshot | None:
        """The first plugin snapshot for host time ``now``, or ``None`` if no plugin answers.

        Raises
        ------
        PluginError
            The answering plugin raised or returned something that is not a valid snapshot.
        """
        for impl in self._impls("koi_snapshot", first_result=True):
            result = _call(impl, "koi_snapshot", {"now": now})
            if result is None:
                continue
            if isinstance(result, Mapping):
                try:
                    return from_data(result, ClusterSnapshot)
                except InvalidInput as exc:
                    raise PluginError(impl.plugin_name, f"invalid snapshot: {exc}") from None
            if not isinstance(result, ClusterSnapshot):
                msg = f"koi_snapshot must return a ClusterSnapshot, got {type(result).__name__}"
                raise PluginError(impl.plugin_name, msg)
            return result
        return None

    # -- S1 -----------------------------------------------------------------------------------

    def collect_telemetry(
        self, ranks: Sequence[tuple[str, Rank]], window: tuple[float, float]
    ) -> TelemetryBatch:
        """Observations for the deployed ``(job_id, rank)`` pairs over ``window``.

        Sources that raise are skipped (``errors``); bad observations are skipped with a
        :class:`~koi.errors.KoiWarning` (``skipped``).

        Raises
        ------
        InvalidInput
            ``window`` is not a finite ``(start, end)`` with ``start < end``.
        """
        start, end = (float(w) for w in window)
        if not (math.isfinite(start) and math.isfinite(end) and start < end):
            raise InvalidInput(f"window: must be finite with start < end, got {window!r}")
        pairs = tuple(sorted(ranks, key=lambda p: (p[0], _chain_key(p[1].chain))))
        wanted = {(job_id, rank.chain) for job_id, rank in pairs}
        kwargs = {"ranks": pairs, "window": (start, end)}
        errors: list[PluginError] = []
        skipped: list[Rejection] = []
        kept: dict[Observation, str] = {}
        for impl in self._impls("koi_collect_telemetry"):
            try:
                items = _items(impl, "koi_collect_telemetry", kwargs)
            except PluginError as exc:
                errors.append(exc)
                continue
            for k, item in enumerate(items):
                obs, reason = self._observation(item, k, wanted, start, end)
                if obs is None:
                    skip = Rejection(impl.plugin_name, reason)
                    _warn_skip(skip)
                    skipped.append(skip)
                else:
                    kept.setdefault(obs, impl.plugin_name)
        ordered = sorted(
            kept, key=lambda o: (o.job_id, _chain_key(o.chain), o.start_s, o.end_s, kept[o])
        )
        return TelemetryBatch(tuple(ordered), tuple(errors), tuple(skipped))

    @staticmethod
    def _observation(
        item: object, k: int, wanted: set[tuple[str, Chain]], start: float, end: float
    ) -> tuple[Observation | None, str]:
        where = f"observation {k}"
        if isinstance(item, Mapping):
            try:
                item = from_data(item, Observation, where=where)
            except InvalidInput as exc:
                return None, str(exc)
        if not isinstance(item, Observation):
            return None, f"{where}: expected an Observation, got {type(item).__name__}"
        if (item.job_id, item.chain) not in wanted:
            return None, f"{where}: job {item.job_id!r} has no deployed rank on that chain"
        if item.start_s < start or item.end_s > end:
            msg = f"{where}: [{item.start_s}, {item.end_s}) lies outside [{start}, {end})"
            return None, msg
        return item, ""

    # -- S4 -----------------------------------------------------------------------------------

    def propose_ladders(self, job: Job, context: ProposalContext) -> ProposalBatch:
        """Candidate ladders for ``job`` from every proposer, validated and deduplicated.

        Proposers run in plugin-name order until ``context.deadline_s`` (monotonic) passes; the
        ones not reached, those that raise and those that answer late are reported in
        ``errors``.  Ladders failing :func:`ladder_problems` or over ``max_candidates`` per
        proposer go to ``rejections``.
        """
        found: dict[str, tuple[Ladder, set[str]]] = {}
        errors: list[PluginError] = []
        rejections: list[Rejection] = []
        kwargs = {"job": job, "context": context}
        for impl in self._impls("koi_propose_ladders"):
            name = impl.plugin_name
            if self._clock() >= context.deadline_s:
                errors.append(PluginError(name, "not called: the proposal deadline had passed"))
                continue
            try:
                items = _items(impl, "koi_propose_ladders", kwargs)
            except PluginError as exc:
                errors.append(exc)
                continue
            late = self._clock() - context.deadline_s
            if late > 0:
                msg = f"answered {late:.3f} s after its deadline; its proposals were dropped"
                errors.append(PluginError(name, msg))
                continue
            accepted = 0
            for item in items:
                if isinstance(item, Rejection):
                    rejections.append(attrs.evolve(item, plugin=name))
                    continue
                problems = ladder_problems(item, job, context)
                if problems or not isinstance(item, Ladder):
                    ladder = item if isinstance(item, Ladder) else None
                    rejections.append(Rejection(name, "; ".join(problems), ladder))
                    continue
                ladder = item
                if accepted >= context.max_candidates:
                    reason = f"over the limit of {context.max_candidates} candidates"
                    rejections.append(Rejection(name, reason, ladder))
                    continue
                accepted += 1
                key = ladder_key(ladder)
                found.setdefault(key, (ladder, set()))[1].add(name)
        keys = sorted(found)
        return ProposalBatch(
            ladders=tuple(found[k][0] for k in keys),
            sources=tuple(tuple(sorted(found[k][1])) for k in keys),
            errors=tuple(errors),
            rejections=tuple(rejections),
        )

    def propose_mechanisms(self, view: DagView) -> MechanismBatch:
        """Mechanism proposals from every plugin, in plugin-name order."""
        proposals: list[MechanismProposal] = []
        sources: list[str] = []
        errors: list[PluginError] = []
        for impl in self._impls("koi_propose_mechanisms"):
            try:
                items = _items(impl, "koi_propose_mechanisms", {"view": view})
            except PluginError as exc:
                errors.append(exc)
                continue
            bad = [type(i).__name__ for i in items if not isinstance(i, MechanismProposal)]
            if bad:
                msg = f"koi_propose_mechanisms must return MechanismProposal values, got {bad[0]}"
                errors.append(PluginError(impl.plugin_name, msg))
                continue
            proposals.extend(items)
            sources.extend([impl.plugin_name] * len(items))
        return MechanismBatch(tuple(proposals), tuple(sources), tuple(errors))

    def budget_books(self, snapshot: ClusterSnapshot) -> Mapping[str, BudgetBook] | None:
        """The first plugin's budget books (job id -> book), or ``None`` to use the default.

        Raises
        ------
        PluginError
            The answering plugin raised, named unknown jobs or returned other types.
        """
        job_ids = {j.id for j in snapshot.jobs}
        for impl in self._impls("koi_budget_books", first_result=True):
            result = _call(impl, "koi_budget_books", {"snapshot": snapshot})
            if result is None:
                continue
            name = impl.plugin_name
            if not isinstance(result, Mapping):
                msg = f"koi_budget_books must return a mapping, got {type(result).__name__}"
                raise PluginError(name, msg)
            for job_id, book in result.items():
                if job_id not in job_ids:
                    raise PluginError(name, f"koi_budget_books: unknown job {job_id!r}")
                if not isinstance(book, BudgetBook):
                    msg = f"koi_budget_books[{job_id!r}]: expected a BudgetBook"
                    raise PluginError(name, f"{msg}, got {type(book).__name__}")
            return types.MappingProxyType(dict(sorted(result.items())))
        return None

    # -- S6 / S7 ------------------------------------------------------------------------------

    def launch(self, plan: Plan) -> LaunchBatch:
        """Hand ``plan`` to every launcher; collect what materialized.

        A launcher that raises, or reports on a job or chain the plan does not run, is listed in
        ``errors`` (only its offending results are dropped).
        """
        targets = plan.ladders
        found: list[tuple[LaunchResult, str]] = []
        errors: list[PluginError] = []
        for impl in self._impls("koi_launch"):
            name = impl.plugin_name
            try:
                items = _items(impl, "koi_launch", {"plan": plan})
            except PluginError as exc:
                errors.append(exc)
                continue
            for k, item in enumerate(items):
                problem = self._launch_problem(item, targets)
                if problem:
                    errors.append(PluginError(name, f"koi_launch result {k}: {problem}"))
                else:
                    found.append((item, name))
        found.sort(key=lambda p: (p[0].job_id, p[1]))
        return LaunchBatch(tuple(r for r, _ in found), tuple(n for _, n in found), tuple(errors))

    @staticmethod
    def _launch_problem(item: object, targets: Mapping[str, Ladder]) -> str:
        if not isinstance(item, LaunchResult):
            return f"expected a LaunchResult, got {type(item).__name__}"
        target = targets.get(item.job_id)
        if target is None:
            return f"the plan does not run job {item.job_id!r}"
        if not _sub_ladder(item.requested, target):
            return f"requested ranks that are not in the ladder of job {item.job_id!r}"
        if not _sub_ladder(item.materialized, item.requested):
            return f"materialized more than was requested for job {item.job_id!r}"
        return ""

    def plan_committed(self, plan: Plan, report: Mapping[str, Any]) -> tuple[PluginError, ...]:
        """Tell every audit sink about a committed plan; return the sinks that failed."""
        frozen = types.MappingProxyType(dict(report))
        errors: list[PluginError] = []
        for impl in self._impls("koi_plan_committed"):
            try:
                _call(impl, "koi_plan_committed", {"plan": plan, "report": frozen})
            except PluginError as exc:
                errors.append(exc)
        return tuple(errors)

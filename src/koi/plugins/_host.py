"""The typed facade over the plugin manager: the only code that touches ``pm.hook``.

Each method fetches the hook's implementations and calls them one by one, so a failure is pinned
on the plugin that caused it.  What comes back is type-checked, validated and sorted by stable
keys (plugin names, canonical value keys), never by registration order.

Longer than most modules: one method per hook (seven), each with its own checks on what comes
back, and all of them share the host's deadline and hang bookkeeping (which plugin still has a
call running), so they stay in the one class that holds it.
"""

from __future__ import annotations

import json
import math
import threading
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
from koi.plugins._redact import redact
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
_GRACE_S = 0.1


# A plugin that raises these is failing, not asking koi's process to stop: they are pinned on
# the plugin like any other exception rather than escaping ``tick()`` as if koi raised them.
_PLUGIN_EXITS = (SystemExit, KeyboardInterrupt)


def _raised(impl: _Impl, hook: str, exc: BaseException) -> PluginError:
    return PluginError(impl.plugin_name, redact(f"{hook} raised {type(exc).__name__}: {exc}"))


def _call(impl: _Impl, hook: str, kwargs: Mapping[str, Any]) -> Any:
    """Call one implementation the way pluggy would, pinning any exception on its plugin."""
    try:
        return impl.function(*[kwargs[name] for name in impl.argnames])
    except (Exception, *_PLUGIN_EXITS) as exc:  # it must not escape unnamed
        raise _raised(impl, hook, exc) from exc


def _drain(impl: _Impl, hook: str, kwargs: Mapping[str, Any]) -> list[Any]:
    """Call a collect-all implementation and drain what it returned into a list."""
    result = _call(impl, hook, kwargs)
    if result is None:
        return []
    if isinstance(result, str | bytes | Mapping) or not isinstance(result, Iterable):
        msg = f"{hook} must return an iterable of values, got {type(result).__name__}"
        raise PluginError(impl.plugin_name, msg)
    try:
        return list(result)  # a generator may raise while it is drained
    except (Exception, *_PLUGIN_EXITS) as exc:  # same policy as a raise inside the call
        raise _raised(impl, hook, exc) from exc


class _Pending:
    """One plugin call running in its own daemon thread.

    Python cannot stop a thread: a plugin that hangs past its deadline is abandoned (its
    thread finishes or blocks on its own; being a daemon, it never holds up the process exit)
    and what it returns later is ignored.
    """

    def __init__(self, call: Callable[[], Any], name: str) -> None:
        self._call = call
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, name=f"koi-plugin-{name}", daemon=True).start()

    def _run(self) -> None:
        try:
            self._value = self._call()
        except BaseException as exc:  # handed to the waiting thread
            self._error = exc
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout_s: float | None) -> Any:
        """The call's value; :class:`TimeoutError` when it is not done within ``timeout_s``."""
        if not self._done.wait(None if timeout_s is None else max(timeout_s, 0.0)):
            raise TimeoutError
        if self._error is not None:
            raise self._error
        return self._value


def _abandoned(impl: _Impl, hook: str, timeout_s: float) -> PluginError:
    msg = f"{hook} did not answer within {max(timeout_s, 0.0):.3g} s; abandoned"
    return PluginError(impl.plugin_name, msg)


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


def _names(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


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
    serial: frozenset[str] = attrs.field(default=frozenset(), converter=_names)
    # Calls abandoned at their deadline and maybe still running, by plugin name: a plugin is
    # not called again while one of its calls hangs (one timeout per hang, not one per job).
    _hung: dict[str, _Pending] = attrs.field(factory=dict, init=False, repr=False)

    def _timeout(self, deadline_s: float | None) -> float | None:
        if deadline_s is None or deadline_s == math.inf:
            return None
        return deadline_s - self._clock()

    def _start(self, impl: _Impl, hook: str, kwargs: Mapping[str, Any], *, drain: bool) -> _Pending:
        def run() -> Any:
            return _drain(impl, hook, kwargs) if drain else _call(impl, hook, kwargs)

        return _Pending(run, impl.plugin_name)

    def _still_hung(self, impl: _Impl, hook: str) -> PluginError | None:
        hung = self._hung.get(impl.plugin_name)
        if hung is None:
            return None
        if hung.done:
            del self._hung[impl.plugin_name]
            return None
        return PluginError(impl.plugin_name, f"{hook} not called: an earlier call still hangs")

    def _wait(self, impl: _Impl, hook: str, pending: _Pending, deadline_s: float | None) -> Any:
        timeout = self._timeout(deadline_s)
        # A short grace lets a plugin that honours the deadline report its own timeout; it
        # applies also when the deadline passed while other plugins were being waited for.
        try:
            return pending.result(None if timeout is None else max(timeout, 0.0) + _GRACE_S)
        except TimeoutError:
            self._hung[impl.plugin_name] = pending
            raise _abandoned(impl, hook, timeout or 0.0) from None

    def _invoke(
        self,
        impl: _Impl,
        hook: str,
        kwargs: Mapping[str, Any],
        deadline_s: float | None,
        *,
        drain: bool,
    ) -> Any:
        """Call ``impl``; with a deadline, in its own thread, abandoned when the deadline passes.

        Raises
        ------
        PluginError
            The plugin raised, returned a non-iterable where values were due, hangs from an
            earlier call, or did not answer before ``deadline_s``.
        """
        if self._timeout(deadline_s) is None:
            return _drain(impl, hook, kwargs) if drain else _call(impl, hook, kwargs)
        busy = self._still_hung(impl, hook)
        if busy is not None:
            raise busy
        timeout = self._timeout(deadline_s)
        if timeout is not None and timeout <= 0:
            raise PluginError(impl.plugin_name, f"{hook} not called: the deadline had passed")
        return self._wait(impl, hook, self._start(impl, hook, kwargs, drain=drain), deadline_s)

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

    def snapshot(self, now: float, *, deadline_s: float | None = None) -> ClusterSnapshot | None:
        """The first plugin snapshot for host time ``now``, or ``None`` if no plugin answers.

        With ``deadline_s`` (on the host's monotonic clock) a plugin that has not answered by
        then is abandoned (:class:`PluginError`).

        Raises
        ------
        PluginError
            The answering plugin raised or returned something that is not a valid snapshot.
        """
        for impl in self._impls("koi_snapshot", first_result=True):
            result = self._invoke(impl, "koi_snapshot", {"now": now}, deadline_s, drain=False)
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
        self,
        ranks: Sequence[tuple[str, Rank]],
        window: tuple[float, float],
        *,
        deadline_s: float | None = None,
    ) -> TelemetryBatch:
        """Observations for the deployed ``(job_id, rank)`` pairs over ``window``.

        Sources that raise or miss ``deadline_s`` are skipped (``errors``); bad observations
        are skipped with a :class:`~koi.errors.KoiWarning` (``skipped``).

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
                items = self._invoke(impl, "koi_collect_telemetry", kwargs, deadline_s, drain=True)
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

        The proposers named in ``serial`` (the built-in deterministic one) run in the calling
        thread, every time, and keep what they return: they honour ``context.deadline_s``
        themselves.  Every other proposer runs at the same time in its own thread with the
        whole budget up to ``context.deadline_s`` (monotonic), so a slow plugin cannot starve
        the rest; one that raises, answers late or hangs is reported in ``errors`` (a hung one
        is abandoned and not called again while it hangs).  Answers are merged in plugin-name
        order.  Ladders failing :func:`ladder_problems` or over ``max_candidates`` per proposer
        go to ``rejections``.
        """
        hook = "koi_propose_ladders"
        errors: list[PluginError] = []
        kwargs = {"job": job, "context": context}
        impls = self._impls(hook)
        others = [i for i in impls if i.plugin_name not in self.serial]
        pending: dict[str, _Pending] = {}
        bounded = self._timeout(context.deadline_s) is not None
        for impl in others if bounded else ():
            problem = self._still_hung(impl, hook)
            if problem is None and self._clock() >= context.deadline_s:
                problem = PluginError(impl.plugin_name, "not called: the deadline had passed")
            if problem is not None:
                errors.append(problem)
            else:
                pending[impl.plugin_name] = self._start(impl, hook, kwargs, drain=True)
        answers: dict[str, list[Any]] = {}
        for impl in impls:  # the serial ones now, while the others work
            name = impl.plugin_name
            if name in self.serial or not bounded:
                try:
                    answers[name] = _drain(impl, hook, kwargs)
                except PluginError as exc:
                    errors.append(exc)
        for impl in others:
            name = impl.plugin_name
            if name not in pending:
                continue
            try:
                answers[name] = self._wait(impl, hook, pending[name], context.deadline_s)
            except PluginError as exc:
                errors.append(exc)
                continue
            late = self._clock() - context.deadline_s
            if late > 0:
                msg = f"answered {late:.3f} s after its deadline; its proposals were dropped"
                errors.append(PluginError(name, msg))
                del answers[name]
        found: dict[str, tuple[Ladder, set[str]]] = {}
        rejections: list[Rejection] = []
        for name in sorted(answers):
            self._take(name, answers[name], job, context, found, rejections)
        keys = sorted(found)
        return ProposalBatch(
            ladders=tuple(found[k][0] for k in keys),
            sources=tuple(tuple(sorted(found[k][1])) for k in keys),
            errors=tuple(sorted(errors, key=lambda e: e.plugin)),
            rejections=tuple(rejections),
        )

    @staticmethod
    def _take(
        name: str,
        items: Iterable[Any],
        job: Job,
        context: ProposalContext,
        found: dict[str, tuple[Ladder, set[str]]],
        rejections: list[Rejection],
    ) -> None:
        """Validate one proposer's answer into ``found`` (by ladder key) and ``rejections``."""
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
            if accepted >= context.max_candidates:
                reason = f"over the limit of {context.max_candidates} candidates"
                rejections.append(Rejection(name, reason, item))
                continue
            accepted += 1
            found.setdefault(ladder_key(item), (item, set()))[1].add(name)

    def propose_mechanisms(
        self, view: DagView, *, deadline_s: float | None = None
    ) -> MechanismBatch:
        """Mechanism proposals from every plugin, in plugin-name order (each abandoned at
        ``deadline_s``)."""
        proposals: list[MechanismProposal] = []
        sources: list[str] = []
        errors: list[PluginError] = []
        for impl in self._impls("koi_propose_mechanisms"):
            try:
                kwargs = {"view": view}
                items = self._invoke(impl, "koi_propose_mechanisms", kwargs, deadline_s, drain=True)
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

    def budget_books(
        self, snapshot: ClusterSnapshot, *, deadline_s: float | None = None
    ) -> Mapping[str, BudgetBook] | None:
        """The first plugin's budget books (job id -> book), or ``None`` to use the default.

        Raises
        ------
        PluginError
            The answering plugin raised, named unknown jobs or returned other types.
        """
        job_ids = {j.id for j in snapshot.jobs}
        for impl in self._impls("koi_budget_books", first_result=True):
            kwargs = {"snapshot": snapshot}
            result = self._invoke(impl, "koi_budget_books", kwargs, deadline_s, drain=False)
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

    def launch(self, plan: Plan, *, deadline_s: float | None = None) -> LaunchBatch:
        """Hand ``plan`` to every launcher; collect what materialized.

        A launcher that raises or misses ``deadline_s``, or reports on a job or chain the plan
        does not run, is listed in ``errors`` (only its offending results are dropped).
        """
        targets = plan.ladders
        found: list[tuple[LaunchResult, str]] = []
        errors: list[PluginError] = []
        for impl in self._impls("koi_launch"):
            name = impl.plugin_name
            try:
                items = self._invoke(impl, "koi_launch", {"plan": plan}, deadline_s, drain=True)
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

    def plan_committed(
        self, plan: Plan, report: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> tuple[PluginError, ...]:
        """Tell every audit sink about a committed plan; return the sinks that failed (raised
        or missed ``deadline_s``)."""
        frozen = types.MappingProxyType(dict(report))
        errors: list[PluginError] = []
        for impl in self._impls("koi_plan_committed"):
            try:
                kwargs = {"plan": plan, "report": frozen}
                self._invoke(impl, "koi_plan_committed", kwargs, deadline_s, drain=False)
            except PluginError as exc:
                errors.append(exc)
        return tuple(errors)

"""The SkyPilot plugin: each rank a SkyServe service, ``sky serve up`` / ``update`` / ``down``."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from koi.catalog import Catalog, load_catalog
from koi.errors import InvalidInput
from koi.integrations.engine import dns_label
from koi.integrations.render import LaunchMode, poll_until, shortfall, to_yaml, write_files
from koi.integrations.skypilot._render import (
    SkyPilotSettings,
    owned_ranks,
    render_service_config,
    service_names,
)
from koi.plugins import hookimpl
from koi.types import ActionKind, Ladder, LaunchResult, Plan, Rank

__all__ = ["ServiceState", "SkyPilotLauncher", "service_states"]


@attrs.frozen
class ServiceState:
    """What SkyServe says about one service: its latest version, READY replicas per version."""

    name: str
    version: int
    ready: Mapping[int, int] = attrs.field(factory=dict, hash=False)

    def ready_at(self, version: int) -> int:
        """READY replicas running ``version`` or later."""
        return sum(n for v, n in self.ready.items() if v >= version)


def _text(value: Any) -> str:
    return str(getattr(value, "value", value))


def service_states(records: Sequence[Mapping[str, Any]]) -> dict[str, ServiceState]:
    """``sky serve status`` records (dicts with ``replica_info``) as :class:`ServiceState` s."""
    out = {}
    for rec in records:
        ready: dict[int, int] = {}
        for rep in rec.get("replica_info") or []:
            if _text(rep.get("status")) == "READY":
                v = int(rep.get("version") or 1)
                ready[v] = ready.get(v, 0) + 1
        out[str(rec["name"])] = ServiceState(str(rec["name"]), int(rec.get("version") or 1), ready)
    return out


@attrs.define
class _Rank:
    rank: Rank
    name: str
    config: dict[str, Any] | None = None
    problem: str = ""
    version: int = 0  # the service version that serves this rank once applied
    ready: int = 0
    task: Any = None  # the sky.Task, once SkyPilot accepted the config
    patient: bool = True  # wait for it (a kept rank is only looked at)

    def to_task(self, sky: Any) -> Callable[[], Any]:
        config = self.config
        return lambda: sky.Task.from_yaml_config(config)


class SkyPilotLauncher:
    """koi plugin that runs ranks as SkyServe services.

    Parameters
    ----------
    settings:
        :class:`SkyPilotSettings` (clouds owned, mode, engine, fallbacks, waits).
    sky:
        the ``sky`` module (imported on first use in ``dry_run`` and ``apply`` modes); tests pass
        a stub with the same functions: ``Task.from_yaml_config``, ``serve.up``,
        ``serve.update``, ``serve.status``, ``serve.down``, ``serve.UpdateMode`` and ``get``.
    catalog:
        for fallback regions (the built-in catalog by default).

    ``actions`` lists the SkyServe calls of the last launch, in order.

    .. versionadded:: 0.1
    """

    koi_plugin_name = "skypilot"

    def __init__(
        self,
        settings: SkyPilotSettings | None = None,
        *,
        sky: Any = None,
        catalog: Catalog | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings or SkyPilotSettings()
        if self.settings.mode is LaunchMode.ADVISORY and self.settings.out_dir is None:
            raise InvalidInput("out_dir: advisory mode writes service YAML and needs a folder")
        self._sky = sky
        self.catalog = catalog or load_catalog()
        self._clock = clock
        self._sleep = sleep
        self.actions: list[str] = []
        self._applied: dict[str, str] = {}  # service -> digest of the config last sent

    @property
    def sky(self) -> Any:
        if self._sky is None:
            try:
                import sky
            except ImportError:
                msg = "the SkyPilot launcher needs SkyPilot: pip install 'koi[skypilot]'"
                raise InvalidInput(msg) from None
            self._sky = sky
        return self._sky

    # -- rendering -------------------------------------------------------------------------------

    def render(self, job_id: str, ranks: Sequence[Rank]) -> list[_Rank]:
        out = []
        for rank, name in zip(ranks, service_names(job_id, ranks), strict=True):
            item = _Rank(rank, name)
            try:
                item.config = render_service_config(
                    job_id, rank, self.settings, self.catalog, name=name
                )
            except InvalidInput as exc:
                item.problem = str(exc)
            out.append(item)
        return out

    def _call(self, what: str, fn: Callable[[], Any]) -> tuple[Any, str]:
        """Run one SkyPilot call to completion; return (result, problem)."""
        try:
            result = fn()
        except Exception as exc:  # SkyPilot raises many types; all are "it did not work"
            return None, f"{what}: {type(exc).__name__}: {exc}"
        self.actions.append(what)
        return result, ""

    # -- the hook --------------------------------------------------------------------------------

    @hookimpl
    def koi_launch(self, plan: Plan) -> list[LaunchResult]:
        """Bring up, update or retire SkyServe services so the plan's ranks run."""
        self.actions = []
        jobs = [
            (job_id, Ladder(tuple(mine)), self.render(job_id, mine))
            for job_id, ladder in sorted(plan.ladders.items())
            if (mine := owned_ranks(ladder, self.settings))
        ]
        for job_id, _, ranks in jobs:
            for r in ranks:
                r.patient = plan.action(job_id).kind is not ActionKind.KEEP
        mode = self.settings.mode
        if mode is LaunchMode.ADVISORY:
            return self._advisory(jobs)
        for _, _, ranks in jobs:
            for r in ranks:
                if not r.problem and r.config is not None:
                    r.task, r.problem = self._call(f"validate {r.name}", r.to_task(self.sky))
        if mode is LaunchMode.DRY_RUN:
            return [
                self._result(job_id, ladder, ranks, "dry-run: SkyPilot accepted")
                for job_id, ladder, ranks in jobs
            ]
        running = {j for j, _, _ in jobs}
        stopped = sorted({a.job_id for a in plan.actions} - running)
        if not jobs and not stopped:
            return []
        return self._apply(jobs, stopped)

    def _result(self, job_id: str, ladder: Ladder, ranks: list[_Rank], head: str) -> LaunchResult:
        ok = sum(1 for r in ranks if not r.problem)
        up = [attrs.evolve(r.rank, replicas=r.ready) for r in ranks if r.ready > 0]
        parts = [f"{head} {ok} of {len(ranks)} services"]
        parts += [f"{r.name}: {r.problem}" for r in ranks if r.problem]
        return LaunchResult(job_id, ladder, Ladder(tuple(up)), "; ".join(parts))

    def _advisory(self, jobs: list[tuple[str, Ladder, list[_Rank]]]) -> list[LaunchResult]:
        files = {f"{r.name}.yaml": to_yaml([r.config]) for _, _, rs in jobs for r in rs if r.config}
        assert self.settings.out_dir is not None
        paths = write_files(files, self.settings.out_dir)
        self.actions = [f"wrote {p}" for p in paths]
        head = f"advisory: service YAML in {self.settings.out_dir}:"
        return [self._result(job_id, ladder, ranks, head) for job_id, ladder, ranks in jobs]

    def _status(self) -> tuple[dict[str, ServiceState], str]:
        records, problem = self._call("status", lambda: self.sky.get(self.sky.serve.status(None)))
        return (service_states(records or []), problem)

    def _up(self, name: str, task: Any) -> str:
        sky = self.sky
        return self._call(
            f"serve up {name}", lambda: sky.get(sky.serve.up(task, service_name=name))
        )[1]

    def _update(self, name: str, task: Any) -> str:
        sky = self.sky
        mode = sky.serve.UpdateMode(self.settings.update_mode)

        def update() -> Any:
            return sky.get(sky.serve.update(task, service_name=name, mode=mode))

        return self._call(f"serve update {name}", update)[1]

    def _down(self, name: str) -> str:
        sky = self.sky
        return self._call(f"serve down {name}", lambda: sky.get(sky.serve.down(name)))[1]

    def _apply(
        self, jobs: list[tuple[str, Ladder, list[_Rank]]], stopped: list[str]
    ) -> list[LaunchResult]:
        states, problem = self._status()
        if problem:
            return [
                self._result(job_id, ladder, ranks, f"nothing applied: {problem};")
                for job_id, ladder, ranks in jobs
            ]
        for _, _, ranks in jobs:
            for r in ranks:
                if r.problem or r.task is None:
                    continue
                current = states.get(r.name)
                digest = _digest(r.config)
                if current is None:
                    r.problem, r.version = self._up(r.name, r.task), 1
                elif not r.patient or self._applied.get(r.name) == digest:
                    r.version = current.version  # unchanged: no new version to roll out
                else:
                    r.problem, r.version = self._update(r.name, r.task), current.version + 1
                if not r.problem:
                    self._applied[r.name] = digest
        self._wait([r for _, _, ranks in jobs for r in ranks if r.version and not r.problem])
        owner = _owners(states, [j for j, _, _ in jobs] + stopped)
        results = []
        for job_id, ladder, ranks in jobs:
            notes = []
            targets = {r.name for r in ranks}
            replaced = sorted(n for n in states if owner.get(n) == job_id and n not in targets)
            complete = all(not r.problem and r.ready == r.rank.replicas for r in ranks)
            if replaced and complete:
                notes += [self._down(n) or f"retired {n}" for n in replaced]
            elif replaced:
                notes.append(
                    f"kept {len(replaced)} replaced service(s) up until the new ranks are ready"
                )
            res = self._result(job_id, ladder, ranks, "applied")
            results.append(attrs.evolve(res, message="; ".join([res.message, *notes])))
        for job_id in stopped:
            for name in sorted(n for n in states if owner.get(n) == job_id):
                self._down(name)
        return results

    def _wait(self, ranks: list[_Rank]) -> None:
        """Poll SkyServe until every rank has its READY replicas or ``ready_timeout_s`` passed."""
        pending = list(ranks)
        problem = ""

        def all_ready() -> bool:
            nonlocal pending, problem
            states, problem = self._status()
            still = []
            for r in pending:
                state = states.get(r.name)
                r.ready = min(state.ready_at(r.version), r.rank.replicas) if state else 0
                if r.ready < r.rank.replicas and r.patient:
                    still.append(r)
            pending = still
            return not pending

        s = self.settings
        poll_until(
            all_ready,
            timeout_s=s.ready_timeout_s,
            interval_s=s.poll_interval_s,
            clock=self._clock,
            sleep=self._sleep,
        )
        for r in ranks:
            short = shortfall(
                r.ready, r.rank.replicas, waited_s=s.ready_timeout_s, patient=r.patient
            )
            if short:
                r.problem = short + (f" ({problem})" if problem else "")


def _digest(config: Mapping[str, Any] | None) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def _fits(service: str, job_id: str) -> bool:
    """Whether a service name has the shape of ``job_id``'s (``koi-<job>-<digest>[-k]``)."""
    prefix = f"koi-{dns_label(job_id, max_len=18)}-"
    if not service.startswith(prefix):
        return False
    rest = service[len(prefix) :].split("-")
    digest_ok = len(rest[0]) == 6 and all(ch in "0123456789abcdef" for ch in rest[0])
    return digest_ok and (len(rest) == 1 or (len(rest) == 2 and rest[1].isdigit()))


def _owners(services: Iterable[str], job_ids: Iterable[str]) -> dict[str, str]:
    """Service -> the job of the plan it belongs to (the longest matching job name wins)."""
    jobs = sorted(job_ids, key=len, reverse=True)
    out = {}
    for s in services:
        owner = next((j for j in jobs if _fits(s, j)), None)
        if owner is not None:
            out[s] = owner
    return out

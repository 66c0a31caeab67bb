"""The Kubernetes plugin: ``koi_snapshot`` from the cluster, ``koi_launch`` into it.

Longer than most modules: the snapshot and the launch read the same live workloads and pool
views, and the launch's three modes (advisory, dry run, apply with its bounded readiness wait
and garbage collection) share one per-job work record; rendering and the API client live in
their own modules.
"""

from __future__ import annotations

import json
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from koi.catalog import Catalog, load_catalog
from koi.errors import InvalidInput, KoiWarning
from koi.integrations.engine import label_value, service_name
from koi.integrations.kubernetes._api import KubeApi, KubernetesApiError
from koi.integrations.kubernetes._nodes import PoolView, gpus_requested, pool_views
from koi.integrations.kubernetes._render import (
    CHAIN_ANNOTATION,
    JOB_ANNOTATION,
    JOB_LABEL,
    Placement,
    render_rank,
    render_service,
)
from koi.integrations.kubernetes._settings import KubernetesSettings
from koi.integrations.render import LaunchMode, poll_until, shortfall, to_yaml, write_files
from koi.plugins import hookimpl
from koi.types import (
    ActionKind,
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Ladder,
    LaunchResult,
    Plan,
    Pool,
    Rank,
    from_data,
)

__all__ = ["KubernetesLauncher", "ready_replicas", "render_job"]


def render_job(
    job_id: str,
    ladder: Ladder,
    settings: KubernetesSettings,
    placements: Mapping[str, Placement] | None = None,
) -> list[dict[str, Any]]:
    """The job's Service and one workload per rank (placements by pool id, else from labels)."""
    placements = placements or {}
    objs = [render_service(job_id, settings)]
    for rank in ladder.ranks:
        objs.append(render_rank(job_id, rank, settings, placements.get(rank.chain.environment.id)))
    return objs


def ready_replicas(obj: Mapping[str, Any]) -> int:
    """Replicas of a Deployment or LeaderWorkerSet that run the applied spec and are ready.

    A Deployment whose controller has not yet seen the latest spec counts zero; otherwise the
    count is the smallest of ready, updated and desired replicas (groups for an LWS).
    """
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    desired = int(spec.get("replicas", 1))
    ready = int(status.get("readyReplicas") or 0)
    updated = int(status.get("updatedReplicas", ready) or 0)
    if obj.get("kind", "Deployment") == "Deployment":
        generation = int((obj.get("metadata") or {}).get("generation") or 0)
        if int(status.get("observedGeneration") or 0) < generation:
            return 0
    return max(0, min(ready, updated, desired))


@attrs.define
class _Live:
    """A koi workload found in the cluster."""

    kind: str
    name: str
    job_id: str
    chain: Chain | None
    replicas: int
    ready: int


@attrs.define
class _RankWork:
    """One rank of the plan on its way into the cluster."""

    rank: Rank
    obj: dict[str, Any] | None = None
    problem: str = ""
    applied: bool = False
    ready: int = 0
    #: wait for it to become ready (a kept rank is only looked at: it is not rolling out)
    patient: bool = True

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"]) if self.obj else ""

    @property
    def kind(self) -> str:
        return str(self.obj["kind"]) if self.obj else ""

    def describe(self) -> str:
        env = self.rank.chain.environment
        c = self.rank.chain.config
        return f"{self.rank.replicas}x {env.id} tp{c.tp} pp{c.pp} {c.quant.value}"


@attrs.define
class _JobWork:
    job_id: str
    requested: Ladder
    ranks: list[_RankWork]
    service: dict[str, Any] | None = None
    notes: list[str] = attrs.field(factory=list)

    def ok(self) -> list[_RankWork]:
        return [r for r in self.ranks if not r.problem]


class KubernetesLauncher:
    """koi plugin for one Kubernetes cluster: its GPU pools, its koi workloads, launches.

    Parameters
    ----------
    api:
        a :class:`KubeApi` for the cluster (``None`` is allowed only in ``advisory`` mode).
    settings:
        :class:`KubernetesSettings`; ``settings.cloud`` names the cluster in koi's plans.
    catalog:
        GPU names and prices (the built-in catalog by default).
    clock, sleep:
        monotonic clock and sleep used by the bounded readiness wait (tests pass fakes).

    After each launch ``actions`` lists what was sent to the cluster, in order.

    .. versionadded:: 0.1
    """

    def __init__(
        self,
        api: KubeApi | None,
        settings: KubernetesSettings | None = None,
        *,
        catalog: Catalog | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings or KubernetesSettings()
        if api is None and self.settings.mode is not LaunchMode.ADVISORY:
            raise InvalidInput(f"api: mode {self.settings.mode.value} needs a cluster client")
        if self.settings.mode is LaunchMode.ADVISORY and self.settings.out_dir is None:
            raise InvalidInput("out_dir: advisory mode writes manifests and needs a folder")
        self.api = api
        self.catalog = catalog or load_catalog()
        self.koi_plugin_name = f"kubernetes-{self.settings.cloud}"
        self._clock = clock
        self._sleep = sleep
        self.actions: list[str] = []

    # -- the cluster as koi sees it ------------------------------------------------------------

    def _cluster(self) -> KubeApi:
        assert self.api is not None  # checked in __init__ for every mode that reaches here
        return self.api

    def pools(self) -> dict[str, PoolView]:
        """The cluster's GPU pools by pool id (a :class:`~koi.KoiWarning` lists left-out nodes)."""
        views, skipped = pool_views(self._cluster().list_nodes(), self.catalog, self.settings)
        if skipped:
            warnings.warn(KoiWarning("; ".join(skipped)), stacklevel=2)
        return views

    def _live(self) -> list[_Live]:
        out = []
        objs = self._cluster().list_workloads(self.settings.namespace, JOB_LABEL)
        for obj in sorted(objs, key=lambda o: o["metadata"]["name"]):
            meta = obj["metadata"]
            notes = meta.get("annotations") or {}
            chain: Chain | None = None
            try:
                chain = from_data(json.loads(notes.get(CHAIN_ANNOTATION, "")), Chain)
            except (ValueError, InvalidInput):
                chain = None
            job_id = notes.get(JOB_ANNOTATION) or (meta.get("labels") or {}).get(JOB_LABEL, "")
            replicas = int((obj.get("spec") or {}).get("replicas", 1))
            out.append(
                _Live(obj["kind"], meta["name"], job_id, chain, replicas, ready_replicas(obj))
            )
        return out

    def active(self, pools: Mapping[str, PoolView]) -> dict[str, Ladder]:
        """Job id -> the ladder of its ready koi workloads (ranks on pools that still exist)."""
        ranks: dict[str, list[Rank]] = {}
        for w in self._live():
            if w.chain is None or w.ready == 0:
                continue
            view = pools.get(w.chain.environment.id)
            if view is None:
                continue  # its nodes are gone: nothing of it can be running
            chain = attrs.evolve(w.chain, environment=view.pool.environment)
            ranks.setdefault(w.job_id, []).append(Rank(chain, w.ready))
        return {j: Ladder(tuple(r)) for j, r in sorted(ranks.items())}

    def snapshot(self, now: float) -> ClusterSnapshot:
        """Pools from the GPU nodes and the current ladders of ``settings.jobs``."""
        views = self.pools()
        jobs = {j.id for j in self.settings.jobs}
        active = [
            ActiveDeployment(job_id, ladder)
            for job_id, ladder in self.active(views).items()
            if job_id in jobs
        ]
        pools: list[Pool] = [v.pool for v in views.values()]
        return ClusterSnapshot(now, self.settings.jobs, pools, active)

    @hookimpl
    def koi_snapshot(self, now: float) -> ClusterSnapshot | None:
        """The cluster's snapshot; ``None`` when no jobs are configured (another plugin's job)."""
        if not self.settings.jobs:
            return None
        return self.snapshot(now)

    # -- launching -----------------------------------------------------------------------------

    def _mine(self, ladder: Ladder) -> Ladder:
        return Ladder(
            tuple(r for r in ladder.ranks if r.chain.environment.cloud == self.settings.cloud)
        )

    @hookimpl
    def koi_launch(self, plan: Plan) -> list[LaunchResult]:
        """Apply the plan's ranks on this cluster; one result per job touched (see module doc)."""
        self.actions = []
        kept = {a.job_id for a in plan.actions if a.kind is ActionKind.KEEP}
        work = [
            _JobWork(
                job_id, mine, [_RankWork(r, patient=job_id not in kept) for r in _merged(mine)]
            )
            for job_id, ladder in sorted(plan.ladders.items())
            if not (mine := self._mine(ladder)).is_empty
        ]
        mode = self.settings.mode
        if mode is LaunchMode.ADVISORY:
            return self._advisory(work)
        retire = sorted({a.job_id for a in plan.actions} - {w.job_id for w in work})
        if not work and not retire:
            return []
        try:
            views, skipped = pool_views(self._cluster().list_nodes(), self.catalog, self.settings)
            live = self._live() if mode is LaunchMode.APPLY else []
        except KubernetesApiError as exc:
            return [self._result(w, f"nothing applied: {exc}") for w in work]
        for w in work:
            self._render(w, views, skipped)
            self._dry_run(w)
        if mode is LaunchMode.DRY_RUN:
            return [self._result(w, self._dry_run_summary(w)) for w in work]
        results = self._apply(work, views, live, retire)
        recycled = self._recycle(plan)
        return [
            attrs.evolve(r, message=f"{r.message}; {recycled[r.job_id]}".lstrip("; "))
            if r.job_id in recycled
            else r
            for r in results
        ]

    def _recycle(self, plan: Plan) -> dict[str, str]:
        """Delete the pods the plan recycles (``JobAction.recycle``: named as the telemetry
        names them, with ``replica_label="pod"``): only this launcher's pods of that job, in
        its namespace; each workload's controller starts a fresh pod in its place."""
        wanted = {
            (label_value(a.job_id), name): a.job_id for a in plan.actions for name in a.recycle
        }
        if not wanted:
            return {}
        ns = self.settings.namespace
        out: dict[str, list[str]] = {}
        for pod in self._cluster().list_pods():
            meta = pod.get("metadata") or {}
            name = meta.get("name", "")
            job = wanted.get(((meta.get("labels") or {}).get(JOB_LABEL, ""), name))
            if meta.get("namespace") == ns and job is not None:
                try:
                    gone = self._cluster().delete_pod(ns, name)
                    out.setdefault(job, []).append(f"recycled pod {name}" if gone else "")
                except KubernetesApiError as exc:
                    out.setdefault(job, []).append(f"pod {name} not recycled: {exc}")
        joined = {job: "; ".join(n for n in notes if n) for job, notes in out.items()}
        return {job: text for job, text in joined.items() if text}

    def _result(self, w: _JobWork, message: str) -> LaunchResult:
        up = [attrs.evolve(r.rank, replicas=r.ready) for r in w.ranks if r.ready > 0]
        return LaunchResult(w.job_id, w.requested, Ladder(tuple(up)), message)

    def _advisory(self, work: Sequence[_JobWork]) -> list[LaunchResult]:
        # A rank that cannot be rendered (its engine, its precision) is named in the job's
        # result; the job's other ranks are still written.
        files = {}
        for w in work:
            for r in w.ranks:
                try:
                    r.obj = render_rank(w.job_id, r.rank, self.settings)
                except InvalidInput as exc:
                    r.problem = str(exc)
            objs = [r.obj for r in w.ranks if r.obj is not None]
            if objs:
                service = render_service(w.job_id, self.settings)
                files[w.job_id] = (f"{service_name(w.job_id)}.yaml", to_yaml([service, *objs]))
        assert self.settings.out_dir is not None
        paths = write_files(dict(files.values()), self.settings.out_dir)
        self.actions = [f"wrote {p}" for p in paths]
        folder = self.settings.out_dir
        results = []
        for w in work:
            head = (
                f"advisory: manifests in {folder / files[w.job_id][0]}"
                if w.job_id in files
                else "advisory: nothing written"
            )
            problems = [f"not rendered: {r.problem}" for r in w.ranks if r.problem]
            results.append(self._result(w, "; ".join([head, *problems])))
        return results

    def _render(self, w: _JobWork, views: Mapping[str, PoolView], skipped: list[str]) -> None:
        carried = Counter(v.pool.environment.gpu for v in views.values())
        for r in w.ranks:
            env = r.rank.chain.environment
            view = views.get(env.id)
            if env.gpu not in carried:
                seen = ", ".join(sorted(carried)) or "none"
                r.problem = f"no node carries GPU type {env.gpu!r} (the cluster has: {seen})"
            elif view is None:
                known = ", ".join(sorted(views)) or "none"
                r.problem = f"unknown pool {env.id!r}: no usable node matches it (pools: {known})"
            elif view.pool.environment.gpu != env.gpu:
                r.problem = f"pool {env.id!r} carries {view.pool.environment.gpu}, not {env.gpu!r}"
            elif view.pool.environment.gpus_per_instance != env.gpus_per_instance:
                r.problem = (
                    f"pool {env.id!r} nodes have {view.pool.environment.gpus_per_instance} GPUs, "
                    f"the plan assumed {env.gpus_per_instance}"
                )
            if r.problem:
                continue
            assert view is not None
            chain = attrs.evolve(r.rank.chain, environment=view.pool.environment)
            placement = Placement(view.selector, (*self.settings.tolerations, *view.tolerations))
            try:
                r.obj = render_rank(
                    w.job_id, attrs.evolve(r.rank, chain=chain), self.settings, placement
                )
            except InvalidInput as exc:
                r.problem = str(exc)
        if skipped and any(r.problem for r in w.ranks):
            w.notes.append("nodes left out: " + "; ".join(skipped))
        w.service = render_service(w.job_id, self.settings)

    def _send(self, obj: dict[str, Any], *, dry_run: bool) -> str:
        """Apply one object; return the problem ("" when the server accepted it)."""
        try:
            self._cluster().apply(obj, dry_run=dry_run, force=self.settings.force_conflicts)
        except KubernetesApiError as exc:
            hint = ""
            if exc.status == 409:
                hint = (
                    " (another field manager owns these fields; "
                    "set force_conflicts=True to take them)"
                )
            return f"{exc}{hint}"
        verb = "dry-run" if dry_run else "applied"
        self.actions.append(f"{verb} {obj['kind']} {obj['metadata']['name']}")
        return ""

    def _dry_run(self, w: _JobWork) -> None:
        assert w.service is not None
        problem = self._send(w.service, dry_run=True)
        for r in w.ranks:
            if r.problem or r.obj is None:
                continue
            r.problem = problem or self._send(r.obj, dry_run=True)

    @staticmethod
    def _dry_run_summary(w: _JobWork) -> str:
        bad = [f"{r.describe()}: {r.problem}" for r in w.ranks if r.problem]
        ok = len(w.ranks) - len(bad)
        head = f"dry-run: the server accepted {ok} of {len(w.ranks)} ranks; nothing applied"
        return "; ".join([head, *bad, *w.notes])

    # -- apply: make-before-break, bounded wait, retire --------------------------------------

    def _free_gpus(self, views: Mapping[str, PoolView]) -> dict[str, int]:
        used = gpus_requested(self._cluster().list_pods(), self.settings.gpu_resource)
        return {
            pid: sum(max(0, v.gpus_per_node[n] - used[n]) for n in v.nodes)
            for pid, v in views.items()
        }

    def _scale_to_zero(self, w: _Live, views: Mapping[str, PoolView]) -> str:
        """Re-apply a koi workload with zero replicas (its pods go, the object stays)."""
        if w.chain is None:
            return f"{w.kind} {w.name}: no readable {CHAIN_ANNOTATION} annotation, left running"
        view = views.get(w.chain.environment.id)
        placement = None
        if view is not None:
            placement = Placement(view.selector, (*self.settings.tolerations, *view.tolerations))
        try:
            obj = render_rank(w.job_id, Rank(w.chain, 1), self.settings, placement, replicas=0)
        except InvalidInput as exc:
            return f"{w.kind} {w.name}: cannot re-render to scale it down ({exc})"
        obj["metadata"]["name"] = w.name  # keep its name whatever the naming of this version
        problem = self._send(obj, dry_run=False)
        return f"{w.kind} {w.name}: not scaled down: {problem}" if problem else ""

    def _apply(
        self,
        work: list[_JobWork],
        views: Mapping[str, PoolView],
        live: list[_Live],
        retire: Sequence[str],
    ) -> list[LaunchResult]:
        by_job: dict[str, list[_Live]] = {}
        for lv in live:
            by_job.setdefault(lv.job_id, []).append(lv)
        free: dict[str, int] | None = None
        old_of: dict[str, list[_Live]] = {}
        for w in work:
            targets = {r.name for r in w.ok()}
            old = [
                lv for lv in by_job.get(w.job_id, []) if lv.name not in targets and lv.replicas > 0
            ]
            old_of[w.job_id] = old
            if old and w.ok():
                if free is None:
                    try:
                        free = self._free_gpus(views)
                    except KubernetesApiError as exc:
                        w.notes.append(
                            f"could not count free GPUs ({exc}); make-before-break assumed"
                        )
                        free = {}
                current = {lv.name: lv.replicas for lv in by_job.get(w.job_id, [])}
                need: Counter[str] = Counter()
                for r in w.ok():
                    grow = r.rank.replicas - current.get(r.name, 0)
                    need[r.rank.chain.environment.id] += max(0, grow) * r.rank.chain.gpus
                short = {p: n for p, n in need.items() if p in free and n > free[p]}
                if short:
                    # Break before make: the pools cannot hold old and new at once.
                    w.notes.append(
                        "break-before-make: "
                        + ", ".join(
                            f"{p} has {free[p]} free GPUs, needs {n}" for p, n in short.items()
                        )
                    )
                    for lv in old:
                        problem = self._scale_to_zero(lv, views)
                        if problem:
                            w.notes.append(problem)
                        elif lv.chain is not None:
                            pid = lv.chain.environment.id
                            free[pid] = free.get(pid, 0) + lv.replicas * lv.chain.gpus
                    old_of[w.job_id] = []
                for p, n in need.items():
                    if p in free:
                        free[p] -= n
            assert w.service is not None
            if w.ok():
                problem = self._send(w.service, dry_run=False)
                for r in w.ok():
                    r.problem = problem or self._send(r.obj or {}, dry_run=False)
                    r.applied = not r.problem
        self._wait([r for w in work for r in w.ranks if r.applied])
        running = {lv.name: lv for lv in live}
        for w in work:
            for r in w.ranks:
                if not r.applied and r.name in running:
                    # Not updated, but the workload of this very chain still serves.
                    r.ready = min(running[r.name].ready, r.rank.replicas)
        results = []
        for w in work:
            complete = all(r.applied and r.ready == r.rank.replicas for r in w.ranks)
            old = old_of[w.job_id]
            if old and complete:
                for lv in old:
                    problem = self._scale_to_zero(lv, views)
                    w.notes.append(problem or f"retired {lv.kind} {lv.name} (scaled to 0)")
            elif old:
                w.notes.append(
                    f"kept {len(old)} replaced workload(s) running until the new ranks are ready"
                )
            self._collect_garbage(w.job_id, by_job.get(w.job_id, []), {r.name for r in w.ranks})
            results.append(self._result(w, self._summary(w)))
        failed = [
            problem
            for job_id in retire
            for lv in by_job.get(job_id, [])
            if lv.replicas > 0 and (problem := self._scale_to_zero(lv, views))
        ]
        for job_id in retire:
            self._collect_garbage(job_id, by_job.get(job_id, []), set())
        if failed:  # no result carries these jobs (the plan does not run them here)
            warnings.warn(KoiWarning("; ".join(failed)), stacklevel=3)
        return results

    def _collect_garbage(self, job_id: str, live: Iterable[_Live], targets: set[str]) -> None:
        """Delete workloads of the job scaled to zero by an earlier launch."""
        for lv in live:
            if lv.replicas == 0 and lv.name not in targets:
                try:
                    self._cluster().delete(lv.kind, self.settings.namespace, lv.name)
                    self.actions.append(f"deleted {lv.kind} {lv.name}")
                except KubernetesApiError:
                    pass  # garbage stays until the next launch; nothing depends on it

    def _wait(self, ranks: list[_RankWork]) -> None:
        """Poll until every applied rank is ready or ``ready_timeout_s`` has passed."""
        pending = list(ranks)

        def all_ready() -> bool:
            nonlocal pending
            still = []
            for r in pending:
                try:
                    obj = self._cluster().get(r.kind, self.settings.namespace, r.name)
                except KubernetesApiError as exc:
                    r.problem = f"status unknown: {exc}"
                    continue
                r.ready = ready_replicas(obj) if obj else 0
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
            r.problem = r.problem or shortfall(
                r.ready, r.rank.replicas, waited_s=s.ready_timeout_s, patient=r.patient
            )

    @staticmethod
    def _summary(w: _JobWork) -> str:
        up = sum(r.ready for r in w.ranks)
        want = sum(r.rank.replicas for r in w.ranks)
        head = f"{up} of {want} replicas ready"
        parts = [f"{r.name or r.describe()}: {r.problem}" for r in w.ranks if r.problem]
        return "; ".join([head, *parts, *w.notes])


def _merged(ladder: Ladder) -> list[Rank]:
    """One rank per chain (two ranks of one chain are one workload with their replicas)."""
    replicas: Counter[Chain] = Counter()
    for r in ladder.ranks:
        replicas[r.chain] += r.replicas
    return [Rank(c, n) for c, n in replicas.items()]

"""The few Kubernetes API calls koi makes, through the official client, as plain dicts.

Every write is a server-side apply (``application/apply-patch+yaml``) with ``fieldManager=koi``;
every call has a timeout; every failure becomes a :class:`KubernetesApiError` that says which
call failed and what the server (or the network) said.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from koi.errors import KoiError

__all__ = ["FIELD_MANAGER", "KubeApi", "KubernetesApiError"]

FIELD_MANAGER = "koi"
_APPLY = "application/apply-patch+yaml"
_LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")


class KubernetesApiError(KoiError, RuntimeError):
    """A Kubernetes API call failed; ``status`` is the HTTP status (``None``: no answer)."""

    def __init__(self, what: str, status: int | None, message: str) -> None:
        code = f"HTTP {status}" if status is not None else "no answer"
        super().__init__(f"{what}: {code}: {message}")
        self.status = status
        self.message = message


def _server_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if body:
        try:
            data = json.loads(body)
        except (TypeError, ValueError):
            return str(body)[:300]
        if isinstance(data, dict) and data.get("message"):
            return str(data["message"])
    return str(getattr(exc, "reason", None) or exc).strip()[:300]


class KubeApi:
    """Typed-enough access to one cluster: nodes, pods, and koi's workloads in a namespace.

    ``api_client`` is a ``kubernetes.client.ApiClient``; build one with
    :meth:`from_kubeconfig` or pass your own (tests point it at a local fake server).
    """

    def __init__(self, api_client: Any, *, timeout_s: float) -> None:
        from kubernetes import client

        self._client = api_client
        self._core = client.CoreV1Api(api_client)
        self._apps = client.AppsV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._timeout = timeout_s

    @classmethod
    def from_kubeconfig(
        cls, *, context: str | None = None, in_cluster: bool = False, timeout_s: float = 30.0
    ) -> KubeApi:
        """A client from ``~/.kube/config`` (or ``$KUBECONFIG``), or the pod's service account."""
        from kubernetes import client, config

        if in_cluster:
            config.load_incluster_config()  # type: ignore[no-untyped-call,unused-ignore]
        else:
            config.load_kube_config(context=context)  # type: ignore[no-untyped-call,unused-ignore]
        return cls(client.ApiClient(), timeout_s=timeout_s)

    # -- plumbing --------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
            return json.loads(resp.data or b"{}")
        except ApiException as exc:
            raise KubernetesApiError(what, exc.status, _server_message(exc)) from None
        except (HTTPError, OSError) as exc:
            raise KubernetesApiError(what, None, f"{type(exc).__name__}: {exc}") from None
        except ValueError as exc:
            raise KubernetesApiError(what, None, f"unreadable answer: {exc}") from None

    # -- reads -----------------------------------------------------------------------------

    def list_nodes(self) -> list[dict[str, Any]]:
        return list(self._call("list nodes", self._core.list_node).get("items") or [])

    def list_pods(self) -> list[dict[str, Any]]:
        """Pods of every namespace that may hold GPUs (not finished)."""
        data = self._call(
            "list pods",
            self._core.list_pod_for_all_namespaces,
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
        )
        return list(data.get("items") or [])

    def list_workloads(self, namespace: str, label: str) -> list[dict[str, Any]]:
        """Deployments and LeaderWorkerSets in ``namespace`` that carry ``label``."""
        deps = self._call(
            "list deployments",
            self._apps.list_namespaced_deployment,
            namespace,
            label_selector=label,
        )
        items = [dict(d, kind="Deployment") for d in deps.get("items") or []]
        try:
            lws = self._call(
                "list leaderworkersets",
                self._custom.list_namespaced_custom_object,
                *_LWS[:2],
                namespace,
                _LWS[2],
                label_selector=label,
            )
        except KubernetesApiError as exc:
            if exc.status != 404:  # 404: the LeaderWorkerSet CRD is not installed
                raise
            lws = {}
        items += [dict(w, kind="LeaderWorkerSet") for w in lws.get("items") or []]
        return items

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        what = f"get {kind} {namespace}/{name}"
        try:
            if kind == "Deployment":
                data = self._call(what, self._apps.read_namespaced_deployment, name, namespace)
            elif kind == "LeaderWorkerSet":
                data = self._call(
                    what,
                    self._custom.get_namespaced_custom_object,
                    *_LWS[:2],
                    namespace,
                    _LWS[2],
                    name,
                )
            else:
                data = self._call(what, self._core.read_namespaced_service, name, namespace)
        except KubernetesApiError as exc:
            if exc.status == 404:
                return None
            raise
        return dict(data)

    # -- writes ----------------------------------------------------------------------------

    def apply(self, obj: dict[str, Any], *, dry_run: bool, force: bool) -> dict[str, Any]:
        """Server-side apply ``obj`` as field manager ``koi`` (``dryRun=All`` when asked)."""
        kind = obj["kind"]
        meta = obj["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        what = f"{'dry-run ' if dry_run else ''}apply {kind} {namespace}/{name}"
        kwargs: dict[str, Any] = {
            "field_manager": FIELD_MANAGER,
            "force": force,
            "_content_type": _APPLY,
        }
        if dry_run:
            kwargs["dry_run"] = "All"
        fn: Callable[..., Any]
        args: tuple[Any, ...]
        if kind == "Deployment":
            fn, args = self._apps.patch_namespaced_deployment, (name, namespace, obj)
        elif kind == "LeaderWorkerSet":
            fn = self._custom.patch_namespaced_custom_object
            args = (*_LWS[:2], namespace, _LWS[2], name, obj)
        elif kind == "Service":
            fn, args = self._core.patch_namespaced_service, (name, namespace, obj)
        else:
            raise KubernetesApiError(what, None, f"koi does not write {kind} objects")
        return dict(self._call(what, fn, *args, **kwargs))

    def delete_pod(self, namespace: str, name: str) -> bool:
        """Delete one pod (its workload's controller starts a fresh one); ``False`` when it
        was already gone."""
        try:
            self._call(
                f"delete pod {namespace}/{name}", self._core.delete_namespaced_pod, name, namespace
            )
        except KubernetesApiError as exc:
            if exc.status != 404:
                raise
            return False
        return True

    def delete(self, kind: str, namespace: str, name: str) -> None:
        what = f"delete {kind} {namespace}/{name}"
        try:
            if kind == "Deployment":
                self._call(what, self._apps.delete_namespaced_deployment, name, namespace)
            else:
                self._call(
                    what,
                    self._custom.delete_namespaced_custom_object,
                    *_LWS[:2],
                    namespace,
                    _LWS[2],
                    name,
                )
        except KubernetesApiError as exc:
            if exc.status != 404:
                raise

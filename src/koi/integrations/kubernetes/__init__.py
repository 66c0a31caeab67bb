"""Kubernetes snapshot and launcher (optional extra ``koi[k8s]``: the official client).

``KubernetesLauncher`` is a koi plugin for one cluster:

- ``koi_snapshot`` builds pools from the GPU nodes (GPU type from the GPU feature discovery,
  GKE or Karpenter labels or the instance type, capacity from allocatable GPUs, market from
  the capacity-type label, prices from the catalog or ``KubernetesSettings.prices``) and the
  current ladders from koi-labelled workloads (``koi.dev/job``, ``koi.dev/rank``);
- ``koi_launch`` renders each rank as a vLLM/SGLang Deployment (or a LeaderWorkerSet when a
  chain spans nodes), dry-runs every object, server-side applies it (``fieldManager=koi``),
  waits a bounded time for readiness, retires replaced workloads make-before-break and reports
  per rank what became ready.

::

    from koi.integrations.kubernetes import KubeApi, KubernetesLauncher, KubernetesSettings

    launcher = KubernetesLauncher(
        KubeApi.from_kubeconfig(), KubernetesSettings(cloud="aws", namespace="llm", mode="dry_run")
    )

Rendering alone (``render_job``, ``render_rank``) needs no cluster and no client.
See ``docs/integrations.md`` for the RBAC the launcher needs and a worked example.

.. versionadded:: 0.1
"""

from __future__ import annotations

from koi.integrations.kubernetes._api import FIELD_MANAGER, KubeApi, KubernetesApiError
from koi.integrations.kubernetes._launcher import KubernetesLauncher, ready_replicas, render_job
from koi.integrations.kubernetes._nodes import PoolView, gpu_name, market_of, pool_views
from koi.integrations.kubernetes._render import (
    JOB_LABEL,
    LWS_API_VERSION,
    RANK_LABEL,
    Placement,
    nodes_per_copy,
    placement_for,
    render_rank,
    render_service,
)
from koi.integrations.kubernetes._settings import KubernetesSettings, NodeLabels
from koi.integrations.render import LaunchMode

__all__ = [
    "FIELD_MANAGER",
    "JOB_LABEL",
    "LWS_API_VERSION",
    "RANK_LABEL",
    "KubeApi",
    "KubernetesApiError",
    "KubernetesLauncher",
    "KubernetesSettings",
    "LaunchMode",
    "NodeLabels",
    "Placement",
    "PoolView",
    "gpu_name",
    "market_of",
    "nodes_per_copy",
    "placement_for",
    "pool_views",
    "ready_replicas",
    "render_job",
    "render_rank",
    "render_service",
]

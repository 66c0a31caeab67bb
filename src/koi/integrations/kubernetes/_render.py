"""Kubernetes manifests for a ladder: one Deployment (or LeaderWorkerSet) per rank, one Service.

A rank whose chain fits on one node becomes a Deployment of ``replicas`` pods, each asking for
the chain's GPUs.  A chain wider than one instance (pipeline or tensor parallel across nodes)
becomes a LeaderWorkerSet: ``replicas`` groups of ``nodes`` pods, the leader serving.  The
Service of the job selects the serving pods of all its ranks, so traffic moves to a new
rank as soon as it is ready and away from an old one as soon as it is scaled to zero.
"""

from __future__ import annotations

import json
import math
import types
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.integrations.engine import (
    chain_key,
    check_precision,
    engine_command,
    label_value,
    multi_node_commands,
    service_name,
    workload_name,
)
from koi.integrations.kubernetes._settings import KubernetesSettings
from koi.types import Chain, Environment, Rank, to_data

__all__ = [
    "JOB_LABEL",
    "LWS_API_VERSION",
    "MANAGED_BY",
    "RANK_LABEL",
    "Placement",
    "nodes_per_copy",
    "placement_for",
    "render_rank",
    "render_service",
]

JOB_LABEL = "koi.dev/job"
RANK_LABEL = "koi.dev/rank"
ROLE_LABEL = "koi.dev/role"
JOB_ANNOTATION = "koi.dev/job-id"
CHAIN_ANNOTATION = "koi.dev/chain"
MANAGED_BY = {"app.kubernetes.io/managed-by": "koi"}
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"


def _frozen(value: Mapping[str, str]) -> Mapping[str, str]:
    return types.MappingProxyType(dict(value))


@attrs.frozen
class Placement:
    """Where the pods of one pool go: node selector and tolerations."""

    node_selector: Mapping[str, str] = attrs.field(converter=_frozen, hash=False)
    tolerations: tuple[Mapping[str, Any], ...] = ()


def placement_for(env: Environment, settings: KubernetesSettings) -> Placement:
    """The placement ``koi render`` writes for an environment, from the configured labels."""
    labels = settings.node_labels
    selector = {labels.instance_type: env.instance_type}
    if labels.region:
        selector[labels.region] = env.region
    if labels.market:
        selector[labels.market] = labels.market_values.get(env.market.value, env.market.value)
    return Placement(selector, tuple(settings.tolerations))


def nodes_per_copy(chain: Chain) -> int:
    """Instances one copy of ``chain`` spans (1 unless it is wider than its instance)."""
    gpi = chain.environment.gpus_per_instance
    nodes = math.ceil(chain.gpus / gpi)
    if chain.gpus % nodes:
        msg = (
            f"chain of {chain.model} needs {chain.gpus} GPUs on {gpi}-GPU instances: they do not "
            f"split evenly over {nodes} nodes"
        )
        raise InvalidInput(msg)
    return nodes


def _labels(job_id: str, chain: Chain, settings: KubernetesSettings) -> dict[str, str]:
    return {
        **settings.labels,
        **MANAGED_BY,
        JOB_LABEL: label_value(job_id),
        RANK_LABEL: chain_key(chain),
    }


def _container(
    name: str,
    command: Iterable[str],
    gpus: int,
    settings: KubernetesSettings,
    *,
    image: str,
    serving: bool,
) -> dict[str, Any]:
    eng = settings.engine
    gpu = {settings.gpu_resource: str(gpus)}
    c: dict[str, Any] = {
        "name": name,
        "image": image,
        "command": list(command),
        "resources": {"limits": dict(gpu), "requests": dict(gpu)},
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
    }
    if settings.hf_token_secret:
        c["env"] = [
            {
                "name": "HF_TOKEN",
                "valueFrom": {
                    "secretKeyRef": {
                        "name": settings.hf_token_secret,
                        "key": "token",
                        "optional": True,
                    }
                },
            }
        ]
    if serving:
        c["ports"] = [{"name": "http", "containerPort": eng.port, "protocol": "TCP"}]
        probe = {"httpGet": {"path": eng.health_path, "port": "http"}, "periodSeconds": 10}
        c["startupProbe"] = {**probe, "failureThreshold": max(1, eng.startup_timeout_s // 10)}
        c["readinessProbe"] = {**probe, "failureThreshold": 3}
    return c


def _pod_spec(
    containers: list[dict[str, Any]], placement: Placement, shm_gib: float
) -> dict[str, Any]:
    return {
        "nodeSelector": dict(placement.node_selector),
        "tolerations": [dict(t) for t in placement.tolerations],
        "containers": containers,
        "volumes": [
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gib:g}Gi"}}
        ],
    }


def render_rank(
    job_id: str,
    rank: Rank,
    settings: KubernetesSettings,
    placement: Placement | None = None,
    *,
    replicas: int | None = None,
) -> dict[str, Any]:
    """The workload of one rank: a Deployment, or a LeaderWorkerSet for a multi-node chain.

    ``placement`` defaults to :func:`placement_for` the rank's environment; ``replicas``
    overrides the rank's count (zero retires a replaced rank without deleting it).  A rank
    whose precision the job's owner does not accept is refused (``InvalidInput``), unless it
    is being scaled to zero.
    """
    chain = rank.chain
    count = rank.replicas if replicas is None else replicas
    if count > 0:
        check_precision(job_id, chain, settings.precisions())
    place = placement or placement_for(chain.environment, settings)
    nodes = nodes_per_copy(chain)
    labels = _labels(job_id, chain, settings)
    meta = {
        "name": workload_name(job_id, chain),
        "namespace": settings.namespace,
        "labels": labels,
        "annotations": {
            JOB_ANNOTATION: job_id,
            CHAIN_ANNOTATION: json.dumps(to_data(chain), sort_keys=True, separators=(",", ":")),
        },
    }
    image = settings.engine.image(chain.config.engine)
    serve_labels = {**labels, ROLE_LABEL: "serve"}
    if nodes == 1:
        container = _container(
            "engine",
            engine_command(chain, settings.engine),
            chain.gpus,
            settings,
            image=image,
            serving=True,
        )
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": count,
                "selector": {
                    "matchLabels": {JOB_LABEL: labels[JOB_LABEL], RANK_LABEL: labels[RANK_LABEL]}
                },
                # GPUs are scarce: replace pods one at a time without a surge pod
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
                },
                "template": {
                    "metadata": {"labels": serve_labels},
                    "spec": _pod_spec([container], place, settings.shm_gib),
                },
            },
        }
    if not chain.environment.multi_node:
        msg = (
            f"chain of {chain.model} spans {nodes} instances of pool {chain.environment.id}, "
            "which does not allow multi-node chains"
        )
        raise InvalidInput(msg)
    per_pod = chain.gpus // nodes
    leader_cmd, worker_cmd = multi_node_commands(chain, settings.engine, nodes)
    leader = _container("engine", leader_cmd, per_pod, settings, image=image, serving=True)
    worker = _container("engine", worker_cmd, per_pod, settings, image=image, serving=False)
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": meta,
        "spec": {
            "replicas": count,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": serve_labels},
                    "spec": _pod_spec([leader], place, settings.shm_gib),
                },
                "workerTemplate": {
                    "metadata": {"labels": {**labels, ROLE_LABEL: "worker"}},
                    "spec": _pod_spec([worker], place, settings.shm_gib),
                },
            },
        },
    }


def render_service(job_id: str, settings: KubernetesSettings) -> dict[str, Any]:
    """The job's Service: one stable address over the serving pods of every rank."""
    job = label_value(job_id)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(job_id),
            "namespace": settings.namespace,
            "labels": {**settings.labels, **MANAGED_BY, JOB_LABEL: job},
            "annotations": {JOB_ANNOTATION: job_id},
        },
        "spec": {
            "selector": {JOB_LABEL: job, ROLE_LABEL: "serve"},
            "ports": [
                {
                    "name": "http",
                    "port": settings.engine.port,
                    "targetPort": "http",
                    "protocol": "TCP",
                }
            ],
        },
    }

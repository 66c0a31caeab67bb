"""From GPU nodes to koi pools: GPU type, capacity, market and price from node labels."""

from __future__ import annotations

import math
import re
import types
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from koi.catalog import Catalog, InstanceType
from koi.errors import InvalidInput
from koi.integrations.kubernetes._settings import KubernetesSettings
from koi.types import Environment, Market, Pool

__all__ = ["PoolView", "gpu_name", "gpus_requested", "market_of", "pool_views", "quantity"]

# GPU product labels, most specific first.
_GPU_LABELS = (
    "nvidia.com/gpu.product",  # NVIDIA GPU feature discovery
    "cloud.google.com/gke-accelerator",  # GKE
    "karpenter.k8s.aws/instance-gpu-name",  # Karpenter on AWS (with instance-gpu-memory)
    "amd.com/gpu.product-name",  # AMD GPU node labeller
    "beta.amd.com/gpu.product-name",
)
_INSTANCE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
_REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")

# (pattern on the lower-cased label value, koi GPU name or None for "known, not in koi").
_GPU_PATTERNS: tuple[tuple[str, str | None], ...] = (
    (r"h200", "H200"),
    (r"h100.*(pcie|nvl)", None),  # PCIe / NVL H100s are not the SXM part koi models
    (r"h100", "H100-SXM"),
    (r"b200", "B200"),
    (r"a100.*80", "A100-80GB"),
    (r"l40s", "L40S"),
    (r"a10g", "A10G"),
    (r"(^|[^a-z0-9])l4($|[^a-z0-9])", "L4"),
    (r"rtx.?pro.?6000", "RTXPRO6000"),
    (r"mi300x", "MI300X"),
)

# Capacity-type labels: key -> {raw value: market}.
_MARKET_LABELS: dict[str, dict[str, Market]] = {
    "karpenter.sh/capacity-type": {
        "spot": Market.SPOT,
        "on-demand": Market.ON_DEMAND,
        "reserved": Market.RESERVED,
    },
    "eks.amazonaws.com/capacityType": {
        "SPOT": Market.SPOT,
        "ON_DEMAND": Market.ON_DEMAND,
        "CAPACITY_BLOCK": Market.RESERVED,
    },
    "cloud.google.com/gke-spot": {"true": Market.SPOT},
    "cloud.google.com/gke-preemptible": {"true": Market.SPOT},
    "kubernetes.azure.com/scalesetpriority": {"spot": Market.SPOT, "regular": Market.ON_DEMAND},
}

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def quantity(value: object) -> float:
    """A Kubernetes quantity (``"8"``, ``"500m"``, ``"16Gi"``) as a number."""
    text = str(value).strip()
    m = re.fullmatch(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([A-Za-z]*)", text)
    if not m or (m.group(2) not in _BINARY and m.group(2) not in _DECIMAL):
        raise InvalidInput(f"not a Kubernetes quantity: {value!r}")
    scale = _BINARY.get(m.group(2)) or _DECIMAL[m.group(2)]
    return float(m.group(1)) * scale


def _gpu_count(resources: Mapping[str, Any] | None, resource: str) -> int:
    if not resources or resource not in resources:
        return 0
    return math.floor(quantity(resources[resource]))


def gpu_name(
    labels: Mapping[str, str], catalog: Catalog, settings: KubernetesSettings
) -> tuple[str | None, tuple[str, str] | None, str]:
    """The koi GPU of a node, the label that said so, and what was seen.

    Returns ``(name, (key, value) | None, seen)``: ``name`` is ``None`` when no label names a
    GPU koi knows (``seen`` then lists the raw values for the error message).
    """
    raw = [(k, labels[k]) for k in _GPU_LABELS if labels.get(k)]
    for key, value in raw:
        if value in settings.gpu_aliases:
            return settings.gpu_aliases[value], (key, value), value
    for key, value in raw:
        if value in catalog.gpus:
            return value, (key, value), value
        text = value.lower()
        if key == "karpenter.k8s.aws/instance-gpu-name":
            mem = labels.get("karpenter.k8s.aws/instance-gpu-memory", "")
            text += f"-{int(mem) // 1024}gb" if mem.isdigit() else ""
        for pattern, name in _GPU_PATTERNS:
            if re.search(pattern, text):
                if name is not None and name in catalog.gpus:
                    return name, (key, value), value
                break
    instance = _instance_label(labels)
    if instance is not None:
        inst = _catalog_instance(catalog, settings.cloud, instance[1])
        if inst is not None:
            return inst.gpu, None, instance[1]
    seen = ", ".join(f"{k}={v}" for k, v in raw) or "no GPU product label"
    return None, None, seen


def market_of(labels: Mapping[str, str], default: Market) -> tuple[Market, tuple[str, str] | None]:
    """The node's market from the provider's capacity-type label, and that label."""
    for key, values in _MARKET_LABELS.items():
        value = labels.get(key)
        if value is not None and value in values:
            return values[value], (key, value)
    return default, None


def _instance_label(labels: Mapping[str, str]) -> tuple[str, str] | None:
    for key in _INSTANCE_LABELS:
        if labels.get(key):
            return key, labels[key]
    return None


def _catalog_instance(catalog: Catalog, cloud: str, name: str) -> InstanceType | None:
    same_name = [i for i in catalog.instances if i.name == name]
    same_name.sort(key=lambda i: i.cloud != cloud)  # this cluster's cloud first
    return same_name[0] if same_name else None


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions") or []
    ready = [c for c in conditions if c.get("type") == "Ready"]
    return bool(ready) and ready[0].get("status") == "True"


def _tolerations(taints: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    out = []
    for t in taints:
        if t.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        tol: dict[str, Any] = {"key": t["key"], "effect": t["effect"]}
        if t.get("value"):
            tol.update(operator="Equal", value=t["value"])
        else:
            tol["operator"] = "Exists"
        out.append(types.MappingProxyType(tol))
    return tuple(out)


def _frozen_map(value: Mapping[str, str]) -> Mapping[str, str]:
    return types.MappingProxyType(dict(value))


def _frozen_counts(value: Mapping[str, int]) -> Mapping[str, int]:
    return types.MappingProxyType(dict(value))


@attrs.frozen
class PoolView:
    """A koi pool as found in the cluster: the pool, how to select its nodes, and its nodes.

    ``selector`` holds the labels every node of the pool carries that define it (instance
    type, GPU product, capacity type, region); ``tolerations`` tolerate the pool's taints.
    """

    pool: Pool
    selector: Mapping[str, str] = attrs.field(converter=_frozen_map, hash=False)
    tolerations: tuple[Mapping[str, Any], ...]
    nodes: tuple[str, ...]
    gpus_per_node: Mapping[str, int] = attrs.field(converter=_frozen_counts, hash=False)

    @property
    def id(self) -> str:
        return self.pool.id


def _price(
    catalog: Catalog,
    settings: KubernetesSettings,
    inst: InstanceType | None,
    instance_type: str,
    gpu: str,
    gpus: int,
    market: Market,
) -> float:
    if instance_type in settings.prices:
        return settings.prices[instance_type]
    if inst is not None and market in inst.markets and inst.gpus_per_instance == gpus:
        return inst.price_usd_per_h(market)
    try:
        per_gpu = catalog.cheapest_usd_per_gpu_h(gpu, markets=[market])
    except InvalidInput:
        per_gpu = catalog.cheapest_usd_per_gpu_h(gpu)
    return per_gpu * gpus


def pool_views(
    nodes: Sequence[Mapping[str, Any]], catalog: Catalog, settings: KubernetesSettings
) -> tuple[dict[str, PoolView], list[str]]:
    """Group GPU nodes into koi pools; return them by pool id, and why nodes were left out.

    A node counts toward its pool's capacity when it is Ready, schedulable and offers all
    the GPUs of its pool's instance type; a GPU node whose GPU koi cannot name is left out
    with the labels it carries.
    """
    groups: dict[tuple[str, str, Market, str], list[Mapping[str, Any]]] = defaultdict(list)
    info: dict[str, tuple[str, tuple[tuple[str, str], ...], int]] = {}
    skipped: list[str] = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        gpus = _gpu_count(node.get("status", {}).get("allocatable"), settings.gpu_resource)
        if gpus == 0:
            continue
        gpu, gpu_label, seen = gpu_name(labels, catalog, settings)
        if gpu is None:
            skipped.append(
                f"node {name}: {gpus} {settings.gpu_resource} but no GPU type koi knows "
                f"({seen}); map it with KubernetesSettings.gpu_aliases"
            )
            continue
        market, market_label = market_of(labels, settings.default_market)
        instance = _instance_label(labels)
        region_key = next((k for k in _REGION_LABELS if labels.get(k)), None)
        region = labels[region_key] if region_key else settings.default_region
        instance_type = instance[1] if instance else f"{gpu.lower()}-x{gpus}"
        defining = [p for p in (instance, gpu_label, market_label) if p is not None]
        if region_key:
            defining.append((region_key, region))
        groups[(region, instance_type, market, gpu)].append(node)
        info[name] = (gpu, tuple(defining), gpus)
    views: dict[str, PoolView] = {}
    for (region, instance_type, market, gpu), members in sorted(groups.items()):
        names = [n["metadata"]["name"] for n in members]
        per_node = {n: info[n][2] for n in names}
        full = max(per_node.values())
        shared = set(info[names[0]][1])
        for n in names[1:]:
            shared &= set(info[n][1])
        usable = []
        for node in members:
            n = node["metadata"]["name"]
            if not _ready(node):
                skipped.append(f"node {n}: not Ready")
            elif node.get("spec", {}).get("unschedulable"):
                skipped.append(f"node {n}: cordoned")
            elif per_node[n] < full:
                skipped.append(f"node {n}: {per_node[n]} of {full} GPUs allocatable")
            else:
                usable.append(n)
        inst = _catalog_instance(catalog, settings.cloud, instance_type)
        price = _price(catalog, settings, inst, instance_type, gpu, full, market)
        hazard = 0.0
        if market is Market.SPOT:
            hazard = (
                settings.spot_preemption_per_h
                if settings.spot_preemption_per_h is not None
                else (inst.spot_preemption_per_h if inst is not None else 0.0)
            )
        multi = settings.multi_node
        if multi is None:
            multi = inst.multi_node if inst is not None else False
        env = Environment(
            cloud=settings.cloud,
            region=region,
            market=market,
            instance_type=instance_type,
            gpu=gpu,
            gpus_per_instance=full,
            price_usd_per_h=price,
            preemption_per_h=hazard,
            multi_node=multi,
        )
        taints = [t for node in members for t in node.get("spec", {}).get("taints") or []]
        unique_taints = {(t.get("key"), t.get("value"), t.get("effect")): t for t in taints}
        views[env.id] = PoolView(
            pool=Pool(env, len(usable)),
            selector=dict(sorted(shared)),
            tolerations=_tolerations(unique_taints[k] for k in sorted(unique_taints, key=str)),
            nodes=tuple(usable),
            gpus_per_node=per_node,
        )
    return views, skipped


def gpus_requested(pods: Sequence[Mapping[str, Any]], resource: str) -> Counter[str]:
    """GPUs requested per node by the pods that hold them (not finished)."""
    used: Counter[str] = Counter()
    for pod in pods:
        node = pod.get("spec", {}).get("nodeName")
        if not node or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for c in pod["spec"].get("containers") or []:
            res = c.get("resources") or {}
            used[node] += max(
                _gpu_count(res.get("limits"), resource), _gpu_count(res.get("requests"), resource)
            )
    return used

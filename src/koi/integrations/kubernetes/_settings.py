"""The Kubernetes launcher's settings: one frozen value, every default documented here."""

from __future__ import annotations

import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.integrations.engine import EngineSettings
from koi.integrations.render import LaunchMode, to_mode
from koi.types import Job, Market, Quant
from koi.types.validators import identifier, non_negative, optional, positive, to_tuple

__all__ = ["KubernetesSettings", "NodeLabels"]


def _str_map(value: Mapping[str, str]) -> Mapping[str, str]:
    return types.MappingProxyType({str(k): str(v) for k, v in dict(value).items()})


def _price_map(value: Mapping[str, float]) -> Mapping[str, float]:
    out = {}
    for key, price in dict(value).items():
        if isinstance(price, bool) or not isinstance(price, int | float) or not price >= 0:
            raise InvalidInput(f"prices[{key!r}]: must be a price >= 0 USD/h, got {price!r}")
        out[str(key)] = float(price)
    return types.MappingProxyType(out)


@attrs.frozen
class NodeLabels:
    """Which node labels koi reads (snapshot) and writes (node selectors of rendered pods).

    Reading tries every known spelling: GPU feature discovery, GKE, Karpenter and EKS node
    groups, AKS.  Writing needs one spelling per fact; the defaults are the well-known labels
    every conformant cluster sets (instance type, region) and Karpenter's capacity type for
    the market.  A launcher that has seen the pool's nodes selects on the labels those nodes
    actually carry instead, so these only matter for ``koi render``.

    .. versionadded:: 0.1
    """

    instance_type: str = "node.kubernetes.io/instance-type"
    #: label written for the region; ``None`` writes no region selector
    region: str | None = "topology.kubernetes.io/region"
    #: label written for the market; ``None`` writes no market selector
    market: str | None = "karpenter.sh/capacity-type"
    #: value of ``market`` per koi market
    market_values: Mapping[str, str] = attrs.field(
        factory=lambda: {"on_demand": "on-demand", "spot": "spot", "reserved": "reserved"},
        converter=_str_map,
        hash=False,
    )


@attrs.frozen
class KubernetesSettings:
    """Everything the Kubernetes snapshot and launcher need besides the API client.

    ``cloud`` is the koi cloud name of this cluster: pools the snapshot reports carry it, and
    the launcher acts only on ranks whose environment has it (another launcher owns the rest).
    Use a catalog cloud (``aws``, ``gcp``, ``azure``, ``onprem``) to get the catalog's prices
    for the cluster's instance types.  ``prices`` overrides them, per instance type, in USD
    per instance-hour.  ``gpu_aliases`` maps a raw GPU label value (``"NVIDIA-H100-PCIe"``) to
    a koi GPU name when the built-in recognizer does not know it.

    ``ready_timeout_s`` bounds how long one launch waits for replicas to become ready (the
    per-rank readiness report comes after it at the latest); ``poll_interval_s`` is the
    status poll period (each API call is bounded by ``KubeApi``'s ``timeout_s``).
    ``force_conflicts`` makes koi take over fields another field manager owns (an HPA's
    ``replicas``, a human's ``kubectl edit``) instead of reporting the conflict.  ``out_dir``
    is where ``advisory`` mode writes manifests.  ``jobs`` are the jobs the snapshot reports
    (a cluster knows its workloads, not the SLOs behind them); their precision policies, with
    ``engine.precisions``, are what :meth:`precisions` holds every rendered rank to.

    .. versionadded:: 0.1
    """

    cloud: str = attrs.field(default="k8s", validator=identifier)
    namespace: str = attrs.field(default="default", validator=identifier)
    mode: LaunchMode = attrs.field(default=LaunchMode.APPLY, converter=to_mode)
    out_dir: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    engine: EngineSettings = attrs.field(factory=EngineSettings)
    node_labels: NodeLabels = attrs.field(factory=NodeLabels)
    gpu_resource: str = attrs.field(default="nvidia.com/gpu", validator=identifier)
    #: region of nodes that carry no region label
    default_region: str = attrs.field(default="default", validator=identifier)
    #: market of nodes that carry no capacity-type label
    default_market: Market = attrs.field(default=Market.ON_DEMAND, converter=Market)
    #: whether chains may span nodes (LeaderWorkerSet) when the catalog does not say
    multi_node: bool | None = None
    prices: Mapping[str, float] = attrs.field(factory=dict, converter=_price_map, hash=False)
    gpu_aliases: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map, hash=False)
    #: tolerations added to every pod (besides the taints of the pool's own nodes)
    tolerations: tuple[Mapping[str, Any], ...] = attrs.field(
        factory=lambda: ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
        converter=to_tuple,
    )
    #: labels added to every object koi writes
    labels: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map, hash=False)
    #: secret holding a Hugging Face token (key ``token``), mounted as ``HF_TOKEN`` if present
    hf_token_secret: str | None = "hf-token"
    #: size of the shared-memory volume (``/dev/shm``) NCCL needs, in GiB
    shm_gib: float = attrs.field(default=16.0, validator=positive)
    ready_timeout_s: float = attrs.field(default=900.0, validator=non_negative)
    poll_interval_s: float = attrs.field(default=5.0, validator=positive)
    force_conflicts: bool = False
    jobs: tuple[Job, ...] = attrs.field(default=(), converter=to_tuple)
    #: how long a spot node's pool is trusted, as the environment's preemption hazard per hour
    spot_preemption_per_h: float | None = attrs.field(
        default=None, validator=optional(non_negative)
    )

    def precisions(self) -> Mapping[str, tuple[Quant, ...]]:
        """Each known job's accepted precisions: ``engine.precisions``, then ``jobs``'."""
        return {**self.engine.precisions, **{j.id: j.precisions for j in self.jobs}}

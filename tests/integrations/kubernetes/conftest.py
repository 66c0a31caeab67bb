from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes", reason="the k8s extra is not installed: pip install 'koi[k8s]'")
pytest.importorskip(
    "kubernetes_validate",
    reason="kubernetes-validate is not installed: pip install 'koi[test-k8s]'",
)

from koi.integrations.kubernetes import KubeApi, KubernetesLauncher, KubernetesSettings
from tests.integrations.kubernetes._fake_api import FakeCluster, gpu_node

L40S = {
    "node.kubernetes.io/instance-type": "g6e.12xlarge",
    "topology.kubernetes.io/region": "us-east-1",
    "karpenter.sh/capacity-type": "on-demand",
    "nvidia.com/gpu.product": "NVIDIA-L40S",
}
L4_SPOT = {
    "node.kubernetes.io/instance-type": "g6.xlarge",
    "topology.kubernetes.io/region": "us-east-1",
    "karpenter.sh/capacity-type": "spot",
    "karpenter.k8s.aws/instance-gpu-name": "l4",
}
H100 = {
    "node.kubernetes.io/instance-type": "p5.48xlarge",
    "topology.kubernetes.io/region": "us-east-1",
    "eks.amazonaws.com/capacityType": "ON_DEMAND",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}

L40S_POOL = "aws/us-east-1/on_demand/g6e.12xlarge"
L4_POOL = "aws/us-east-1/spot/g6.xlarge"
H100_POOL = "aws/us-east-1/on_demand/p5.48xlarge"


def default_nodes() -> list[dict[str, object]]:
    return [
        gpu_node("l40s-a", gpus=4, labels=L40S),
        gpu_node("l40s-b", gpus=4, labels=L40S),
        gpu_node("l4-a", gpus=1, labels=L4_SPOT),
        gpu_node("h100-a", gpus=8, labels=H100, taints=[GPU_TAINT]),
        gpu_node("h100-b", gpus=8, labels=H100, taints=[GPU_TAINT]),
        {"metadata": {"name": "cpu-a", "labels": {}}, "status": {"allocatable": {"cpu": "8"}}},
    ]


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster()
    fake.nodes = default_nodes()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def api(cluster: FakeCluster) -> KubeApi:
    from kubernetes import client

    cfg = client.Configuration()
    assert cluster._server is not None
    cfg.host = f"http://127.0.0.1:{cluster._server.server_port}"
    cfg.retries = 0
    return KubeApi(client.ApiClient(cfg), timeout_s=5.0)


@pytest.fixture
def settings(tmp_path: Path) -> KubernetesSettings:
    return KubernetesSettings(
        cloud="aws", namespace="llm", ready_timeout_s=0.6, poll_interval_s=0.05
    )


@pytest.fixture
def launcher(api: KubeApi, settings: KubernetesSettings) -> KubernetesLauncher:
    return KubernetesLauncher(api, settings)

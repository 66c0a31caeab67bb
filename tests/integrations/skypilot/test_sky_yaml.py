"""Every SkyServe YAML koi renders loads through the real ``sky.Task.from_yaml``, offline.

SkyPilot is large, so these tests run in ``make test-integrations`` (which installs the
``skypilot`` extra; ``.ci/run`` calls it) and are deselected from ``make test``.  They skip,
saying why, only where SkyPilot is not installed.  No network: a guard fails the test if
SkyPilot tries to resolve any host (it would, to fetch a cloud catalog, for an
``instance_type`` — which is why koi names accelerators and regions, not instance types).
"""

from __future__ import annotations

import contextlib
import io
import socket
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koi.catalog import load_catalog
from koi.cli import main
from koi.integrations.engine import EngineSettings
from koi.integrations.render import to_yaml
from koi.integrations.skypilot import SkyPilotSettings, render_service_config
from koi.types import Chain, Config, Rank

pytestmark = pytest.mark.integrations

CAT = load_catalog()


@pytest.fixture(scope="module")
def sky() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SkyPilot's own deprecation warnings on import
        return pytest.importorskip(
            "sky",
            reason="SkyPilot is not installed: pip install 'koi[skypilot]' "
            "(`make test-integrations` installs it)",
        )


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    tried: list[str] = []

    def refuse(host: object, *args: object, **kwargs: object) -> Any:
        tried.append(str(host))
        raise socket.gaierror(f"no network in koi's tests (asked for {host})")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    yield tried
    assert tried == [], f"SkyPilot tried to reach {tried}"


def _load(sky: Any, path: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sky.Task.from_yaml(str(path))


def _ranks() -> list[tuple[Rank, SkyPilotSettings]]:
    l40s = CAT.instance("aws", "g6e.12xlarge").environment("us-east-1", "on_demand")
    l4_spot = CAT.instance("aws", "g6.xlarge").environment("us-east-1", "spot")
    a100 = CAT.instance("gcp", "a2-ultragpu-1g").environment("us-central1", "spot")
    h100 = CAT.instance("aws", "p5.48xlarge").environment("us-east-1", "on_demand")
    mi300x = CAT.instance("azure", "Standard_ND96isr_MI300X_v5").environment("eastus", "on_demand")
    plain = SkyPilotSettings()
    fallbacks = SkyPilotSettings(fallback_price_tolerance=0.25)
    awq = SkyPilotSettings(
        engine=EngineSettings(checkpoints={"Llama-3.1-70B@int4": "org/Llama-3.1-70B-AWQ"})
    )
    return [
        (Rank(Chain("Llama-3.1-8B", l40s, Config(tp=4, max_batch_size=128)), 3), plain),
        (Rank(Chain("Llama-3.1-8B", l4_spot, Config(quant="int4")), 2), fallbacks),
        (Rank(Chain("Qwen3-8B", a100, Config(engine="sglang", quant="fp8")), 1), fallbacks),
        (Rank(Chain("Llama-3.1-70B", h100, Config(tp=8, quant="int4")), 1), awq),
        (Rank(Chain("Qwen3-32B", mi300x, Config(tp=2)), 1), plain),
        (
            Rank(Chain("Llama-3.1-8B", l40s, Config(engine="trtllm", tp=2, cuda_graphs=False)), 2),
            plain,
        ),
    ]


@pytest.mark.parametrize("case", range(6))
def test_rendered_service_yaml_loads_in_skypilot(
    sky: Any, offline: list[str], tmp_path: Path, case: int
) -> None:
    rank, settings = _ranks()[case]
    config = render_service_config("chat", rank, settings, CAT)
    path = tmp_path / "service.yaml"
    path.write_text(to_yaml([config]))
    task = _load(sky, path)
    env = rank.chain.environment
    resources = list(task.resources)
    assert resources, "SkyPilot read no resources"
    want = settings.accelerators[env.gpu]
    for res in resources:
        assert res.accelerators == {want: rank.chain.gpus}
        assert res.use_spot is (env.market.value == "spot")
    clouds = {str(res.cloud).lower() for res in resources}
    assert env.cloud in clouds
    if "any_of" in config["resources"]:
        assert len(resources) == len(config["resources"]["any_of"]) > 1
    assert task.service.min_replicas == rank.replicas
    assert task.service.max_replicas == rank.replicas
    assert task.service.readiness_path == "/health"
    assert task.run.strip() == config["run"].strip()


def test_koi_render_of_a_builtin_scenario_loads_in_skypilot(
    sky: Any, offline: list[str], tmp_path: Path
) -> None:
    def run(argv: list[str]) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(argv) == 0
        return out.getvalue()

    (tmp_path / "snap.json").write_text(run(["scenarios", "--snapshot", "smoke"]))
    (tmp_path / "plan.json").write_text(run(["plan", str(tmp_path / "snap.json"), "--json"]))
    out = tmp_path / "sky"
    run(["render", str(tmp_path / "plan.json"), "--target", "skypilot", "--out", str(out)])
    files = sorted(out.glob("*.yaml"))
    assert files
    for f in files:
        task = _load(sky, f)
        assert task.service is not None
        assert task.run

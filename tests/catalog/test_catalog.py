"""Catalog lookups, environment filters, cheapest prices and construction checks."""

from __future__ import annotations

import pytest

from koi.catalog import Catalog, InstanceType, load_catalog
from koi.errors import InvalidInput
from koi.types import GpuSpec, Market


def test_lookups_name_known_entries() -> None:
    catalog = load_catalog()
    assert catalog.gpu("L4").memory_gib == 24
    assert catalog.model("Phi-4").layers == 40
    assert catalog.instance("aws", "p5.48xlarge").gpus_per_instance == 8
    with pytest.raises(InvalidInput, match=r"unknown gpu 'H100'.*H100-SXM"):
        catalog.gpu("H100")
    with pytest.raises(InvalidInput, match="unknown model 'gpt-5'"):
        catalog.model("gpt-5")
    with pytest.raises(InvalidInput, match="unknown instance 'aws/p9'"):
        catalog.instance("aws", "p9")


def test_environments_filters() -> None:
    catalog = load_catalog()
    everything = catalog.environments()
    assert [e.id for e in everything] == sorted(e.id for e in everything)
    assert len({e.id for e in everything}) == len(everything)

    l4_spot = catalog.environments(gpus=["L4"], markets=["spot"])
    assert l4_spot
    assert {(e.gpu, e.market) for e in l4_spot} == {("L4", Market.SPOT)}
    assert all(e.preemption_per_h > 0 for e in l4_spot)
    assert {e.cloud for e in l4_spot} == {"aws", "gcp"}

    gcp = catalog.environments(clouds=["gcp"], markets="on_demand")
    assert {e.cloud for e in gcp} == {"gcp"}
    # GCP sells the small A3 shapes only as spot
    assert not any(e.instance_type == "a3-highgpu-1g" for e in gcp)

    onprem = catalog.environments(clouds=["onprem"])
    assert onprem
    assert {e.market for e in onprem} == {Market.RESERVED}

    region = catalog.environments(regions=["eu-west-1"])
    assert region
    assert {e.region for e in region} == {"eu-west-1"}

    n = sum(len(i.regions) * len(i.markets) for i in catalog.instances)
    assert len(everything) == n


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gpus": ["H100"]}, "unknown gpu 'H100'"),
        ({"clouds": ["oracle"]}, "unknown cloud 'oracle'"),
        ({"markets": ["preemptible"]}, "market: must be one of"),
        ({"regions": ["moon-1"]}, "unknown region 'moon-1'"),
    ],
)
def test_environments_unknown_filter_values_raise(kwargs: dict[str, list[str]], match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        load_catalog().environments(**kwargs)


def test_cheapest_usd_per_gpu_h() -> None:
    catalog = load_catalog()
    cheapest = catalog.cheapest_usd_per_gpu_h("H100-SXM")
    by_env = min(e.price_usd_per_gpu_h for e in catalog.environments(gpus=["H100-SXM"]))
    assert cheapest == pytest.approx(by_env)
    od = catalog.cheapest_usd_per_gpu_h("H100-SXM", markets=["on_demand"])
    assert od > cheapest
    assert od == pytest.approx(55.04 / 8)
    # MI300X is sold on Azure without a spot market and on-prem as reserved only
    with pytest.raises(InvalidInput, match="no instance type sells 'MI300X'"):
        catalog.cheapest_usd_per_gpu_h("MI300X", markets=["spot"])


def _gpu(name: str, per_node: int = 8) -> GpuSpec:
    return GpuSpec(name, "acme", 16.0, 1.0, 100.0, None, None, "pcie", 32.0, per_node, 3.0)


def test_construction_checks() -> None:
    inst = InstanceType("c", "t", "X1", 4, ["r"], 1.0)
    assert Catalog(gpus={"X1": _gpu("X1")}, models={}, instances=[inst]).instances == (inst,)
    with pytest.raises(InvalidInput, match="unknown GPU 'X1'"):
        Catalog(gpus={}, models={}, instances=[inst])
    with pytest.raises(InvalidInput, match="gpus_per_instance: must be <= 2"):
        Catalog(gpus={"X1": _gpu("X1", per_node=2)}, models={}, instances=[inst])
    with pytest.raises(InvalidInput, match="duplicate instance type 'c/t'"):
        Catalog(gpus={"X1": _gpu("X1")}, models={}, instances=[inst, inst])
    with pytest.raises(InvalidInput, match="key differs from name"):
        Catalog(gpus={"X2": _gpu("X1")}, models={}, instances=[])


def test_with_entries_adds_and_replaces_without_mutating() -> None:
    base = load_catalog()
    cheaper = InstanceType("aws", "g6.xlarge", "L4", 1, ["us-east-1"], 0.5)
    extra = InstanceType("acme", "x1.box", "X1", 2, ["here"], reserved_usd_per_h=1.0)
    new = base.with_entries(gpus=[_gpu("X1")], instances=[cheaper, extra])
    assert new.instance("aws", "g6.xlarge").on_demand_usd_per_h == 0.5
    assert new.instances.index(cheaper) == base.instances.index(base.instance("aws", "g6.xlarge"))
    assert new.instances[-1] == extra
    assert "X1" in new.gpus
    assert "X1" not in base.gpus
    assert base.instance("aws", "g6.xlarge").on_demand_usd_per_h == pytest.approx(0.805)
    with pytest.raises(TypeError):
        new.gpus["Y"] = _gpu("Y")  # type: ignore[index]

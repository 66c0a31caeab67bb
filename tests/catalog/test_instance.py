"""InstanceType validation, markets, prices and the environments it yields."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from koi.catalog import InstanceType
from koi.errors import InvalidInput
from koi.types import Environment, Market, from_data, to_data


def _inst(**over: object) -> InstanceType:
    fields: dict[str, object] = {
        "cloud": "aws",
        "name": "g6.12xlarge",
        "gpu": "L4",
        "gpus_per_instance": 4,
        "regions": ["us-east-1", "eu-west-1"],
        "on_demand_usd_per_h": 4.0,
        "spot_usd_per_h": 1.5,
        "reserved_usd_per_h": 2.5,
        "spot_preemption_per_h": 0.05,
        "multi_node": False,
    }
    fields.update(over)
    return InstanceType(**fields)  # type: ignore[arg-type]


def test_markets_and_prices() -> None:
    inst = _inst()
    assert inst.id == "aws/g6.12xlarge"
    assert inst.markets == (Market.ON_DEMAND, Market.SPOT, Market.RESERVED)
    assert inst.price_usd_per_h("spot") == 1.5
    assert inst.price_usd_per_h(Market.RESERVED) == 2.5
    reserved_only = _inst(on_demand_usd_per_h=None, spot_usd_per_h=None, spot_preemption_per_h=0)
    assert reserved_only.markets == (Market.RESERVED,)
    with pytest.raises(InvalidInput, match="not sold as on_demand"):
        reserved_only.price_usd_per_h("on_demand")
    with pytest.raises(InvalidInput, match="market: must be one of"):
        inst.price_usd_per_h("preemptible")


def test_environment_carries_hazard_only_on_spot() -> None:
    inst = _inst(multi_node=True)
    spot = inst.environment("eu-west-1", "spot")
    assert spot == Environment(
        cloud="aws",
        region="eu-west-1",
        market=Market.SPOT,
        instance_type="g6.12xlarge",
        gpu="L4",
        gpus_per_instance=4,
        price_usd_per_h=1.5,
        preemption_per_h=0.05,
        multi_node=True,
    )
    assert spot.id == "aws/eu-west-1/spot/g6.12xlarge"
    assert inst.environment("us-east-1", "on_demand").preemption_per_h == 0.0
    assert inst.environment("us-east-1", "reserved").price_usd_per_gpu_h == pytest.approx(0.625)
    with pytest.raises(InvalidInput, match=r"region: aws/g6\.12xlarge is not sold in 'mars-1'"):
        inst.environment("mars-1", "spot")


def test_environments_cover_regions_times_markets() -> None:
    inst = _inst()
    assert len(inst.environments()) == 2 * 3
    assert {e.market for e in inst.environments(["spot"])} == {Market.SPOT}


@pytest.mark.parametrize(
    ("over", "match"),
    [
        ({"regions": []}, "regions: must list at least one region"),
        ({"regions": "us-east-1"}, "regions: must be a list of region names"),  # not letters
        ({"regions": ["a", "a"]}, "regions: must not repeat"),
        ({"regions": [" a"]}, "regions: must be non-empty names"),
        ({"gpus_per_instance": 0}, "gpus_per_instance: must be an integer >= 1"),
        ({"on_demand_usd_per_h": -1.0}, "on_demand_usd_per_h: must be > 0"),
        ({"spot_preemption_per_h": -0.1}, "spot_preemption_per_h: must be >= 0"),
        ({"multi_node": "yes"}, "multi_node: must be true or false"),
        ({"cloud": ""}, "cloud: must be a non-empty name"),
        (
            {"on_demand_usd_per_h": None, "spot_usd_per_h": None, "reserved_usd_per_h": None},
            "at least one of",
        ),
        ({"spot_usd_per_h": None, "spot_preemption_per_h": 0.1}, "must be 0 when no spot"),
    ],
)
def test_invalid_fields_raise_naming_the_field(over: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        _inst(**over)


prices = st.one_of(st.none(), st.floats(0.01, 500, allow_nan=False))


@given(
    n=st.integers(1, 8),
    regions=st.lists(
        st.sampled_from(["r1", "r2", "r3", "r4"]), min_size=1, max_size=4, unique=True
    ),
    od=prices,
    spot=prices,
    reserved=prices,
    hazard=st.floats(0, 1),
)
def test_property_environments_and_round_trip(
    n: int,
    regions: list[str],
    od: float | None,
    spot: float | None,
    reserved: float | None,
    hazard: float,
) -> None:
    if od is None and spot is None and reserved is None:
        reserved = 1.0
    inst = InstanceType(
        "c",
        "t",
        "L4",
        n,
        regions,
        od,
        spot,
        reserved,
        hazard if spot is not None else 0.0,
        multi_node=False,
    )
    assert from_data(to_data(inst), InstanceType) == inst
    envs = inst.environments()
    assert len(envs) == len(regions) * len(inst.markets)
    for env in envs:
        assert env.gpus_per_instance == n
        assert math.isclose(env.price_usd_per_h, inst.price_usd_per_h(env.market))
        assert env.preemption_per_h == (hazard if env.market is Market.SPOT else 0.0)

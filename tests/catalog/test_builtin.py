"""Every built-in catalog entry loads, validates and is consistent with its public source."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import pytest

from koi.catalog import load_catalog
from koi.types import LinkKind, Market, ModelSpec

GPUS = ["H100-SXM", "H200", "A100-80GB", "L40S", "L4", "A10G", "RTXPRO6000", "MI300X", "B200"]
MODELS = [
    "Llama-3.2-1B",
    "Llama-3.1-8B",
    "Qwen3-8B",
    "Phi-4",
    "Mistral-Small-24B",
    "Qwen3-32B",
    "Llama-3.1-70B",
    "Mixtral-8x7B",
    "Qwen3-30B-A3B",
    "Llama-4-Scout-17B-16E",
    "Qwen3-235B-A22B",
    "Llama-3.1-405B",
]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "catalog.md"


def _raw(name: str) -> dict[str, list[dict[str, object]]]:
    text = (resources.files("koi.catalog") / "data" / name).read_text(encoding="utf-8")
    return tomllib.loads(text)


def test_exact_names() -> None:
    catalog = load_catalog()
    assert list(catalog.gpus) == GPUS
    assert list(catalog.models) == MODELS


def test_builtin_is_parsed_once() -> None:
    assert load_catalog() is load_catalog()


@pytest.mark.parametrize(
    ("file", "section"),
    [("gpus.toml", "gpus"), ("models.toml", "models"), ("instances.toml", "instances")],
)
def test_every_entry_names_its_source(file: str, section: str) -> None:
    entries = _raw(file)[section]
    assert entries
    for entry in entries:
        assert isinstance(entry.get("source", "x"), str)
        if section != "instances":  # instance sources are per price list, in docs/catalog.md
            assert entry.get("source"), entry["name"]


def test_docs_name_every_entry() -> None:
    text = DOCS.read_text(encoding="utf-8")
    catalog = load_catalog()
    for name in [*catalog.gpus, *catalog.models, *(i.name for i in catalog.instances)]:
        assert f"`{name}`" in text, name


def test_tensor_formats_follow_the_architecture() -> None:
    g = load_catalog().gpus
    # Hopper and CDNA3 have FP8 but no INT4/FP4; Ampere has INT4 but no FP8.
    for name in ("H100-SXM", "H200", "MI300X"):
        assert g[name].fp8_tflops is not None
        assert g[name].int4_tflops is None
    for name in ("A100-80GB", "A10G"):
        assert g[name].fp8_tflops is None
        assert g[name].int4_tflops is not None
    # Blackwell has FP4 (stored in int4_tflops); Ada has FP8.
    for name in ("B200", "RTXPRO6000"):
        assert g[name].int4_tflops is not None
        assert g[name].fp8_tflops is not None
    for name in ("L40S", "L4"):
        fp8 = g[name].fp8_tflops
        assert fp8 is not None
        assert g[name].int4_tflops == 2 * fp8  # Ada: INT4 = 2 x INT8 = 2 x FP8


def test_gpu_figures_are_dense_and_ordered() -> None:
    for spec in load_catalog().gpus.values():
        lower = [spec.bf16_tflops, spec.fp8_tflops, spec.int4_tflops]
        present = [x for x in lower if x is not None]
        assert present == sorted(present), spec.name
        # dense peaks: no GPU in the catalog reaches 2.5 PFLOPS BF16 dense
        assert spec.bf16_tflops < 2500
        # intra-node fabric beats the scale-out network
        assert spec.link_gb_s > spec.internode_gb_s
        if spec.link in (LinkKind.PCIE, LinkKind.PCIE_NO_P2P):
            assert spec.link_gb_s <= 64
        else:
            assert spec.link_gb_s >= 300


def test_known_datasheet_values() -> None:
    g = load_catalog().gpus
    assert g["H100-SXM"].hbm_tb_s == pytest.approx(3.35)
    assert g["H100-SXM"].bf16_tflops == pytest.approx(989.5)
    assert g["H100-SXM"].link_gb_s == pytest.approx(450)
    assert g["H200"].memory_gib == pytest.approx(141)
    assert g["MI300X"].memory_gib == pytest.approx(192)
    assert g["A100-80GB"].bf16_tflops == pytest.approx(312)
    assert g["L4"].memory_gib == pytest.approx(24)


_TIED_EMBEDDINGS = {"Llama-3.2-1B"}
# Llama-4-Scout: every layer has a shared expert of width `intermediate` beside the routed ones,
# and a ~0.8B vision tower is counted in the published total.
_SHARED_EXPERT = {"Llama-4-Scout-17B-16E"}


def _count_params(m: ModelSpec) -> tuple[float, float]:
    """Total and active parameters (billions) from the architecture alone."""
    q = m.heads * m.head_dim
    kv = m.kv_heads * m.head_dim
    attn = m.hidden * q * 2 + m.hidden * kv * 2
    embed = m.vocab * m.hidden * (1 if m.name in _TIED_EMBEDDINGS else 2)
    if m.is_moe:
        expert = 3 * m.hidden * m.expert_intermediate
        shared = 3 * m.hidden * m.intermediate if m.name in _SHARED_EXPERT else 0
        total = m.layers * (attn + m.experts * expert + shared) + embed
        active = m.layers * (attn + m.experts_per_token * expert + shared) + embed
    else:
        total = active = m.layers * (attn + 3 * m.hidden * m.intermediate) + embed
    return total / 1e9, active / 1e9


@pytest.mark.parametrize("name", MODELS)
def test_model_params_match_architecture(name: str) -> None:
    m = load_catalog().models[name]
    total, active = _count_params(m)
    assert total == pytest.approx(m.params_b, rel=0.03)
    assert active == pytest.approx(m.active_params_b, rel=0.03)
    assert m.heads * m.head_dim >= m.hidden // 2


def test_model_kinds() -> None:
    models = load_catalog().models
    moe = {n for n, m in models.items() if m.is_moe}
    assert moe == {"Mixtral-8x7B", "Qwen3-30B-A3B", "Llama-4-Scout-17B-16E", "Qwen3-235B-A22B"}
    assert models["Llama-3.1-405B"].size_class == "dense-xl"
    assert models["Llama-3.1-8B"].kv_bytes_per_token == 131072  # 2·32 layers·8·128·2 bytes


def test_instances_cover_clouds_markets_and_gpus() -> None:
    catalog = load_catalog()
    public = {c for c in catalog.clouds if c != "onprem"}
    assert len(public) >= 3
    assert "onprem" in catalog.clouds
    sold = {i.gpu for i in catalog.instances}
    assert sold == set(GPUS)
    # small shapes exist for packing small models
    one_gpu = {i.gpu for i in catalog.instances if i.gpus_per_instance == 1}
    assert {"L4", "A10G", "L40S", "A100-80GB", "H100-SXM"} <= one_gpu
    for inst in catalog.instances:
        if inst.cloud == "onprem":
            assert inst.markets == (Market.RESERVED,)
            continue
        assert Market.SPOT not in inst.markets or inst.spot_preemption_per_h > 0
        if inst.on_demand_usd_per_h is not None:
            for other in (inst.spot_usd_per_h, inst.reserved_usd_per_h):
                assert other is None or other < inst.on_demand_usd_per_h


def test_multi_node_only_on_full_fabric_nodes() -> None:
    catalog = load_catalog()
    for inst in catalog.instances:
        if inst.multi_node:
            assert inst.gpus_per_instance == catalog.gpus[inst.gpu].gpus_per_node, inst.id


def test_price_per_gpu_hour_is_plausible() -> None:
    for env in load_catalog().environments():
        assert 0.05 < env.price_usd_per_gpu_h < 20, env.id

"""``koi catalog gpus|models|instances [--json] [--file PATH]``: show the built-in catalogs."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from koi.catalog import Catalog, InstanceType, load_catalog
from koi.types import GpuSpec, ModelSpec, to_data

__all__ = ["register"]


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:g}"


def _gpu_row(g: GpuSpec) -> list[str]:
    return [
        g.name,
        g.vendor,
        _num(g.memory_gib),
        _num(g.hbm_tb_s),
        _num(g.bf16_tflops),
        _num(g.fp8_tflops),
        _num(g.int4_tflops),
        g.link.value,
        _num(g.link_gb_s),
        str(g.gpus_per_node),
        _num(g.internode_gb_s),
    ]


_GPU_HEAD = [
    "name",
    "vendor",
    "mem_GiB",
    "HBM_TB/s",
    "BF16_TF",
    "FP8_TF",
    "INT4/FP4_TF",
    "link",
    "link_GB/s",
    "gpus/node",
    "net_GB/s",
]


def _model_row(m: ModelSpec) -> list[str]:
    moe = m.is_moe
    return [
        m.name,
        _num(m.params_b),
        _num(m.active_params_b),
        str(m.layers),
        str(m.hidden),
        str(m.heads),
        str(m.kv_heads),
        str(m.head_dim),
        str(m.intermediate),
        str(m.vocab),
        str(m.max_context),
        f"{m.experts_per_token}/{m.experts}x{m.expert_intermediate}" if moe else "-",
        m.size_class,
    ]


_MODEL_HEAD = [
    "name",
    "params_B",
    "active_B",
    "layers",
    "hidden",
    "heads",
    "kv",
    "head_dim",
    "ffn",
    "vocab",
    "context",
    "experts(k/E x ffn)",
    "class",
]


def _instance_row(i: InstanceType) -> list[str]:
    return [
        i.cloud,
        i.name,
        i.gpu,
        str(i.gpus_per_instance),
        _num(i.on_demand_usd_per_h),
        _num(i.spot_usd_per_h),
        _num(i.reserved_usd_per_h),
        _num(i.spot_preemption_per_h) if i.spot_usd_per_h is not None else "-",
        "yes" if i.multi_node else "no",
        ",".join(i.regions),
    ]


_INSTANCE_HEAD = [
    "cloud",
    "instance",
    "gpu",
    "gpus",
    "on_demand_$/h",
    "spot_$/h",
    "reserved_$/h",
    "spot_hazard/h",
    "multi_node",
    "regions",
]


def format_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned text columns separated by two spaces, with a rule under the header."""
    widths = [max(len(r[c]) for r in [head, *rows]) for c in range(len(head))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(head), rule, *(line(r) for r in rows)])


def _table(catalog: Catalog, what: str) -> tuple[list[str], list[list[str]], list[object]]:
    """Header, text rows and the entries themselves (for ``--json``) of one catalog section."""
    if what == "gpus":
        gpus = list(catalog.gpus.values())
        return _GPU_HEAD, [_gpu_row(g) for g in gpus], list(gpus)
    if what == "models":
        models = list(catalog.models.values())
        return _MODEL_HEAD, [_model_row(m) for m in models], list(models)
    insts = list(catalog.instances)
    return _INSTANCE_HEAD, [_instance_row(i) for i in insts], list(insts)


def _run(args: argparse.Namespace) -> int:
    catalog = load_catalog(*args.file)
    head, rows, entries = _table(catalog, args.what)
    if args.json:
        print(json.dumps([to_data(e) for e in entries], indent=2))
    else:
        print(format_table(head, rows))
    return 0


def register(subparsers: Any) -> None:
    """Add the ``catalog`` sub-command to the ``koi`` parser."""
    parser = subparsers.add_parser(
        "catalog",
        help="list the built-in GPUs, model architectures or instance types",
        description=(
            "List catalog entries: GPUs with their specs, model architectures, or instance "
            "types with on-demand, spot and reserved prices (USD per instance-hour)."
        ),
    )
    parser.add_argument("what", choices=("gpus", "models", "instances"))
    parser.add_argument(
        "--json", action="store_true", help="print a JSON list with every field of every entry"
    )
    parser.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="PATH",
        help="extra catalog TOML file to add or override entries (repeatable)",
    )
    parser.set_defaults(handler=_run)

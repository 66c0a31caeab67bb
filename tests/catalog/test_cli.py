"""``koi catalog gpus|models|instances [--json]`` through ``koi.cli.main``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from koi.catalog import load_catalog
from koi.cli import main
from koi.types import GpuSpec, ModelSpec, from_data

GPUS = ["H100-SXM", "H200", "A100-80GB", "L40S", "L4", "A10G", "RTXPRO6000", "MI300X", "B200"]


def test_gpus_json_lists_all_nine_with_specs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", "gpus", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in data] == GPUS
    for entry in data:
        assert set(entry) >= {
            "memory_gib",
            "hbm_tb_s",
            "bf16_tflops",
            "fp8_tflops",
            "int4_tflops",
            "link",
            "link_gb_s",
            "gpus_per_node",
            "internode_gb_s",
        }
        assert from_data(entry, GpuSpec) == load_catalog().gpus[entry["name"]]
    h100 = data[0]
    assert h100["link"] == "nvlink"
    assert h100["int4_tflops"] is None
    assert h100["bf16_tflops"] == pytest.approx(989.5)


def test_models_json_round_trips(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", "models", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data) == 12
    assert data[-1]["name"] == "Llama-3.1-405B"
    assert [from_data(d, ModelSpec) for d in data] == list(load_catalog().models.values())


def test_instances_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", "instances", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data) == len(load_catalog().instances)
    p5 = next(d for d in data if d["name"] == "p5.48xlarge")
    assert p5["gpu"] == "H100-SXM"
    assert p5["multi_node"] is True
    assert isinstance(p5["regions"], list)


@pytest.mark.parametrize(
    ("what", "expect"),
    [
        ("gpus", ["H100-SXM", "infinity_fabric", "HBM_TB/s"]),
        ("models", ["Llama-3.1-405B", "8/128x768", "moe-xl"]),
        ("instances", ["p5.48xlarge", "onprem-hgx-h100-8", "spot_$/h"]),
    ],
)
def test_tables(capsys: pytest.CaptureFixture[str], what: str, expect: list[str]) -> None:
    assert main(["catalog", what]) == 0
    out = capsys.readouterr().out
    for text in expect:
        assert text in out
    lines = out.splitlines()
    assert set(lines[1]) <= {"-", " "}
    n = {"gpus": 9, "models": 12, "instances": len(load_catalog().instances)}[what]
    assert len(lines) == 2 + n


def test_file_option_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "fleet.toml"
    good.write_text(
        '[[instances]]\ncloud = "acme"\nname = "l4-box"\ngpu = "L4"\ngpus_per_instance = 2\n'
        'regions = ["lab"]\nreserved_usd_per_h = 0.9\n',
        encoding="utf-8",
    )
    assert main(["catalog", "instances", "--file", str(good)]) == 0
    assert "l4-box" in capsys.readouterr().out

    bad = tmp_path / "bad.toml"
    bad.write_text('[[instances]]\ncloud = "acme"\nname = "x"\n', encoding="utf-8")
    assert main(["catalog", "instances", "--file", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "koi: error:" in err
    assert "bad.toml: instances[0] (acme/x)" in err


def test_unknown_section_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["catalog", "clouds"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err

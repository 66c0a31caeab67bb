"""User catalog files: overrides, additions, and errors that name the file and the entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from koi.catalog import load_catalog, parse_catalog_text, read_catalog_file
from koi.errors import InvalidInput

USER = """
[[gpus]]
name = "X1"
source = "in-house accelerator, vendor sheet"
vendor = "acme"
memory_gib = 64.0
hbm_tb_s = 2.0
bf16_tflops = 400.0
fp8_tflops = 800.0
link = "pcie"
link_gb_s = 64.0
gpus_per_node = 4
internode_gb_s = 12.5

[[instances]]
cloud = "acme"
name = "x1-box"
gpu = "X1"
gpus_per_instance = 4
regions = ["lab"]
reserved_usd_per_h = 6.0

[[instances]]
cloud = "aws"
name = "g6.xlarge"
gpu = "L4"
gpus_per_instance = 1
regions = ["us-east-1"]
on_demand_usd_per_h = 0.70
spot_usd_per_h = 0.30
spot_preemption_per_h = 0.2

[[models]]
name = "Llama-3.1-8B"
params_b = 8.03
active_params_b = 8.03
layers = 32
hidden = 4096
heads = 32
kv_heads = 8
head_dim = 128
intermediate = 14336
vocab = 128256
max_context = 8192
"""


def _write(tmp_path: Path, text: str, name: str = "fleet.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_with_file_adds_and_overrides(tmp_path: Path) -> None:
    path = _write(tmp_path, USER)
    base = load_catalog()
    cat = base.with_file(path)
    assert cat.gpus["X1"].int4_tflops is None  # omitted optional field means None
    assert cat.gpus["X1"].fp8_tflops == 800.0
    assert cat.instance("acme", "x1-box").markets[0].value == "reserved"
    g6 = cat.instance("aws", "g6.xlarge")
    assert g6.on_demand_usd_per_h == 0.70
    assert g6.reserved_usd_per_h is None  # a user entry replaces the whole built-in entry
    assert cat.models["Llama-3.1-8B"].max_context == 8192
    assert len(cat.instances) == len(base.instances) + 1
    assert len(cat.gpus) == 10
    # the built-in catalog is untouched
    assert base.models["Llama-3.1-8B"].max_context == 131072
    assert "X1" not in load_catalog().gpus
    # same result through load_catalog(*files)
    assert load_catalog(path) == cat


def test_later_files_win(tmp_path: Path) -> None:
    first = _write(tmp_path, USER, "a.toml")
    second = _write(
        tmp_path,
        '[[instances]]\ncloud = "acme"\nname = "x1-box"\ngpu = "X1"\ngpus_per_instance = 2\n'
        'regions = ["lab"]\nreserved_usd_per_h = 3.0\n',
        "b.toml",
    )
    cat = load_catalog(first, second)
    assert cat.instance("acme", "x1-box").gpus_per_instance == 2
    # b.toml alone refers to a GPU only a.toml defines: the error names b.toml and the entry
    with pytest.raises(
        InvalidInput, match=r"b\.toml: instances\[0\] \(acme/x1-box\): gpu: unknown"
    ):
        load_catalog(second)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            (
                '[[gpus]]\nname = "X2"\nvendor = "acme"\nmemory_gib = -1\nhbm_tb_s = 1\n'
                'bf16_tflops = 1\nlink = "pcie"\nlink_gb_s = 1\ngpus_per_node = 1\n'
                "internode_gb_s = 1\n"
            ),
            r"bad\.toml: gpus\[0\] \(X2\): memory_gib: must be > 0, got -1",
        ),
        (
            (
                '[[gpus]]\nname = "X2"\nvendor = "acme"\nmemory_gib = 1\nhbm_tb_s = 1\n'
                'bf16_tflops = 1\nlink = "ethernet"\nlink_gb_s = 1\ngpus_per_node = 1\n'
                "internode_gb_s = 1\n"
            ),
            r"bad\.toml: gpus\[0\] \(X2\): link: must be one of .*ethernet",
        ),
        (
            '[[models]]\nname = "M"\nparams_b = 1\nactive_params_b = 1\nlayers = 2\n',
            r"bad\.toml: models\[0\] \(M\): .*hidden: required field missing",
        ),
        (
            (
                '[[models]]\nname = "M"\nparams_b = 1\nactive_params_b = 1\nlayers = 2\n'
                "hidden = 8\n"
                "heads = 3\nkv_heads = 2\nhead_dim = 4\nintermediate = 8\nvocab = 8\n"
                "max_context = 8\n"
            ),
            r"bad\.toml: models\[0\] \(M\): kv_heads: must divide heads",
        ),
        (
            (
                '[[instances]]\ncloud = "aws"\nname = "t"\ngpu = "L4"\ngpus_per_instance = 1\n'
                'regions = ["r"]\non_demand_usd_per_h = 1\ncolour = "red"\n'
            ),
            r"bad\.toml: instances\[0\] \(aws/t\): unknown field\(s\) \['colour'\]",
        ),
        (
            (
                '[[instances]]\ncloud = "aws"\nname = "t"\ngpu = "L4"\ngpus_per_instance = 1\n'
                'regions = ["r"]\n'
            ),
            r"bad\.toml: instances\[0\] \(aws/t\): .*at least one of",
        ),
        ("[[gpus]]\nname = 'X'\n[[gpu]]\nname = 'Y'\n", r"bad\.toml: unknown table\(s\) \['gpu'\]"),
        ("gpus = 3\n", r"bad\.toml: gpus: must be an array of tables"),
        ("gpus = [1]\n", r"bad\.toml: gpus\[0\]: must be a table"),
        ("[[gpus]\n", r"bad\.toml: not valid TOML"),
        (
            '[[models]]\nname = "M"\nsource = 3\n',
            r"bad\.toml: models\[0\] \(M\): source: must be a string",
        ),
    ],
)
def test_malformed_entry_names_file_and_entry(tmp_path: Path, text: str, match: str) -> None:
    path = _write(tmp_path, text, "bad.toml")
    with pytest.raises(InvalidInput, match=match):
        load_catalog(path)
    # InvalidInput is also a ValueError, so generic handlers still catch it
    with pytest.raises(ValueError, match=r"bad\.toml"):
        load_catalog().with_file(path)


def test_duplicate_entries_in_one_file() -> None:
    one = USER.split("[[instances]]")[0]
    with pytest.raises(InvalidInput, match=r"u\.toml: gpus\[1\] \(X1\): duplicate of gpus\[0\]"):
        parse_catalog_text(one + one, where="u.toml")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"nope\.toml: cannot read catalog file"):
        read_catalog_file(tmp_path / "nope.toml")


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin.toml"
    path.write_bytes(b"# caf\xe9\n")
    with pytest.raises(InvalidInput, match=r"latin\.toml: not UTF-8"):
        read_catalog_file(path)


def test_empty_file_changes_nothing(tmp_path: Path) -> None:
    path = _write(tmp_path, "# nothing here\n")
    assert load_catalog(path) == load_catalog()


def test_override_that_breaks_builtin_instances_names_the_file(tmp_path: Path) -> None:
    text = USER.split("[[instances]]")[0].replace('name = "X1"', 'name = "L4"')
    path = _write(tmp_path, text.replace("gpus_per_node = 4", "gpus_per_node = 2"), "small.toml")
    with pytest.raises(InvalidInput, match=r"small\.toml: instances\[\d+\] \(aws/g6\.12xlarge\)"):
        load_catalog(path)

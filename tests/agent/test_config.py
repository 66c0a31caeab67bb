"""``koi.toml``: every mistake is refused with the file and the key it is in."""

from __future__ import annotations

from pathlib import Path

import pytest

from koi.agent import SimulatedFleet, load_config, load_plugin
from koi.cli import main
from koi.errors import InvalidInput

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sim-agent.toml"


def test_the_example_config_loads() -> None:
    cfg = load_config(EXAMPLE)
    assert cfg.tick_s == 2.0
    assert cfg.port == 9464
    assert cfg.host == "127.0.0.1"
    assert cfg.koi.selector.time_limit_s == 1.0
    (spec,) = cfg.plugins
    assert spec.use == "koi.agent:SimulatedFleet"
    assert dict(spec.options) == {
        "scenario": "smoke",
        "seed": 0,
        "state": ".cache/sim-agent/fleet.pkl",
    }


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[agent\ntick_s = 1", "not valid TOML"),
        ("[agent]\ntick_s = -1\n[[plugins]]\nuse='x:y'", "agent.tick_s: must be >= 0"),
        ("[agent]\ntick_s = 0\n[[plugins]]\nuse='x:y'", "agent.tick_s: must be > 0"),
        ("[agent]\ntick_s = 'fast'\n[[plugins]]\nuse='x:y'", "agent.tick_s: must be a number"),
        ("[agent]\nport = 70000\n[[plugins]]\nuse='x:y'", "agent.port: must be <= 65535"),
        ("[agent]\ntick = 1\n[[plugins]]\nuse='x:y'", "agent.tick: unknown setting"),
        (
            "[agent]\ndry_run = 'yes'\n[[plugins]]\nuse='x:y'",
            "agent.dry_run: must be true or false",
        ),
        ("[agent]\ntick_s = 1", "plugins: no plugin is named"),
        ("[[plugins]]\nscenario = 'smoke'", "plugins[0].use: must name a plugin"),
        (
            "[[plugins]]\nuse='x:y'\n[koi.planer]\ntau = 0.2",
            "koi.planer.tau: knob 'planer.tau': KoiConfig has no field 'planer'",
        ),
        ("[[plugins]]\nuse='x:y'\n[koi.planner]\ntua = 0.2", "koi.planner.tua: knob 'planner.tua'"),
        ("[[plugins]]\nuse='x:y'\n[koi.planner]\ntau = 2.0", "koi.planner.tau: knob 'planner.tau'"),
        ("[[plugins]]\nuse='x:y'\n[fleet]\nx = 1", "fleet: unknown table"),
    ],
)
def test_malformed_config_names_file_and_key(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "koi.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidInput) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert needle in message, message


@pytest.mark.parametrize(
    ("plugin", "needle"),
    [
        ("use = 'koi_nowhere:Fleet'", "plugins[0].use: cannot import 'koi_nowhere'"),
        ("use = ':Fleet'", "plugins[0].use: cannot import ''"),
        ("use = 'koi.agent:Nothing'", "plugins[0].use: 'koi.agent' has no attribute 'Nothing'"),
        ("use = 'no-such-entry-point'", "plugins[0].use: no entry point 'no-such-entry-point'"),
        (
            "use = 'koi.agent:SimulatedFleet'\nscenaro = 'smoke'",
            "plugins[0].scenaro: unknown option",
        ),
        (
            "use = 'koi.agent:SimulatedFleet'\nseed = -1",
            "plugins[0]: koi.agent:SimulatedFleet: seed",
        ),
        (
            "use = 'koi.agent:SimulatedFleet'\nscenario = 'mars'",
            "plugins[0]: koi.agent:SimulatedFleet",
        ),
        (
            "use = 'koi.integrations.prometheus:PrometheusTelemetry'\nurl = 'localhost:9090'",
            "plugins[0]: koi.integrations.prometheus:PrometheusTelemetry: url",
        ),
        ("use = 'koi.testing.fakes:'\nx = 1", "plugins[0].x: koi.testing.fakes: takes no options"),
    ],
)
def test_plugins_that_cannot_be_built_name_the_table(
    tmp_path: Path, plugin: str, needle: str
) -> None:
    path = tmp_path / "koi.toml"
    path.write_text(f"[[plugins]]\n{plugin}\n", encoding="utf-8")
    cfg = load_config(path)
    with pytest.raises(InvalidInput) as info:
        load_plugin(cfg.plugins[0], source=cfg.source)
    assert needle in str(info.value)
    assert str(info.value).startswith(str(path))


def test_a_plugin_is_built_with_its_options(tmp_path: Path) -> None:
    path = tmp_path / "koi.toml"
    path.write_text("[[plugins]]\nuse = 'koi.agent:SimulatedFleet'\nseed = 3\n", encoding="utf-8")
    cfg = load_config(path)
    fleet = load_plugin(cfg.plugins[0], source=cfg.source)
    assert isinstance(fleet, SimulatedFleet)
    assert fleet.seed == 3


def test_cli_reports_a_config_error_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "koi.toml"
    path.write_text("[agent]\nport = 'http'\n", encoding="utf-8")
    assert main(["agent", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"koi: error: {path}: agent.port: must be an integer" in err


def test_cli_reports_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "--config", str(tmp_path / "nope.toml")]) == 2
    assert "nope.toml: cannot read" in capsys.readouterr().err


def test_a_plugin_named_by_its_entry_point_is_built_with_its_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An installed distribution advertising a `koi` entry point, as a team's plugin package would.
    (tmp_path / "koi_ep_fixture.py").write_text(
        "class Fleet:\n"
        "    koi_plugin_name = 'ep-fleet'\n\n"
        "    def __init__(self, cluster: str = 'dev') -> None:\n"
        "        self.cluster = cluster\n",
        encoding="utf-8",
    )
    info = tmp_path / "koi_ep_fixture-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: koi-ep-fixture\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[koi]\nep-fleet = koi_ep_fixture:Fleet\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "koi.toml"
    path.write_text("[[plugins]]\nuse = 'ep-fleet'\ncluster = 'prod-east'\n", encoding="utf-8")
    cfg = load_config(path)
    plugin = load_plugin(cfg.plugins[0], source=cfg.source)
    assert type(plugin).__name__ == "Fleet"
    assert plugin.cluster == "prod-east"  # type: ignore[attr-defined]
    bad = tmp_path / "bad.toml"
    bad.write_text("[[plugins]]\nuse = 'ep-fleet'\nregion = 'x'\n", encoding="utf-8")
    cfg = load_config(bad)
    with pytest.raises(InvalidInput, match=r"plugins\[0\]\.region: unknown option for ep-fleet"):
        load_plugin(cfg.plugins[0], source=cfg.source)

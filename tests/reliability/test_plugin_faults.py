"""Issue items 9 and 10: what a failing plugin raises is pinned on it and never escapes
``tick()``; error strings carry no secrets."""

from __future__ import annotations

import pytest

from koi.errors import PluginError
from koi.planner import Planner
from koi.plugins import PluginHost, hookimpl, make_plugin_manager
from koi.plugins._redact import REDACTED, redact
from koi.testing.fakes import example_snapshot
from koi.types import ClusterSnapshot, Job, Ladder
from tests.planner._world import CATALOG, chat_job, pools


class _Exits:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.koi_plugin_name = f"exits-{type(exc).__name__}"

    @hookimpl
    def koi_propose_ladders(self, job: Job, context: object) -> list[Ladder]:
        raise self.exc

    @hookimpl
    def koi_collect_telemetry(self, ranks: object, window: object) -> list[object]:
        raise self.exc


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt()])
def test_system_exit_and_keyboard_interrupt_from_a_plugin_stay_inside_the_tick(
    exc: BaseException,
) -> None:
    planner = Planner(catalog=CATALOG, plugins=[_Exits(exc)])
    snap = ClusterSnapshot(0.0, [chat_job()], pools())
    result = planner.tick(snap)  # does not raise
    assert not result.fallback
    assert any(f"raised {type(exc).__name__}" in e for e in result.errors)
    assert result.plan.action("chat").kind.value == "place"  # the built-in proposer still ran


def test_a_snapshot_plugin_that_exits_is_a_plugin_error() -> None:
    class Quits:
        koi_plugin_name = "quits"

        @hookimpl
        def koi_snapshot(self, now: float) -> ClusterSnapshot:
            raise SystemExit(1)

    host = PluginHost(make_plugin_manager(plugins=[Quits()], entry_points=False))
    with pytest.raises(PluginError, match="plugin 'quits': koi_snapshot raised SystemExit"):
        host.snapshot(0.0)


def test_plugin_error_strings_are_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MYCLOUD_TOKEN", "tok-0123456789abcdef")

    class Leaky:
        koi_plugin_name = "leaky"

        @hookimpl
        def koi_snapshot(self, now: float) -> ClusterSnapshot:
            raise RuntimeError("auth failed for tok-0123456789abcdef; api_key=hunter2hunter2")

    host = PluginHost(make_plugin_manager(plugins=[Leaky()], entry_points=False))
    with pytest.raises(PluginError) as info:
        host.snapshot(0.0)
    text = str(info.value)
    assert "auth failed" in text
    assert "tok-0123456789abcdef" not in text
    assert "hunter2hunter2" not in text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer abcdef123456", "abcdef123456"),
        ('{"error": "bad key sk-proj-AAAABBBBCCCCDDDD"}', "sk-proj-AAAABBBBCCCCDDDD"),
        ('{"api_key": "s3cr3t-value"}', "s3cr3t-value"),
        ("password=correcthorse", "correcthorse"),
        ("token: ghp_abcdefghijklmnop", "ghp_abcdefghijklmnop"),
    ],
)
def test_redact_removes_credentials(text: str, secret: str) -> None:
    out = redact(text, environ={})
    assert secret not in out
    assert REDACTED in out


def test_redact_keeps_ordinary_text() -> None:
    text = "max_batched_tokens=8192; tp=2 exceeds 1 GPUs per node; p99_ttft_ms: 1500"
    assert redact(text, environ={}) == text
    assert redact("key abcdefgh12 leaked", ["abcdefgh12"], environ={}) == f"key {REDACTED} leaked"
    assert redact("x", environ={"API_KEY": "short"}) == "x"  # short values are not secrets


def test_fake_fleet_snapshot_still_plans() -> None:  # guards the fixtures used above
    assert example_snapshot().jobs

"""The agent loop in-process: ticks over the simulated fleet, its endpoints, and every way a
tick can go wrong (each a clear message, a safe tick, nothing lost from the checkpoint)."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from koi.agent import Agent, AgentConfig, JsonLog, PluginSpec, SimulatedFleet
from koi.errors import KoiError, KoiWarning
from koi.integrations.prometheus import PrometheusTelemetry
from koi.plugins import hookimpl
from koi.types import Mediator, Rank, to_data


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


pytestmark = pytest.mark.slow


def _config(tmp_path: Path, **kw: Any) -> AgentConfig:
    kw.setdefault("tick_s", 0.01)
    kw.setdefault("port", 0)
    kw.setdefault("state", tmp_path / "koi-state.json")
    return AgentConfig(plugins=(PluginSpec("koi.agent:SimulatedFleet"),), **kw)


class Flaky:
    """Answers ``koi_snapshot`` before the fleet does, and raises while ``broken``."""

    koi_plugin_name = "flaky"

    def __init__(self) -> None:
        self.broken = False

    @hookimpl(tryfirst=True)
    def koi_snapshot(self, now: float) -> None:
        if self.broken:
            raise ConnectionError("inventory service down")


class NanTelemetry:
    """Reports a bad outcome value (NaN, negative) for every rank it is asked about."""

    koi_plugin_name = "nan-telemetry"

    def __init__(self, variable: str, value: float) -> None:
        self.variable, self.value = variable, value

    @hookimpl
    def koi_collect_telemetry(
        self, ranks: list[tuple[str, Rank]], window: tuple[float, float]
    ) -> list[dict[str, Any]]:
        out = []
        for job_id, rank in ranks:
            out.append(
                {
                    "job_id": job_id,
                    "chain": to_data(rank.chain),
                    "start_s": window[0],
                    "end_s": window[1],
                    "requests": 10,
                    "completed": 10,
                    "replicas_up": rank.replicas,
                    "outcomes": {
                        "cost_per_mtok_usd": 1.0,
                        "p99_ttft_ms": 100.0,
                        "p99_tpot_ms": 20.0,
                        "throughput_tok_s": 10.0,
                        "slo_margin": 0.0,
                        self.variable: self.value,
                    },
                    "mediators": dict.fromkeys(_MEDIATORS, 0.0),
                }
            )
        return out


_MEDIATORS = [m.value for m in Mediator]


@pytest.fixture
def log() -> JsonLog:
    return JsonLog(io.StringIO())


def _events(log: JsonLog) -> list[dict[str, Any]]:
    stream = log.stream
    assert isinstance(stream, io.StringIO)
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def served(tmp_path: Path, log: JsonLog) -> Iterator[tuple[Agent, int, SimulatedFleet]]:
    fleet = SimulatedFleet("smoke", state=str(tmp_path / "fleet.pkl"))
    agent = Agent(_config(tmp_path), plugins=[fleet], log=log)
    port = agent.serve()
    yield agent, port, fleet
    assert agent.server is not None
    agent.server.stop()


def test_ticks_plan_launch_checkpoint_and_serve_their_metrics(
    served: tuple[Agent, int, SimulatedFleet], tmp_path: Path
) -> None:
    agent, port, fleet = served
    for _ in range(3):
        record = agent.tick_once()
        assert record["outcome"] == "ok", record["errors"]
    assert fleet.world.snapshot().active, "the plans were launched on the fleet"
    checkpoint = json.loads((tmp_path / "koi-state.json").read_text())
    assert checkpoint["state"]["tick"] == 3
    code, text = _get(port, "/metrics")
    assert code == 200
    assert 'koi_agent_ticks_total{outcome="ok"} 3.0' in text
    assert "koi_agent_plans_total 3.0" in text
    assert 'koi_agent_actions_total{kind="place"}' in text
    assert 'koi_agent_tick_duration_seconds_count{stage="S6_select"} 3.0' in text
    assert 'koi_agent_tick_duration_seconds_count{stage="total"} 3.0' in text
    for name in ("koi_agent_epsilon", "koi_agent_coverage", "koi_agent_jobs_at_risk"):
        assert f"\n{name} " in text
    assert "koi_agent_fallbacks_total 0.0" in text
    code, text = _get(port, "/healthz")
    assert code == 200
    assert json.loads(text)["status"] == "ok"
    code, text = _get(port, "/status")
    status = json.loads(text)
    assert status["tick"] == 3
    actions = status["last_tick"]["plan"]["actions"]
    assert {a["job_id"] for a in actions} >= {"chat-8b"}
    assert all(a["reason"] for a in actions)
    assert _get(port, "/nope")[0] == 404


def test_dry_run_plans_and_logs_but_launches_nothing(tmp_path: Path, log: JsonLog) -> None:
    fleet = SimulatedFleet("smoke")
    agent = Agent(_config(tmp_path, dry_run=True), plugins=[fleet], log=log)
    for _ in range(2):
        record = agent.tick_once()
        assert record["outcome"] == "ok"
        assert record["launched"] is False
    assert not fleet.world.snapshot().active  # nothing was launched
    advice = [e for e in _events(log) if e["event"] == "advice"]
    assert any(a["action"] == "place" and a["reason"] for a in advice)
    assert agent.planner.state.tick == 2  # the planner still learns and checkpoints


def test_a_failing_snapshot_skips_the_tick_and_keeps_the_checkpoint(
    tmp_path: Path, log: JsonLog
) -> None:
    flaky = Flaky()
    agent = Agent(_config(tmp_path), plugins=[SimulatedFleet("smoke"), flaky], log=log)
    assert agent.tick_once()["outcome"] == "ok"
    checkpoint = (tmp_path / "koi-state.json").read_bytes()
    flaky.broken = True
    record = agent.tick_once()
    assert record["outcome"] == "skipped"
    assert "flaky" in record["errors"][0]
    assert "inventory service down" in record["errors"][0]
    assert (tmp_path / "koi-state.json").read_bytes() == checkpoint
    skipped = [e for e in _events(log) if e["event"] == "tick_skipped"]
    assert skipped[0]["level"] == "error"
    assert "checkpoint is unchanged" in skipped[0]["note"]
    flaky.broken = False
    assert agent.tick_once()["outcome"] == "ok"
    assert agent.planner.state.tick == 2


def test_a_failing_stage_commits_the_safe_fallback_and_counts_it(
    tmp_path: Path, log: JsonLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = SimulatedFleet("smoke")
    agent = Agent(_config(tmp_path), plugins=[fleet], log=log)
    port = agent.serve()
    try:
        assert agent.tick_once()["outcome"] == "ok"
        evidence = agent.planner.state.evidence

        def explode(*_a: object, **_k: object) -> None:
            raise KoiError("solver exploded")

        monkeypatch.setattr("koi.planner._stages.select", explode)
        record = agent.tick_once()
        assert record["outcome"] == "fallback"
        assert record["launched"] is False
        assert any("solver exploded" in e for e in record["errors"])
        assert {a["action"] for a in record["plan"]["actions"]} <= {"keep", "defer", "stop"}
        assert agent.planner.state.evidence == evidence  # nothing learned from a failed tick
        text = _get(port, "/metrics")[1]
        assert "koi_agent_fallbacks_total 1.0" in text
        assert 'koi_agent_ticks_total{outcome="fallback"} 1.0' in text
        ticks = [e for e in _events(log) if e["event"] == "tick"]
        assert ticks[-1]["level"] == "warning"
        assert ticks[-1]["outcome"] == "fallback"
    finally:
        assert agent.server is not None
        agent.server.stop()


def test_healthz_turns_503_once_ticks_stop_finishing(tmp_path: Path, log: JsonLog) -> None:
    now = [1_000.0]
    agent = Agent(
        _config(tmp_path, tick_s=10.0),
        plugins=[SimulatedFleet("smoke")],
        log=log,
        clock=lambda: now[0],
    )
    port = agent.serve()
    try:
        agent.tick_once()
        code, text = _get(port, "/healthz")
        assert (code, json.loads(text)["status"]) == (200, "ok")
        now[0] += 10.0  # the next tick is due: not overdue yet
        assert _get(port, "/healthz")[0] == 200
        now[0] += 3600.0  # no tick finished for an hour
        code, text = _get(port, "/healthz")
        assert (code, json.loads(text)["status"]) == (503, "stale")
        assert json.loads(text)["last_outcome"] == "ok"
        agent.tick_once()
        assert _get(port, "/healthz")[0] == 200
    finally:
        assert agent.server is not None
        agent.server.stop()


def test_unreachable_prometheus_is_reported_and_the_tick_goes_on(
    tmp_path: Path, log: JsonLog
) -> None:
    source = PrometheusTelemetry(f"http://127.0.0.1:{free_port()}", timeout_s=1.0)
    agent = Agent(_config(tmp_path), plugins=[SimulatedFleet("smoke"), source], log=log)
    agent.tick_once()
    record = agent.tick_once()  # ranks are deployed now: telemetry is asked for
    assert record["outcome"] == "ok"
    assert any("koi.prometheus" in e and "unreachable" in e for e in record["errors"])
    assert agent.planner.state.tick == 2
    assert json.loads((tmp_path / "koi-state.json").read_text())["state"]["tick"] == 2


def test_a_prometheus_that_never_answers_times_out_and_the_tick_goes_on(
    tmp_path: Path, log: JsonLog
) -> None:
    # A listening socket nobody accepts from: connections open, queries get no answer.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        source = PrometheusTelemetry(url, timeout_s=0.2, budget_s=1.0)
        agent = Agent(_config(tmp_path), plugins=[SimulatedFleet("smoke"), source], log=log)
        assert agent.tick_once()["outcome"] == "ok"
        record = agent.tick_once()  # ranks are deployed now: every query times out
    assert record["outcome"] == "ok"
    (error,) = [e for e in record["errors"] if "koi.prometheus" in e]
    assert "timed out" in error
    saved = json.loads((tmp_path / "koi-state.json").read_text())["state"]
    assert saved["tick"] == 2
    # The checkpoint holds exactly what an agent without the silent source learned.
    control = Agent(_config(tmp_path / "control"), plugins=[SimulatedFleet("smoke")], log=log)
    for _ in range(2):
        assert control.tick_once()["errors"] == []
    assert agent.planner.state.to_data() == control.planner.state.to_data()


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [("p99_ttft_ms", float("nan"), "not NaN"), ("p99_tpot_ms", -5.0, ">= 0")],
)
def test_nan_and_negative_telemetry_is_skipped_with_a_message(
    tmp_path: Path, log: JsonLog, variable: str, value: float, needle: str
) -> None:
    bad = NanTelemetry(variable, value)
    agent = Agent(_config(tmp_path), plugins=[SimulatedFleet("smoke"), bad], log=log)
    agent.tick_once()
    with pytest.warns(KoiWarning, match=variable):
        record = agent.tick_once()
    assert record["outcome"] == "ok"  # the fleet's own telemetry still counts
    skipped = [e for e in record["errors"] if "nan-telemetry" in e]
    assert skipped
    assert all(variable in e and needle in e for e in skipped), skipped
    assert json.loads((tmp_path / "koi-state.json").read_text())["state"]["tick"] == 2
    # The bad values reached nothing: the state is what the fleet's telemetry alone gives.
    control = Agent(_config(tmp_path / "control"), plugins=[SimulatedFleet("smoke")], log=log)
    for _ in range(2):
        control.tick_once()
    assert agent.planner.state.to_data() == control.planner.state.to_data()


def test_a_restarted_agent_resumes_from_the_checkpoint(tmp_path: Path, log: JsonLog) -> None:
    state = str(tmp_path / "fleet.pkl")
    first = Agent(_config(tmp_path), plugins=[SimulatedFleet("smoke", state=state)], log=log)
    for _ in range(2):  # the fleet saves its world after each launch, batch job included
        assert first.tick_once()["errors"] == []
    evidence = first.planner.state.to_data()
    first.planner.close()  # the old process is gone: its lock on the state file with it
    fleet = SimulatedFleet("smoke", state=state)
    assert fleet.index == 1  # the fleet, too, is where the agent left it
    second = Agent(_config(tmp_path), plugins=[fleet], log=log)
    assert second.resumed_from == 2
    assert second.planner.state.to_data() == evidence
    second.tick_once()
    assert second.planner.state.tick == 3
    assert second.status()["resumed_from_tick"] == 2


class Interrupter:
    """In its second snapshot, SIGINT then SIGTERM: the operator stops the agent, then insists."""

    koi_plugin_name = "interrupter"

    def __init__(self, log: JsonLog) -> None:
        self.log, self.calls = log, 0

    @hookimpl(tryfirst=True)
    def koi_snapshot(self, now: float) -> None:
        self.calls += 1
        if self.calls != 2:
            return
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and not any(
            e["event"] == "stopping" for e in _events(self.log)
        ):
            time.sleep(0.01)  # the first signal is handled before the second is sent
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5.0)  # the second signal abandons the tick long before this ends


def test_a_second_signal_abandons_the_tick_and_the_checkpoint_stays_the_last_completed(
    tmp_path: Path, log: JsonLog
) -> None:
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    agent = Agent(_config(tmp_path), plugins=[SimulatedFleet("smoke"), Interrupter(log)], log=log)
    try:
        agent.install_signal_handlers()
        assert agent.run() == 0
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    events = _events(log)
    names = [e["event"] for e in events]
    assert names.count("tick") == 1
    stopping = next(e for e in events if e["event"] == "stopping")
    assert (stopping["signal"], stopping["when"]) == ("SIGINT", "after the current tick")
    abandoning = next(e for e in events if e["event"] == "abandoning")
    assert abandoning["signal"] == "SIGTERM"
    assert names.index("abandoning") < names.index("tick_abandoned") < names.index("stopped")
    assert events[-1]["tick"] == 1
    checkpoint = json.loads((tmp_path / "koi-state.json").read_text())
    assert checkpoint["state"]["tick"] == 1  # the abandoned tick left no trace on disk


def test_the_agent_keeps_every_job_within_its_precisions(tmp_path: Path, log: JsonLog) -> None:
    # The smoke scenario with each job narrowed to one precision the planner would not pick
    # first: whatever the agent launches on its fleet stays inside each job's set.
    import importlib.resources
    import re

    narrowed = {"chat-8b": "bf16", "mod-1b": "int4", "agent-30b": "fp8", "batch-qwen8b": "bf16"}
    text = (importlib.resources.files("koi.sim") / "scenarios" / "smoke.toml").read_text()
    for job_id, quant in narrowed.items():
        pattern = rf'(id = "{job_id}"[^\[]*?\n)precisions = [^\n]*'
        text, n = re.subn(pattern, rf'\1precisions = ["{quant}"]', text, count=1)
        assert n == 1, job_id
    scenario = tmp_path / "narrowed.toml"
    scenario.write_text(text, encoding="utf-8")
    fleet = SimulatedFleet(str(scenario))
    agent = Agent(_config(tmp_path), plugins=[fleet], log=log)
    for _ in range(3):
        record = agent.tick_once()
        assert record["outcome"] == "ok", record["errors"]
    snap = fleet.world.snapshot()
    assert {j.id: [q.value for q in j.precisions] for j in snap.jobs} == {
        k: [v] for k, v in narrowed.items() if k in {j.id for j in snap.jobs}
    }
    assert snap.active
    for dep in snap.active:
        assert snap.job(dep.job_id).precision_problem(dep.ladder) is None


@pytest.mark.parametrize("host", ["no-such-host.invalid", "127.0.0.1"])
def test_an_address_the_agent_cannot_listen_on_names_the_config(
    tmp_path: Path, log: JsonLog, host: str
) -> None:
    with socket.socket() as taken:  # 127.0.0.1: the port is already in use
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        cfg = attrs.evolve(_config(tmp_path, host=host, port=port), source="koi.toml")
        agent = Agent(cfg, plugins=[SimulatedFleet("smoke")], log=log)
        with pytest.raises(
            KoiError,
            match=rf"^koi\.toml: agent\.host, agent\.port: cannot listen on {host}:{port}: ",
        ):
            agent.serve()

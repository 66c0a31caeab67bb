"""``koi agent`` end to end: a subprocess drives the simulated fleet, its ``/metrics`` is
scraped over real HTTP, SIGTERM stops it mid-run, and a restart resumes from the checkpoint."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

# A safety net against a hung agent, not a speed check: a busy shared 2-core machine has taken
# more than 120 s for the two runs of a few ticks each.
TIMEOUT_S = 300.0


class AgentProcess:
    """``python -m koi.cli agent`` with its JSON log lines collected as they come."""

    def __init__(self, config: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "koi.cli", "agent", "--config", str(config), *args],
            cwd=config.parent,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.raw.append(line)
            self.events.append(json.loads(line))  # every line is one JSON object

    def wait_event(self, name: str, deadline: float) -> dict[str, Any]:
        while time.monotonic() < deadline:
            for e in self.events:
                if e["event"] == name:
                    return e
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no {name!r} event; log so far:\n{''.join(self.raw)}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.status == 200
        return r.read().decode()


def _ok_ticks(text: str) -> float:
    m = re.search(r'^koi_agent_ticks_total\{outcome="ok"\} (\S+)$', text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def _checkpoint_tick(path: Path) -> int:
    tick: int = json.loads(path.read_text())["state"]["tick"]
    return tick


def test_agent_runs_is_scraped_stops_on_sigterm_and_resumes(tmp_path: Path) -> None:
    config = tmp_path / "koi.toml"
    config.write_text(
        "[agent]\ntick_s = 0.2\nstate = 'state/koi.json'\nport = 0\n"
        "[koi.selector]\ntime_limit_s = 0.5\n"
        "[[plugins]]\nuse = 'koi.agent:SimulatedFleet'\nscenario = 'smoke'\n"
        "state = 'state/fleet.pkl'\n",
        encoding="utf-8",
    )
    checkpoint = tmp_path / "state" / "koi.json"
    deadline = time.monotonic() + TIMEOUT_S
    first = AgentProcess(config)
    try:
        started = first.wait_event("started", deadline)
        port = started["port"]
        assert started["resumed_from_tick"] is None
        text = ""
        while time.monotonic() < deadline and _ok_ticks(text) < 3:
            text = _scrape(port)
            time.sleep(0.2)
        assert _ok_ticks(text) >= 3, text
        assert 'koi_agent_tick_duration_seconds_count{stage="total"}' in text
        assert 'koi_agent_actions_total{kind="place"}' in text
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert json.loads(r.read())["status"] == "ok"
        first.proc.send_signal(signal.SIGTERM)  # mid-run: a tick is likely under way
        assert first.proc.wait(timeout=max(1.0, deadline - time.monotonic())) == 0
    finally:
        first.stop()
    stopping = next(e for e in first.events if e["event"] == "stopping")
    assert stopping["signal"] == "SIGTERM"
    stopped = first.events[-1]
    assert stopped["event"] == "stopped"
    ticks = [e["tick"] for e in first.events if e["event"] == "tick"]
    assert ticks == list(range(1, len(ticks) + 1))
    assert [e["errors"] for e in first.events if e["event"] == "tick"] == [[]] * len(ticks)
    assert stopped["tick"] == ticks[-1] == _checkpoint_tick(checkpoint)  # nothing lost

    second = AgentProcess(config, "--max-ticks", "2")
    try:
        resumed = second.wait_event("started", deadline)
        assert resumed["resumed_from_tick"] == ticks[-1]
        assert second.proc.wait(timeout=max(1.0, deadline - time.monotonic())) == 0
    finally:
        second.stop()
    more = [e["tick"] for e in second.events if e["event"] == "tick"]
    assert more == [ticks[-1] + 1, ticks[-1] + 2]
    assert _checkpoint_tick(checkpoint) == ticks[-1] + 2


def test_dry_run_flag_and_a_bad_config_from_the_command_line(tmp_path: Path) -> None:
    config = tmp_path / "koi.toml"
    config.write_text("[agent]\ntick_s = 'soon'\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "koi.cli", "agent", "--config", str(config), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert done.returncode == 2
    assert f"{config}: agent.tick_s: must be a number" in done.stderr

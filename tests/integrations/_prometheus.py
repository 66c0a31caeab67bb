"""A real Prometheus for the tests: Debian's package unpacked into .cache/, never installed.

:func:`prometheus_binary` finds the server (``KOI_PROMETHEUS``, the repo's ``.cache/``, or
``prometheus`` on PATH) and otherwise unpacks it with ``fetch_prometheus.sh`` (``apt-get
download`` + ``dpkg -x``).  Where that is impossible the tests skip with the reason, unless
``KOI_REQUIRE_PROMETHEUS=1`` (set by ``.ci/run``): then they fail, so CI cannot pass by skipping.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "prometheus"
_fetch_failed: list[str] = []


def _unavailable(reason: str) -> None:
    if os.environ.get("KOI_REQUIRE_PROMETHEUS") == "1":
        pytest.fail(f"a real Prometheus is required here (KOI_REQUIRE_PROMETHEUS=1): {reason}")
    pytest.skip(f"no Prometheus server: {reason}")


def prometheus_binary() -> Path:
    """The ``prometheus`` executable, fetched once if needed; skips (or fails) without it."""
    explicit = os.environ.get("KOI_PROMETHEUS")
    if explicit:
        if not os.access(explicit, os.X_OK):
            _unavailable(f"KOI_PROMETHEUS={explicit} is not executable")
        return Path(explicit)
    cached = CACHE / "usr" / "bin" / "prometheus"
    if os.access(cached, os.X_OK):
        return cached
    on_path = shutil.which("prometheus")
    if on_path:
        return Path(on_path)
    if not _fetch_failed:
        script = Path(__file__).with_name("fetch_prometheus.sh")
        done = subprocess.run(
            ["sh", str(script), str(CACHE)], capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0 or not os.access(cached, os.X_OK):
            _fetch_failed.append(done.stderr.strip() or f"exit {done.returncode}")
    if _fetch_failed:
        _unavailable(
            "Debian's prometheus package could not be obtained with apt-get download "
            f"({_fetch_failed[0]}); run `make prometheus` or set KOI_PROMETHEUS"
        )
    return cached


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusServer:
    """A Prometheus on 127.0.0.1 with a temporary data directory, scraping ``targets``."""

    def __init__(self, binary: Path, workdir: Path, targets: list[dict[str, Any]]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "engines",
                    "scrape_interval": "1s",
                    "scrape_timeout": "900ms",
                    "static_configs": targets,
                }
            ],
        }
        path = workdir / "prometheus.yml"
        path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
        self.log = (workdir / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [
                str(binary),
                f"--config.file={path}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready(timeout=30.0)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r,
            ):
                if r.status == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError("prometheus did not become ready in time")

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=5) as r:
            data = json.loads(r.read())
        result: list[dict[str, Any]] = data["data"]["result"]
        return result

    def wait_for(self, promql: str, predicate: Any, timeout: float = 20.0) -> None:
        """Poll until ``predicate(result)`` holds (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.query(promql)):
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {promql!r}: {self.query(promql)}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()


@contextlib.contextmanager
def running_prometheus(workdir: Path, targets: list[dict[str, Any]]) -> Iterator[PrometheusServer]:
    server = PrometheusServer(prometheus_binary(), workdir, targets)
    try:
        yield server
    finally:
        server.stop()

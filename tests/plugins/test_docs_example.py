"""docs/plugins.md's worked example runs, and its contract subclasses pass."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def _run_docs() -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    namespace: dict[str, Any] = {"__name__": "koi_docs_plugins_example"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    return namespace


NS = _run_docs()

# Collected by pytest like any test class: the documentation's own contract tests.
TestAcmeTelemetry = NS["TestAcmeTelemetry"]
TestAcmeLauncher = NS["TestAcmeLauncher"]


def test_example_defines_a_working_plugin() -> None:
    assert NS["launched"].errors == ()
    assert NS["batch"].skipped == ()
    assert NS["llm"].endpoint == "http://127.0.0.1:8000/v1/chat/completions"

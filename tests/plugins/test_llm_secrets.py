"""Issue item 9: a server that echoes the API key in its error body does not leak it."""

from __future__ import annotations

import json
import time
from typing import Any

import attrs
import pytest

from koi.plugins import LlmProposer, PluginHost, ProposalContext, make_plugin_manager
from koi.types import Job

KEY = "sk-test-3f9a8b7c6d5e4f3a2b1c"


def test_an_echoed_api_key_is_redacted(
    chat_server: Any, chat_job: Job, context: ProposalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KOI_TEST_KEY", KEY)

    def echo(request: Any) -> tuple[int, bytes, float]:
        body = {"error": f"invalid api key {KEY} (header Authorization: Bearer {KEY})"}
        return 401, json.dumps(body).encode(), 0.0

    chat_server.reply = echo
    proposer = LlmProposer(chat_server.base_url, "m", api_key_env="KOI_TEST_KEY")
    host = PluginHost(make_plugin_manager(plugins=[proposer], entry_points=False))
    fresh = attrs.evolve(context, deadline_s=time.monotonic() + 30)
    batch = host.propose_ladders(chat_job, fresh)
    text = " ".join(str(e) for e in batch.errors)
    assert "HTTP 401" in text  # the error is reported ...
    assert "[redacted]" in text
    assert KEY not in text  # ... without the key
    assert chat_server.headers[-1]["Authorization"] == f"Bearer {KEY}"  # it was sent

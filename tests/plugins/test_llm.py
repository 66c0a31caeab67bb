"""The OpenAI-compatible proposer against a local fake chat server."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import attrs
import pytest

from koi.errors import InvalidInput, KoiError, PluginError
from koi.plugins import (
    LlmConfig,
    LlmProposer,
    PluginHost,
    ProposalContext,
    Rejection,
    make_plugin_manager,
)
from koi.testing.contracts import ProposerContract
from koi.types import ClusterSnapshot, Job, Ladder, Quant

H100 = "aws/us-east-1/on_demand/p5.48xlarge"
L4 = "aws/us-east-1/spot/g6.12xlarge"


def _rank(pool: str, gpu: str, *, tp: int = 1, replicas: int = 1, **extra: Any) -> dict[str, Any]:
    config = {"tp": tp, "pp": 1, "quant": "bf16", "max_batch_size": 128, "max_batched_tokens": 8192}
    return {
        "pool": pool,
        "gpu": gpu,
        "model": "Llama-3.1-8B",
        "replicas": replicas,
        "config": config,
        **extra,
    }


VALID = {
    "ladders": [
        {"ranks": [_rank(H100, "H100-SXM")], "rationale": "one H100 meets TTFT"},
        {"ranks": [_rank(L4, "L4", tp=2, replicas=2)], "rationale": "cheap spot L4s"},
    ]
}


def _host(*plugins: object) -> PluginHost:
    return PluginHost(make_plugin_manager(plugins=plugins, entry_points=False))


def _proposer(server: Any, **kwargs: Any) -> LlmProposer:
    return LlmProposer(server.base_url, "test-model", api_key_env="KOI_TEST_KEY", **kwargs)


def _fresh(context: ProposalContext, seconds: float = 30.0) -> ProposalContext:
    return attrs.evolve(context, deadline_s=time.monotonic() + seconds)


def test_valid_reply_becomes_ladders(
    chat_server: Any, chat_job: Job, context: ProposalContext
) -> None:
    chat_server.answer(VALID)
    batch = _host(_proposer(chat_server)).propose_ladders(chat_job, _fresh(context))
    assert not batch.errors
    assert not batch.rejections
    assert len(batch.ladders) == 2
    assert all(s == ("llm",) for s in batch.sources)
    by_gpu = {ladder.ranks[0].chain.environment.gpu: ladder for ladder in batch.ladders}
    assert by_gpu["L4"].ranks[0].replicas == 2
    assert by_gpu["L4"].ranks[0].chain.config.tp == 2
    assert by_gpu["H100-SXM"].ranks[0].chain.config.quant is Quant.BF16


def test_request_carries_the_context(
    chat_server: Any,
    chat_job: Job,
    context: ProposalContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KOI_TEST_KEY", "sk-test")
    chat_server.answer(VALID)
    _host(_proposer(chat_server)).propose_ladders(chat_job, _fresh(context))
    request = chat_server.requests[-1]
    assert request["model"] == "test-model"
    assert request["response_format"] == {"type": "json_object"}
    facts = json.loads(request["messages"][1]["content"])
    assert facts["job"]["id"] == "chat"
    assert facts["budget"]["gpu_types"] == ["L4"]
    assert {e["target"] for e in facts["dag_view"]["edges"]} == {"v:kv_cache_util", "y:p99_ttft_ms"}
    assert [m["statement"] for m in facts["mechanisms"]] == ["kv pressure raises TTFT on L4"]
    assert facts["feedback"] == ["round 0: tp=1 on L4 breached p99 TTFT"]
    assert facts["at_risk"] == ["y:p99_ttft_ms"]
    assert facts["incumbent"] is None
    assert {p["pool"] for p in facts["pools"]} == {p.id for p in context.snapshot.pools}
    # The L4 pool has 16 GPUs, one of which the active chat ladder holds.
    assert {p["pool"]: p["free_gpus"] for p in facts["pools"]}[L4] == 15
    assert '"additionalProperties":false' in request["messages"][0]["content"]
    assert chat_server.headers[-1]["Authorization"] == "Bearer sk-test"


def test_no_key_no_authorization_header(
    chat_server: Any, chat_job: Job, context: ProposalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KOI_TEST_KEY", raising=False)
    chat_server.answer(VALID)
    _host(_proposer(chat_server)).propose_ladders(chat_job, _fresh(context))
    assert "Authorization" not in chat_server.headers[-1]


def test_prompt_is_deterministic(chat_server: Any, chat_job: Job, context: ProposalContext) -> None:
    chat_server.answer(VALID)
    host = _host(_proposer(chat_server))
    host.propose_ladders(chat_job, context)
    host.propose_ladders(chat_job, context)
    assert chat_server.requests[0] == chat_server.requests[1]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("this is not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ({"ladders": VALID["ladders"], "note": "hi"}, "unknown field(s) ['note']"),
        ({"candidates": []}, "unknown field(s) ['candidates']"),
        ({"ladders": {"ranks": []}}, "ladders: required array missing"),
        ({"ladders": [VALID["ladders"][0]] * 40}, "at most 32 ladders"),
    ],
)
def test_unusable_reply_is_a_plugin_error(
    chat_server: Any, chat_job: Job, context: ProposalContext, content: Any, reason: str
) -> None:
    chat_server.answer(content)
    batch = _host(_proposer(chat_server)).propose_ladders(chat_job, _fresh(context))
    assert batch.ladders == ()
    (error,) = batch.errors
    assert error.plugin == "llm"
    assert reason in str(error)


def _ladder_with(mutate: Any) -> dict[str, Any]:
    reply = copy.deepcopy(VALID)
    mutate(reply["ladders"][1])
    return reply


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda lad: lad["ranks"][0].update(pool="gcp/x/spot/a3"), "ranks[0].pool: unknown pool"),
        (lambda lad: lad["ranks"][0].update(gpu="TPU-v5"), "ranks[0].gpu: unknown GPU"),
        (lambda lad: lad["ranks"][0].update(gpu="H100-SXM"), "is not the GPU of pool"),
        (lambda lad: lad["ranks"][0].update(model="GPT-9"), "ranks[0].model: unknown model"),
        (
            lambda lad: lad["ranks"][0].update(model="Llama-3.1-70B"),
            "is not the job's model 'Llama-3.1-8B'",
        ),
        (lambda lad: lad["ranks"][0]["config"].update(tp=0), "config.tp: must be an integer"),
        (lambda lad: lad["ranks"][0]["config"].update(tp=True), "config.tp: must be an integer"),
        (lambda lad: lad["ranks"][0]["config"].update(tp="2"), "config.tp: must be an integer"),
        (lambda lad: lad["ranks"][0]["config"].update(quant="fp4"), "config.quant: must be one"),
        (lambda lad: lad["ranks"][0]["config"].update(engine=" vllm"), "config.engine"),
        (lambda lad: lad["ranks"][0]["config"].pop("pp"), "config.pp: required field missing"),
        (lambda lad: lad["ranks"][0].update(zone="a"), "ranks[0]: unknown field(s) ['zone']"),
        (lambda lad: lad.update(ranks=[]), "ranks: must be an array of 1..16"),
        (lambda lad: lad.update(rationale=7), "rationale: must be a string"),
    ],
)
def test_bad_ladder_is_rejected_with_its_path(
    chat_server: Any, chat_job: Job, context: ProposalContext, mutate: Any, reason: str
) -> None:
    chat_server.answer(_ladder_with(mutate))
    batch = _host(_proposer(chat_server)).propose_ladders(chat_job, _fresh(context))
    assert not batch.errors
    assert len(batch.ladders) == 1  # the good ladder survives
    (rejection,) = batch.rejections
    assert rejection.plugin == "llm"
    assert "ladders[1]" in rejection.reason
    assert reason in rejection.reason


def test_infeasible_ladder_is_rejected_by_the_facade(
    chat_server: Any, chat_job: Job, context: ProposalContext
) -> None:
    # 9 replicas x 2 GPUs on the 16-GPU L4 pool: well-formed, but over capacity.
    chat_server.answer(_ladder_with(lambda lad: lad["ranks"][0].update(replicas=9)))
    batch = _host(_proposer(chat_server)).propose_ladders(chat_job, _fresh(context))
    (rejection,) = batch.rejections
    assert f"pool '{L4}': needs 18 GPUs, capacity 16" in rejection.reason
    assert isinstance(rejection.ladder, Ladder)


def test_fenced_reply_is_unwrapped(
    chat_server: Any, chat_job: Job, context: ProposalContext
) -> None:
    chat_server.answer("```json\n" + json.dumps(VALID) + "\n```")
    batch = _host(_proposer(chat_server)).propose_ladders(chat_job, _fresh(context))
    assert len(batch.ladders) == 2


def test_extra_ladders_are_rejected_over_the_limit(
    chat_server: Any, chat_job: Job, context: ProposalContext
) -> None:
    chat_server.answer(VALID)
    batch = _host(_proposer(chat_server, max_candidates=1)).propose_ladders(
        chat_job, _fresh(context)
    )
    assert len(batch.ladders) == 1
    (rejection,) = batch.rejections
    assert "over the limit of 1" in rejection.reason
    assert json.loads(chat_server.requests[-1]["messages"][1]["content"])["max_candidates"] == 1


def test_http_error_is_reported(chat_server: Any, chat_job: Job, context: ProposalContext) -> None:
    chat_server.reply = lambda _req: (500, b'{"error": "overloaded"}', 0.0)
    batch = _host(_proposer(chat_server)).propose_ladders(chat_job, _fresh(context))
    (error,) = batch.errors
    assert "HTTP 500" in str(error)
    assert "overloaded" in str(error)


def test_missing_content_is_reported(
    chat_server: Any, chat_job: Job, context: ProposalContext
) -> None:
    chat_server.reply = lambda _req: (200, b'{"choices": []}', 0.0)
    batch = _host(_proposer(chat_server)).propose_ladders(chat_job, _fresh(context))
    (error,) = batch.errors
    assert "choices[0].message.content" in str(error)


def test_oversized_reply_is_cut_off(
    chat_server: Any, chat_job: Job, context: ProposalContext
) -> None:
    chat_server.answer({"ladders": [], "pad": "x" * 5000})
    proposer = _proposer(chat_server, config=LlmConfig(max_reply_bytes=1000))
    (error,) = _host(proposer).propose_ladders(chat_job, _fresh(context)).errors
    assert "larger than 1000 bytes" in str(error)


def test_unreachable_endpoint_is_reported(chat_job: Job, context: ProposalContext) -> None:
    proposer = LlmProposer("http://127.0.0.1:9/v1", "m", timeout_s=2.0)
    (error,) = _host(proposer).propose_ladders(chat_job, _fresh(context)).errors
    assert "request failed" in str(error)


@pytest.mark.parametrize("limit", ["timeout", "deadline"])
def test_slow_reply_never_waits_past_the_deadline(
    chat_server: Any, chat_job: Job, context: ProposalContext, limit: str
) -> None:
    chat_server.answer(VALID, delay=5.0)
    if limit == "timeout":
        proposer, ctx = _proposer(chat_server, timeout_s=0.3), _fresh(context)
    else:
        proposer, ctx = _proposer(chat_server), _fresh(context, 0.3)
    start = time.monotonic()
    batch = _host(proposer).propose_ladders(chat_job, ctx)
    elapsed = time.monotonic() - start
    assert elapsed < 1.0
    (error,) = batch.errors
    assert "timed out" in str(error)
    assert batch.ladders == ()


def test_trickling_server_is_cut_at_the_deadline(
    chat_server: Any, chat_job: Job, context: ProposalContext
) -> None:
    # Headers arrive at once, the body never completes: the watchdog must still stop the read.
    handler = chat_server.httpd.RequestHandlerClass
    original = handler.do_POST

    def do_post(self: Any) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        try:
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b'{"choices": ')
            self.wfile.flush()
            chat_server.stopping.wait(5.0)
        except OSError:
            pass

    handler.do_POST = do_post
    try:
        start = time.monotonic()
        batch = _host(_proposer(chat_server, timeout_s=0.4)).propose_ladders(
            chat_job, _fresh(context)
        )
        elapsed = time.monotonic() - start
    finally:
        handler.do_POST = original
    assert elapsed < 1.2
    (error,) = batch.errors
    assert "timed out" in str(error)


def test_expired_deadline_sends_nothing(
    chat_server: Any, chat_job: Job, context: ProposalContext
) -> None:
    proposer = _proposer(chat_server)
    expired = attrs.evolve(context, deadline_s=time.monotonic() - 1.0)
    with pytest.raises(PluginError, match="deadline passed"):
        proposer.koi_propose_ladders(chat_job, expired)
    assert chat_server.requests == []


def test_direct_call_returns_rejections_and_ladders(
    chat_server: Any, chat_job: Job, context: ProposalContext
) -> None:
    chat_server.answer(_ladder_with(lambda lad: lad["ranks"][0].update(pool="nowhere")))
    out = _proposer(chat_server).koi_propose_ladders(chat_job, _fresh(context))
    assert [type(x) for x in out] == [Ladder, Rejection]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"base_url": "ftp://x/v1"}, "base_url"),
        ({"base_url": "not a url"}, "base_url"),
        ({"model": ""}, "model"),
        ({"timeout_s": 0.0}, "timeout_s"),
        ({"max_candidates": 0}, "max_candidates"),
        ({"name": " llm"}, "name"),
    ],
)
def test_invalid_settings(kwargs: dict[str, Any], field: str) -> None:
    args = {"base_url": "http://127.0.0.1:1/v1", "model": "m", **kwargs}
    with pytest.raises(InvalidInput, match=field):
        LlmProposer(**args)


def test_from_config_uses_the_config_defaults() -> None:
    config = LlmConfig(api_key_env="MY_KEY", timeout_s=3.0, max_candidates=2)
    proposer = LlmProposer.from_config("https://api.example.com/v1", "m", config, name="llm-b")
    assert (proposer.api_key_env, proposer.timeout_s, proposer.max_candidates) == ("MY_KEY", 3.0, 2)
    assert proposer.koi_plugin_name == "llm-b"
    assert proposer.endpoint == "https://api.example.com/v1/chat/completions"


def test_two_llm_proposers_share_the_tick(
    chat_server: Any, chat_job: Job, context: ProposalContext
) -> None:
    chat_server.answer(VALID)
    host = _host(_proposer(chat_server, name="llm-a"), _proposer(chat_server, name="llm-b"))
    batch = host.propose_ladders(chat_job, _fresh(context))
    assert len(batch.ladders) == 2
    assert all(s == ("llm-a", "llm-b") for s in batch.sources)


class TestLlmProposerContract(ProposerContract):
    """The built-in LLM proposer passes the public proposer contract."""

    @pytest.fixture
    def proposer(self, chat_server: Any) -> LlmProposer:
        chat_server.answer(VALID)
        return _proposer(chat_server)

    @pytest.fixture
    def proposal_case(self, chat_job: Job, context: ProposalContext) -> tuple[Job, ProposalContext]:
        return chat_job, _fresh(context)


def test_snapshot_fixture_is_consistent(snapshot: ClusterSnapshot) -> None:
    # Guards the fixtures above: the L4 pool really has 16 GPUs.
    assert snapshot.pool(L4).capacity_gpus == 16
    assert issubclass(PluginError, KoiError)


def test_ladder_outside_the_job_precisions_is_rejected_naming_the_policy(
    chat_server: Any, chat_job: Job, context: ProposalContext
) -> None:
    bf16_only = attrs.evolve(chat_job, precisions=["bf16"])
    chat_server.answer(_ladder_with(lambda lad: lad["ranks"][0]["config"].update(quant="int4")))
    batch = _host(_proposer(chat_server)).propose_ladders(bf16_only, _fresh(context))
    assert not batch.errors
    assert [lad.ranks[0].chain.config.quant for lad in batch.ladders] == [Quant.BF16]
    (rejection,) = batch.rejections
    assert "ladders[1]" in rejection.reason
    assert "precision policy" in rejection.reason
    assert "int4 is outside the accepted precisions (bf16)" in rejection.reason
    # The same reply for a job that lists INT4 is taken whole.
    with_int4 = attrs.evolve(chat_job, precisions=["bf16", "int4"])
    whole = _host(_proposer(chat_server)).propose_ladders(with_int4, _fresh(context))
    assert len(whole.ladders) == 2


def test_prompt_schema_and_rules_carry_the_job_precisions(
    chat_server: Any, chat_job: Job, context: ProposalContext
) -> None:
    chat_server.answer(VALID)
    _host(_proposer(chat_server)).propose_ladders(
        attrs.evolve(chat_job, precisions=["bf16", "fp8"]), _fresh(context)
    )
    system = chat_server.requests[-1]["messages"][0]["content"]
    facts = json.loads(chat_server.requests[-1]["messages"][1]["content"])
    assert facts["job"]["precisions"] == ["bf16", "fp8"]
    assert '"quant":{"enum":["bf16","fp8"]}' in system
    assert "precisions" in system

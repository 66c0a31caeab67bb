"""The serving engine as a searched decision (``ProposerConfig.engine_options``): screened,
focused on, and chosen where it serves a job more cheaply."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from tests.planner._world import CATALOG, SURROGATE, chat_job, pools, unhurried_planner

from koi.candidates import (
    CandidateGenerator,
    ProposalContext,
    ProposerConfig,
    Screener,
    changed_decisions,
    searched,
)
from koi.config import KoiConfig
from koi.dag import Decision
from koi.errors import InvalidInput
from koi.planner import _propose
from koi.types import (
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Engine,
    Job,
    Ladder,
    Outcome,
    Pool,
    Rank,
)

_ALL = ("vllm", "sglang", "trtllm")


def _placed_engines(engines: tuple[str, ...], min_gain: float = 0.0) -> set[Engine]:
    cfg = KoiConfig(proposer=ProposerConfig(engine_options=engines, engine_min_gain=min_gain))
    job = chat_job(model="Llama-3.1-70B", rate=4.0)
    plan = unhurried_planner(cfg).tick(ClusterSnapshot(0.0, [job], pools(per_pool=4))).plan
    (action,) = plan.actions
    return {r.chain.config.engine for r in action.ladder.ranks}


def test_the_engine_is_chosen_only_where_engines_are_searched_and_worth_a_change() -> None:
    assert _placed_engines(("vllm",)) == {Engine.VLLM}
    # The surrogate's profiles price this 70B chat service cheapest off vLLM, by less than
    # 15 % more capacity.
    assert _placed_engines(_ALL) - {Engine.VLLM}
    assert _placed_engines(_ALL, 1.15) == {Engine.VLLM}


def test_an_engine_is_never_placed_on_a_gpu_it_has_no_build_for() -> None:
    # AMD GPUs only: TensorRT-LLM alone serves nothing there; listed beside SGLang, SGLang.
    (env, *_) = CATALOG.environments(clouds=["azure"], markets=["on_demand"], gpus=["MI300X"])
    snapshot = ClusterSnapshot(0.0, [chat_job(rate=4.0)], [Pool(env, 8)])
    placed = []
    for engines in [("trtllm",), ("trtllm", "sglang")]:
        cfg = KoiConfig(proposer=ProposerConfig(engine_options=engines))
        (action,) = unhurried_planner(cfg).tick(snapshot).plan.actions
        placed.append({r.chain.config.engine for r in action.ladder.ranks})
    assert placed == [set(), {Engine.SGLANG}]


def _running_70b(engine: str = "vllm") -> Ladder:
    """One Llama-3.1-70B TP 4 replica on H100 under ``engine``: a running job's ladder."""
    env = next(p.environment for p in pools() if p.environment.gpu == "H100-SXM")
    return Ladder((Rank(Chain("Llama-3.1-70B", env, Config(tp=4, engine=engine)), 1),))


def _engines_proposed(
    cfg: ProposerConfig, incumbent: Ladder | None, breached: tuple[Outcome, ...] = ()
) -> set[Engine]:
    job = chat_job(model="Llama-3.1-70B", rate=4.0)
    snapshot = ClusterSnapshot(0.0, [job], pools(per_pool=16))
    context = ProposalContext(
        snapshot=snapshot,
        gpus=dict(CATALOG.gpus),
        models=dict(CATALOG.models),
        incumbent=incumbent,
        max_candidates=30,
        at_risk=breached,
        breached=breached,
    )
    ladders = CandidateGenerator(SURROGATE, cfg).propose(job, context)
    return {r.chain.config.engine for lad in ladders for r in lad.ranks}


def test_a_running_job_keeps_its_engine_unless_engine_changes_are_allowed() -> None:
    running = _running_70b("sglang")
    engines = ProposerConfig(engine_options=_ALL)
    assert len(_engines_proposed(engines, None)) > 1  # a job being placed: any engine
    assert _engines_proposed(engines, running) == {Engine.SGLANG}
    changes = attrs.evolve(engines, engine_changes=True)
    assert len(_engines_proposed(changes, running)) > 1
    # An engine the screen does not list (the host deployed it) is not kept: vLLM is offered
    # beside the incumbent's ±1-replica neighbours.
    assert _engines_proposed(ProposerConfig(), running) == {Engine.VLLM, Engine.SGLANG}


def test_a_kept_engine_is_open_again_once_the_keep_is_predicted_past_a_latency_bound() -> None:
    # It was chosen on the surrogate's prior for the engine; telemetry can show that wrong.
    running = _running_70b("sglang")
    engines = ProposerConfig(engine_options=_ALL)
    assert _engines_proposed(engines, running) == {Engine.SGLANG}
    assert len(_engines_proposed(engines, running, (Outcome.TPOT,))) > 1
    assert len(_engines_proposed(engines, running, (Outcome.TTFT,))) > 1
    # Only with engines to choose from: vLLM alone offers vLLM (and the incumbent's neighbours).
    assert _engines_proposed(ProposerConfig(), running, (Outcome.TPOT,)) == {
        Engine.VLLM,
        Engine.SGLANG,
    }


def _breached_in_context(rate: float, monkeypatch: pytest.MonkeyPatch) -> tuple[Outcome, ...]:
    one = _running_70b()
    job = chat_job(model="Llama-3.1-70B", rate=rate)
    planner = unhurried_planner()
    propose = planner.generator.propose
    seen: list[tuple[Outcome, ...]] = []

    def spy(job: Job, context: ProposalContext) -> list[Ladder]:
        seen.append(context.breached)
        return propose(job, context)

    monkeypatch.setattr(planner.generator, "propose", spy)
    active = [ActiveDeployment(job.id, one)]
    planner.tick(ClusterSnapshot(0.0, [job], pools(per_pool=4), active))
    return seen[0]


def test_the_planner_tells_a_proposer_what_the_keep_is_predicted_past(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _breached_in_context(0.5, monkeypatch) == ()  # one replica carries it
    assert {Outcome.TTFT, Outcome.TPOT} & {*_breached_in_context(40.0, monkeypatch)}


def test_a_running_job_is_sized_on_the_screen_of_the_engine_it_keeps() -> None:
    # The screen behind both its proposals and its budget book (the book takes the fewest
    # GPUs among these options): a book sized on engines the job cannot move to would ask for
    # GPUs its proposals never use.
    job = chat_job(model="Llama-3.1-70B", rate=4.0)
    running = _running_70b("sglang")

    def book_engines(cfg: ProposerConfig, incumbent: Ladder | None) -> set[Engine]:
        screener = CandidateGenerator(SURROGATE, cfg).screener_for(incumbent)
        envs = [p.environment for p in pools()]
        sized = screener.sized_options(job, envs, dict(CATALOG.gpus), now_s=0.0)
        return {s.option.config.engine for s in sized}

    engines = ProposerConfig(engine_options=_ALL)
    assert len(book_engines(engines, None)) > 1
    assert book_engines(engines, running) == {Engine.SGLANG}
    assert len(book_engines(attrs.evolve(engines, engine_changes=True), running)) > 1
    assert book_engines(ProposerConfig(), running) == {Engine.VLLM}  # SGLang is not listed


def test_the_planner_sizes_a_running_jobs_budget_book_on_its_kept_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = chat_job(model="Llama-3.1-70B", rate=4.0)
    running = _running_70b("sglang")
    sized_on: list[tuple[str, ...]] = []
    demand = _propose.job_demand

    def spy(job: Job, snapshot: ClusterSnapshot, screener: Screener, *a: Any, **k: Any) -> Any:
        sized_on.append(screener.cfg.engine_options)
        return demand(job, snapshot, screener, *a, **k)

    monkeypatch.setattr(_propose, "job_demand", spy)
    planner = unhurried_planner(KoiConfig(proposer=ProposerConfig(engine_options=_ALL)))
    planner.tick(
        ClusterSnapshot(0.0, [job], pools(per_pool=4), [ActiveDeployment(job.id, running)])
    )
    assert sized_on == [("sglang",)]


def test_the_engine_is_a_focus_decision_when_a_running_job_may_change_it() -> None:
    job = chat_job()
    assert Decision.ENGINE not in searched(job, ProposerConfig())
    assert Decision.ENGINE not in searched(job, ProposerConfig(engine_options=_ALL))
    changes = ProposerConfig(engine_options=_ALL, engine_changes=True)
    assert Decision.ENGINE in searched(job, changes)
    env = pools()[0].environment
    vllm = Ladder((Rank(Chain(job.model, env, Config(tp=2)), 2),))
    trt = Ladder((Rank(Chain(job.model, env, Config(tp=2, engine="trtllm")), 2),))
    assert changed_decisions(trt, vllm) == {Decision.ENGINE}


@pytest.mark.parametrize("bad", [(), ("vllm", "vllm"), ("tgi",), "vllm", (1,)])
def test_engine_options_are_a_list_of_distinct_engines(bad: object) -> None:
    with pytest.raises(InvalidInput, match=r"^engine_options: must be a non-empty list"):
        ProposerConfig(engine_options=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-0.5, float("nan"), 1e9])
def test_the_gain_an_engine_must_bring_is_a_bounded_ratio(bad: float) -> None:
    with pytest.raises(InvalidInput, match=r"^engine_min_gain: must be (in \[0, 100\]|a number)"):
        ProposerConfig(engine_min_gain=bad)


def test_a_list_from_toml_is_taken() -> None:
    cfg = ProposerConfig(engine_options=["trtllm", "vllm"])  # type: ignore[arg-type]
    assert attrs.asdict(cfg)["engine_options"] == ("trtllm", "vllm")

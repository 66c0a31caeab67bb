"""Scenario files: the built-ins match DESIGN §10.2, and malformed files name the bad key."""

from __future__ import annotations

import doctest
import json
import math
import re
from pathlib import Path

import pytest

import koi.sim._scenario as scenario_module
from koi.catalog import Catalog
from koi.cli import main
from koi.errors import InvalidInput
from koi.sim import (
    EventKind,
    build_world,
    check_names,
    load_scenario,
    parse_scenario,
    resolve_pools,
    scenario_names,
)
from koi.sim._capacity import replica_capacity
from koi.surrogate import OperatorModel, feasibility
from koi.types import Arrival, Config, Market, Quant

from .conftest import online_job_toml, pool_toml, tiny


def test_builtin_names() -> None:
    assert scenario_names() == ("fleet-xl", "hetero-12h", "hetero-3h", "homo-12h", "smoke")


def test_hetero_3h_matches_design(catalog: Catalog) -> None:
    sc = load_scenario("hetero-3h")
    pools = resolve_pools(sc, tuple(catalog.instances))
    gpus = sum(p.capacity_gpus for p in pools)
    assert sc.duration_s == 3 * 3600
    assert sc.tick_s == 300
    assert 380 <= gpus <= 420
    clouds = {p.environment.cloud for p in pools} - {"onprem"}
    assert len(clouds) >= 3
    assert len({p.environment.gpu for p in pools}) >= 6
    assert {p.environment.market for p in pools} == set(Market)
    assert len(sc.jobs) == 25
    assert len(sc.online_jobs) == 19
    assert len(sc.batch_jobs) == 6
    models = {catalog.models[j.model] for j in sc.jobs}
    assert len(models) == 10
    assert min(m.params_b for m in models) < 2
    assert max(m.params_b for m in models) > 200
    assert any(m.is_moe for m in models)
    assert any(not m.is_moe for m in models)
    deadlines = [(j.target.deadline_s or 0) - j.arrival_s for j in sc.batch_jobs]
    assert min(deadlines) == 20 * 60
    assert max(deadlines) == 135 * 60
    assert {j.workload.arrival for j in sc.online_jobs} == set(Arrival)
    assert max(j.workload.input_len.mean for j in sc.jobs) >= 24_000  # long summaries
    assert min(j.workload.output_len.mean for j in sc.jobs) <= 8  # short moderation
    decode_heavy = [j for j in sc.jobs if j.workload.output_len.mean >= j.workload.input_len.mean]
    assert len(decode_heavy) >= 2
    arrivals = sorted(j.arrival_s for j in sc.jobs)
    assert arrivals[0] == 0
    assert arrivals[-1] >= 3600  # jobs keep arriving during the run
    assert {e.kind for e in sc.events} == set(EventKind)


def test_long_scenarios(catalog: Catalog) -> None:
    three = load_scenario("hetero-3h")
    het = load_scenario("hetero-12h")
    homo = load_scenario("homo-12h")
    het_pools = resolve_pools(het, tuple(catalog.instances))
    homo_pools = resolve_pools(homo, tuple(catalog.instances))
    assert het.duration_s == homo.duration_s == 12 * 3600
    assert 760 <= sum(p.capacity_gpus for p in het_pools) <= 840
    assert len(het.events) > len(three.events)
    assert len({p.environment.gpu for p in homo_pools}) == 1
    for sc in (het, homo):
        assert len(sc.jobs) == 25
        assert len({j.model for j in sc.jobs}) == 10


def test_fleet_xl_is_ten_thousand_gpus_and_three_hundred_jobs(catalog: Catalog) -> None:
    sc = load_scenario("fleet-xl")
    pools = resolve_pools(sc, tuple(catalog.instances))
    assert sc.duration_s == 6 * 3600
    assert 9_500 <= sum(p.capacity_gpus for p in pools) <= 10_500
    assert {p.environment.cloud for p in pools} == {"aws", "gcp", "azure", "onprem"}
    assert {p.environment.market for p in pools} == set(Market)
    assert len({p.environment.gpu for p in pools}) >= 9
    assert len(sc.jobs) == 300
    assert 0 < len(sc.batch_jobs) < len(sc.online_jobs)
    assert {j.model for j in sc.jobs} == set(catalog.models)  # all 12 architectures
    assert {e.kind for e in sc.events} == set(EventKind)
    assert max(j.arrival_s for j in sc.jobs) >= 4 * 3600  # tenants keep arriving
    # Tenants share service tiers: many jobs are copies of one another (same model, traffic,
    # targets), the case the selector merges.
    shapes = {(j.model, j.workload, j.target, j.priority) for j in sc.jobs}
    assert len(shapes) <= len(sc.jobs) // 2


@pytest.mark.parametrize("name", ["smoke", "hetero-3h", "hetero-12h", "homo-12h", "fleet-xl"])
def test_every_job_is_servable(catalog: Catalog, name: str) -> None:
    sc = load_scenario(name)
    pools = resolve_pools(sc, tuple(catalog.instances))
    for job in {j.model: j for j in sc.jobs}.values():  # servability depends on the model
        model = catalog.models[job.model]
        ok = any(
            feasibility(
                catalog.gpus[p.environment.gpu], model, Config(tp=tp, quant=q), p.environment
            ).ok
            for p in pools
            for tp in (1, 2, 4, 8)
            for q in Quant
        )
        assert ok, f"{name}: job {job.id} has no feasible chain in the fleet"


def test_hetero_fleet_is_contended(catalog: Catalog) -> None:
    """At the surrogate's own estimate, the fastest GPUs cannot host every job at its best
    configuration: planners must trade hardware between jobs."""
    sc = load_scenario("hetero-3h")
    pools = resolve_pools(sc, tuple(catalog.instances))
    fast = {"H100-SXM", "H200"}
    have = sum(p.capacity_gpus for p in pools if p.environment.gpu in fast)
    need = 0
    for job in sc.jobs:
        model = catalog.models[job.model]
        w = job.workload
        demand = (
            w.offered_output_tok_s
            if job.is_online
            else (w.total_requests or 0)
            * w.output_len.mean
            / ((job.target.deadline_s or 0) - job.arrival_s)
        )
        best = math.inf
        for gpu in fast:
            for tp in (1, 2, 4, 8):
                for q in (Quant.BF16, Quant.FP8):
                    c = Config(tp=tp, quant=q)
                    fe = feasibility(catalog.gpus[gpu], model, c)
                    if not fe.ok:
                        continue
                    _, tok = replica_capacity(
                        OperatorModel(catalog.gpus[gpu], model, c), fe.kv_capacity_tokens, c, w
                    )
                    best = min(best, math.ceil(demand / (0.7 * tok)) * c.gpus)
        need += best
    assert need > have


def test_doc_example() -> None:
    result = doctest.testmod(scenario_module)
    assert result.attempted >= 1
    assert result.failed == 0


@pytest.mark.parametrize(
    ("body", "key"),
    [
        (pool_toml() + "\n[[jobs]]\nid = 'a'\ncolour = 'red'\n", "jobs[0].colour: unknown key"),
        (
            pool_toml()
            + "[[jobs]]\nid='a'\nmodel='Llama-3.1-8B'\nclass='online'\n"
            + "input={mean=10}\noutput={mean=10}\nrate_rps=-1\np99_ttft_ms=1\np99_tpot_ms=1\n",
            "jobs[0].rate_rps",
        ),
        (
            pool_toml()
            + "[[jobs]]\nid='a'\nmodel='Llama-3.1-8B'\nclass='batch'\n"
            + "input={mean=10}\noutput={mean=10}\nrequests=5\n",
            "jobs[0].deadline_min: required",
        ),
        (
            pool_toml()
            + "[[jobs]]\nid='a'\nmodel='m'\nclass='online'\n"
            + "input={mean=10, sd=1}\noutput={mean=1}\n"
            + "rate_rps=1\np99_ttft_ms=1\np99_tpot_ms=1\n",
            "jobs[0].input.sd: unknown key",
        ),
        (
            "[[pools]]\ncloud='aws'\nregion='r'\nmarket='on_demand'\ninstance_type='x'\n",
            "pools[0].instances: required",
        ),
        (
            pool_toml(market="cheap"),
            "pools[0].market",
        ),
        (
            pool_toml() + "[[events]]\nat_min=5\nkind='preemption'\npool='nope'\ninstances=1\n",
            "events[0].pool: unknown pool",
        ),
        (pool_toml() + "[[events]]\nat_min=5\nkind='meteor'\n", "events[0].kind"),
        (pool_toml() + online_job_toml() + "admission = 'maybe'\n", "jobs[0].admission"),
        (pool_toml() + "[[events]]\nat_min=5\nkind='driver_update'\n", "events[0].gpu: required"),
    ],
)
def test_malformed_scenarios_name_the_key(body: str, key: str) -> None:
    with pytest.raises(InvalidInput, match=key.replace("[", r"\[").replace("]", r"\]")):
        tiny(body)


def _head(extra: str) -> str:
    return f"[scenario]\nname = 'x'\nduration_min = 30\n{extra}\n" + pool_toml()


_BATCH = (
    "[[jobs]]\nid='b'\nmodel='Llama-3.1-8B'\nclass='batch'\n"
    "input={mean=10}\noutput={mean=10}\nrequests=5\n"
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_head("tick_s = 'abc'"), "scenario.tick_s: must be a number, got 'abc'"),
        (_head("tick_s = '300'"), "scenario.tick_s: must be a number, got '300'"),
        (_head("tick_s = true"), "scenario.tick_s: must be a number, got True"),
        (_head("duration_h = 1e300"), "scenario.duration_s: must be at most 31 days"),
        (_head("") + _BATCH + "deadline_min = 0\n", "jobs[0].deadline_min: must be > 0"),
        (_head("") + _BATCH + "deadline_min = nan\n", "jobs[0].deadline_min: must be a finite"),
        (
            _head("") + _BATCH + "deadline_min = 9\nrate_rps = 3\n",
            "jobs[0].rate_rps: not a key of a batch job",
        ),
        (
            _head("") + online_job_toml() + "requests = 3\n",
            "jobs[0].requests: not a key of a online job",
        ),
        (
            _head("") + online_job_toml().replace('class = "online"', "class = ['online']"),
            "jobs[0].class: must be online or batch",
        ),
        (
            _head("") + online_job_toml(inp=100).replace("max = 400", "max = 50"),
            "x: jobs[0].input.mean: must be <= max",
        ),
        (
            _head("")
            + online_job_toml()
            + "weights = { cost = 0, ttft = 0, tpot = 0, throughput = 0, slo_margin = 0 }\n",
            "x: jobs[0].weights: at least one",
        ),
        (_head("") + "multi_node = 'no'\n", "pools[0].multi_node: must be true or false"),
        (
            _head("")
            + "[[events]]\nat_min=5\nkind='preemption'\npool='lab/r1/on_demand/box'\n"
            + "instances=1\nnotice='no'\n",
            "events[0].notice: must be true or false",
        ),
        (
            _head("") + "[[events]]\nat_min=5\nkind='driver_update'\ngpu='L4'\nengine='tgi'\n",
            "events[0].engine: must be one of vllm, sglang, trtllm",
        ),
        (
            _head("") + online_job_toml() + "[[events]]\nat_min=5\nkind='degrade'\njob='chat'\n"
            "speed=2\n",
            "events[0].speed: not a field of a degrade event",
        ),
    ],
)
def test_wrong_types_and_unused_keys_are_refused(text: str, message: str) -> None:
    """Cases a fuzzing run found accepted (a string tick, "no" as true, a key of another
    kind silently ignored, a deadline of 0 read as none) or reported with a traceback or the
    place named twice."""
    with pytest.raises(InvalidInput) as err:
        parse_scenario(text, source="x")
    assert message in str(err.value)
    assert str(err.value).count("x:") == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _head("") + _BATCH.replace("requests=5", "requests=0") + "deadline_min=20\n",
            "x: jobs[0].requests: must be an integer >= 1, got 0",
        ),
        (
            _head("") + online_job_toml() + "prefixes = 0\n",
            "x: jobs[0].prefixes: must be an integer >= 1, got 0",
        ),
        (
            _head("") + online_job_toml(arrival_min=45),
            (
                "x: jobs[0].arrival_min: must be before the end of the run (1800 s = 30 min), "
                "got 2700 s = 45 min"
            ),
        ),
        (
            _head("") + "[[events]]\nat_min=30\nkind='driver_update'\ngpu='L4'\nspeed=0.9\n",
            (
                "x: events[0].at_min: must be before the end of the run (1800 s = 30 min), "
                "got 1800 s = 30 min"
            ),
        ),
        (_head("tick_s = 3600"), "x: scenario.tick_s: must be <= the run's duration (1800 s)"),
        (
            _head("") + "[[events]]\nat_min=5\nkind='preemption'\npool='nope'\ninstances=1\n",
            "x: events[0].pool: unknown pool 'nope'",
        ),
    ],
)
def test_a_scenario_file_s_errors_name_its_keys_and_units(text: str, message: str) -> None:
    """Found writing a scenario as a new user: the loader named the types' fields
    (``total_requests``, ``at_s``) in seconds and put the file's arrays under ``scenario.``."""
    with pytest.raises(InvalidInput) as err:
        parse_scenario(text, source="x")
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            pool_toml() + online_job_toml(model="GPT-5"),
            "jobs[0].model: unknown model 'GPT-5' (known: Llama-3.1-405B, ",
        ),
        (
            pool_toml() + online_job_toml(model="llama-3.1-8b"),
            "jobs[0].model: unknown model 'llama-3.1-8b' (did you mean 'Llama-3.1-8B'?)",
        ),
        (pool_toml(gpu="TPU-v5"), "pools[0].gpu: unknown GPU 'TPU-v5'"),
        (
            pool_toml() + "[[events]]\nat_min=5\nkind='driver_update'\ngpu='NOPE'\n",
            "events[0].gpu: unknown GPU 'NOPE'",
        ),
    ],
)
def test_names_outside_the_catalog_are_refused_where_the_file_is_checked(
    catalog: Catalog, body: str, message: str
) -> None:
    sc = tiny(body)
    with pytest.raises(InvalidInput, match=re.escape(message)):
        check_names(sc, resolve_pools(sc, tuple(catalog.instances)), catalog.gpus, catalog.models)
    with pytest.raises(InvalidInput, match=re.escape(message)):
        build_world(sc, seed=0)


@pytest.mark.parametrize(
    "path",
    sorted((Path(__file__).parents[2] / "benchmarks" / "scenarios").glob("*.toml")),
    ids=lambda p: p.stem,
)
def test_the_published_scenario_files_still_load(catalog: Catalog, path: Path) -> None:
    """The new-user scenarios docs/benchmark.md quotes are files a reader runs: a format
    change that breaks one fails here, not in the reader's hands."""
    sc = load_scenario(path)
    assert sc.name == path.stem
    check_names(sc, resolve_pools(sc, tuple(catalog.instances)), catalog.gpus, catalog.models)


def test_invalid_toml_and_unknown_name(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="not valid TOML"):
        parse_scenario("[scenario\n")
    with pytest.raises(InvalidInput, match="built-in: fleet-xl, hetero-12h"):
        load_scenario("no-such-scenario")
    bad = tmp_path / "mine.toml"
    bad.write_text("[scenario]\nname = 'x'\n")
    with pytest.raises(InvalidInput, match=r"mine.toml: scenario.duration_h: required"):
        load_scenario(bad)


def test_unknown_catalog_instance_is_named(catalog: Catalog) -> None:
    sc = tiny(
        "[[pools]]\ncloud='aws'\nregion='us-east-1'\nmarket='spot'\ninstance_type='p9'\ninstances=1\n"
    )
    with pytest.raises(InvalidInput, match=r"pools\[0\]\.instance_type: unknown aws instance"):
        resolve_pools(sc, tuple(catalog.instances))


def test_user_file_round_trip(tmp_path: Path) -> None:
    text = (Path(scenario_module.__file__).parent / "scenarios" / "smoke.toml").read_text()
    path = tmp_path / "copy.toml"
    path.write_text(text.replace('name = "smoke"', 'name = "my-copy"'))
    sc = load_scenario(path)
    assert sc.name == "my-copy"
    assert sc.jobs == load_scenario("smoke").jobs


def test_cli_lists_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_name = {r["name"]: r for r in rows}
    assert set(by_name) == set(scenario_names())
    assert by_name["hetero-3h"]["gpus"] == 400
    assert by_name["hetero-3h"]["online_jobs"] == 19
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    assert "hetero-3h" in out
    assert "homo-12h" in out


def test_cli_summarises_a_user_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        '[scenario]\nname = "mine"\nduration_min = 10\n'
        + pool_toml(instances=3, gpus_per_instance=2)
    )
    assert main(["scenarios", "--file", str(path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["name"] == "mine"
    assert row["gpus"] == 6
    path.write_text('[scenario]\nname = "mine"\nduration_min = 10\n[[pools]]\ncloud = 1\n')
    assert main(["scenarios", "--file", str(path)]) == 2
    assert "pools[0].region: required" in capsys.readouterr().err


def test_admission_policy_is_read_per_job() -> None:
    body = pool_toml() + online_job_toml(job_id="a") + online_job_toml(job_id="b")
    sc = tiny(body + "admission = 'refuse'\n")
    policies = {j.id: j.admission.value for j in sc.jobs}
    assert policies == {"a": "serve_best_effort", "b": "refuse"}

"""`koi render`: from `koi plan --json` of a built-in scenario to manifests that validate."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from koi.cli import main
from koi.types import ClusterSnapshot, from_json

yaml = pytest.importorskip("yaml", reason="koi render needs PyYAML: pip install 'koi[render]'")


def _run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def smoke_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`koi scenarios --snapshot smoke` then `koi plan --json`, as a team would run them."""
    folder = tmp_path_factory.mktemp("smoke")
    code, snapshot = _run(["scenarios", "--snapshot", "smoke"])
    assert code == 0
    from_json(snapshot, ClusterSnapshot)  # a valid snapshot
    (folder / "snapshot.json").write_text(snapshot)
    code, plan = _run(["plan", str(folder / "snapshot.json"), "--json"])
    assert code == 0
    path = folder / "plan.json"
    path.write_text(plan)
    return path


def test_render_k8s_of_a_builtin_scenario_passes_kubernetes_validate_strict(
    smoke_plan: Path, tmp_path: Path
) -> None:
    pytest.importorskip("kubernetes_validate", reason="pip install 'koi[test-k8s]'")
    from tests.integrations.kubernetes._schemas import VERSIONS, validate

    plan = json.loads(smoke_plan.read_text())
    running = {j["job_id"] for j in plan["jobs"] if j["ladder"]["ranks"]}
    assert running, "the smoke plan runs nothing at its start"
    code, out = _run(["render", str(smoke_plan), "--target", "k8s", "--out", str(tmp_path)])
    assert code == 0
    files = sorted(tmp_path.glob("*.yaml"))
    assert [str(f) for f in files] == out.split()
    assert len(files) == len(running)
    # kubernetes-validate's own command line, strict, for every version from 1.30 on
    args = [sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet"]
    for version in VERSIONS:
        args += ["-k", version]
    done = subprocess.run([*args, *map(str, files)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ERROR" not in done.stdout
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            assert doc["kind"] in ("Service", "Deployment", "LeaderWorkerSet")
            if doc["kind"] == "LeaderWorkerSet":  # a CRD: kubernetes-validate only warns
                validate(doc, VERSIONS[0])


def test_render_skypilot_of_a_builtin_scenario(smoke_plan: Path, tmp_path: Path) -> None:
    code, out = _run(
        ["render", str(smoke_plan), "--target", "skypilot", "--out", str(tmp_path), "--json"]
    )
    assert code == 0
    report = json.loads(out)
    assert report["failed"] == []
    plan = json.loads(smoke_plan.read_text())
    ranks = sum(len(j["ladder"]["ranks"]) for j in plan["jobs"])
    assert len(report["files"]) + len(report["left_out"]) == ranks
    for name in report["files"]:
        doc = yaml.safe_load(Path(name).read_text())
        assert set(doc) == {"name", "resources", "service", "run"}
        assert doc["service"]["replica_policy"]["min_replicas"] >= 1


def _plan_data() -> dict[str, object]:
    from koi.catalog import load_catalog
    from koi.types import Chain, Config, JobAction, Ladder, Plan, Rank, to_data

    cat = load_catalog()
    h100 = cat.instance("aws", "p5.48xlarge").environment("us-east-1", "on_demand")
    onprem = cat.instance("onprem", "onprem-l40s-4").environment("dc1", "reserved")
    big = Rank(Chain("Llama-3.1-405B", h100, Config(tp=8, pp=2, quant="fp8")), 1)
    odd = Rank(Chain("Llama-3.1-8B", onprem, Config(engine="trtllm", quant="fp8")), 1)
    small = Rank(Chain("Llama-3.1-8B", onprem, Config(tp=2)), 2)
    plan = Plan(
        0.0,
        [
            JobAction("big", "place", Ladder((big,))),
            JobAction("odd", "place", Ladder((odd, small))),
            JobAction("later", "defer"),
        ],
    )
    return to_data(plan)  # type: ignore[no-any-return]


def test_render_reads_a_plain_plan_from_stdin_and_names_what_it_cannot_render(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(_plan_data())))
    code = main(["render", "-", "--target", "k8s", "--out", str(tmp_path), "--namespace", "llm"])
    captured = capsys.readouterr()
    assert code == 1
    assert "cannot render odd: onprem/dc1/reserved/onprem-l40s-4" in captured.err
    assert "TensorRT-LLM serves fp8 only from a pre-quantized checkpoint" in captured.err
    assert "--checkpoint Llama-3.1-8B@fp8=REPO" in captured.err
    big = list(yaml.safe_load_all((tmp_path / "koi-big.yaml").read_text()))
    assert [d["kind"] for d in big] == ["Service", "LeaderWorkerSet"]
    assert big[1]["metadata"]["namespace"] == "llm"
    odd = list(yaml.safe_load_all((tmp_path / "koi-odd.yaml").read_text()))
    assert [d["kind"] for d in odd] == ["Service", "Deployment"]  # the renderable rank


def test_render_options_reach_the_manifests(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan_data()))
    code, _ = _run(
        [
            "render",
            str(plan),
            "--target",
            "k8s",
            "--out",
            str(tmp_path / "m"),
            "--clouds",
            "aws",
            "--image",
            "vllm=registry.local/vllm:pinned",
            "--checkpoint",
            "Llama-3.1-405B@fp8=meta-llama/Llama-3.1-405B-Instruct-FP8",
        ]
    )
    assert code == 0
    assert [p.name for p in (tmp_path / "m").iterdir()] == ["koi-big.yaml"]
    lws = list(yaml.safe_load_all((tmp_path / "m" / "koi-big.yaml").read_text()))[1]
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert leader["image"] == "registry.local/vllm:pinned"
    assert "meta-llama/Llama-3.1-405B-Instruct-FP8" in leader["command"][-1]
    assert "--quantization" not in leader["command"][-1]  # a pre-quantized checkpoint


def _engine_search_plan(folder: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The `smoke` scenario planned with the engine searched (vLLM, SGLang, TensorRT-LLM): the
    plan as JSON and its TensorRT-LLM ranks."""
    from koi.candidates import ProposerConfig
    from koi.config import KoiConfig
    from koi.planner import Planner
    from koi.types import to_data

    code, snapshot = _run(["scenarios", "--snapshot", "smoke"])
    assert code == 0
    config = KoiConfig(proposer=ProposerConfig(engine_options=("vllm", "sglang", "trtllm")))
    plan = to_data(Planner(config=config).tick(from_json(snapshot, ClusterSnapshot)).plan)
    path = folder / "plan.json"
    path.write_text(json.dumps(plan))
    ranks = [r for a in plan["actions"] for r in a["ladder"]["ranks"]]
    trtllm = [r for r in ranks if r["chain"]["config"]["engine"] == "trtllm"]
    assert trtllm, "the engine search placed nothing on TensorRT-LLM"
    return path, trtllm


def test_render_of_a_builtin_scenario_planned_with_trtllm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("kubernetes_validate", reason="pip install 'koi[test-k8s]'")
    from tests.integrations.kubernetes._schemas import VERSIONS, validate

    plan, trtllm = _engine_search_plan(tmp_path)
    # TensorRT-LLM quantizes nothing at load time: each quantized rank needs its checkpoint.
    quantized = sorted(
        {
            f"{r['chain']['model']}@{r['chain']['config']['quant']}"
            for r in trtllm
            if r["chain"]["config"]["quant"] != "bf16"
        }
    )
    render = ["render", str(plan), "--target", "k8s", "--out", str(tmp_path / "refused")]
    if quantized:
        assert main(render) == 1
        err = capsys.readouterr().err
        for key in quantized:
            assert f"--checkpoint {key}=REPO" in err
    checkpoints = [a for key in quantized for a in ("--checkpoint", f"{key}=example/{key}")]
    out = tmp_path / "k8s"
    code, _ = _run(["render", str(plan), "--target", "k8s", "--out", str(out), *checkpoints])
    assert code == 0
    served = []
    for f in sorted(out.glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            validate(doc, VERSIONS[-1])
            if doc["kind"] == "Deployment":
                (container,) = doc["spec"]["template"]["spec"]["containers"]
                if "trtllm-serve" in container["command"][-1]:
                    assert container["image"].startswith("nvcr.io/nvidia/tensorrt-llm/release:")
                    served.append(container["command"][-1])
    assert len(served) == len(trtllm)
    sky = tmp_path / "sky"
    argv = ["render", str(plan), "--target", "skypilot", "--out", str(sky), "--json", *checkpoints]
    code, report = _run(argv)
    assert code == 0
    assert json.loads(report)["failed"] == []
    runs = [yaml.safe_load(f.read_text())["run"] for f in sorted(sky.glob("*.yaml"))]
    assert sum("exec trtllm-serve" in run for run in runs) == len(trtllm)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON (line 1"),
        ('{"jobs": [{"job_id": "a"}]}', "jobs[0]: missing ['action', 'ladder']"),
        (
            '{"jobs": [{"job_id": "a", "action": "place", "ladder": {"ranks": []}}]}',
            "action place needs a non-empty ladder",
        ),
        ('{"time_s": 0}', "expected the output of `koi plan --json`"),
    ],
)
def test_render_bad_plans_are_clear_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(text)
    assert main(["render", str(plan), "--target", "k8s", "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err

"""The Kubernetes launcher driven by the official client against a fake API server."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import yaml

from koi.errors import KoiWarning
from koi.integrations.engine import workload_name
from koi.integrations.kubernetes import JOB_LABEL, KubeApi, KubernetesLauncher, KubernetesSettings
from koi.planner import Planner
from koi.testing.contracts import LauncherContract
from koi.testing.fakes import example_snapshot
from koi.types import (
    ActionKind,
    Chain,
    Config,
    Environment,
    Job,
    JobAction,
    Ladder,
    LaunchResult,
    LengthDist,
    Plan,
    Rank,
    ServingTarget,
    WorkloadProfile,
)
from tests.integrations.kubernetes._fake_api import FakeCluster, gpu_node
from tests.integrations.kubernetes.conftest import H100_POOL, L4_POOL, L40S, L40S_POOL


def env_of(launcher: KubernetesLauncher, pool_id: str) -> Environment:
    return launcher.pools()[pool_id].pool.environment


def rank(
    launcher: KubernetesLauncher,
    pool_id: str = L40S_POOL,
    replicas: int = 2,
    model: str = "Llama-3.1-8B",
    **config: object,
) -> Rank:
    return Rank(Chain(model, env_of(launcher, pool_id), Config(**config)), replicas)  # type: ignore[arg-type]


def plan(*ranks: Rank, job: str = "chat", kind: str = "place") -> Plan:
    return Plan(0.0, [JobAction(job, kind, Ladder(ranks))])


def launch(launcher: KubernetesLauncher, p: Plan) -> LaunchResult:
    (result,) = launcher.koi_launch(p)
    return result


def apply_patches(cluster: FakeCluster) -> list[tuple[str, dict[str, str]]]:
    return [(path, q) for m, path, q in cluster.requests if m == "PATCH"]


# -- snapshot -----------------------------------------------------------------------------------


def test_pools_from_gpu_nodes(launcher: KubernetesLauncher) -> None:
    from koi.catalog import load_catalog

    views = launcher.pools()
    assert sorted(views) == sorted([H100_POOL, L4_POOL, L40S_POOL])
    l40s, l4, h100 = views[L40S_POOL], views[L4_POOL], views[H100_POOL]
    assert (l40s.pool.capacity_instances, l40s.pool.environment.gpus_per_instance) == (2, 4)
    assert l40s.pool.environment.gpu == "L40S"
    assert l4.pool.environment.gpu == "L4"  # from Karpenter's instance-gpu-name label
    assert h100.pool.environment.gpu == "H100-SXM"  # from GPU feature discovery's product label
    cat = load_catalog()
    assert l40s.pool.environment.price_usd_per_h == cat.instance(
        "aws", "g6e.12xlarge"
    ).price_usd_per_h("on_demand")
    spot = cat.instance("aws", "g6.xlarge")
    assert l4.pool.environment.price_usd_per_h == spot.price_usd_per_h("spot")
    assert l4.pool.environment.preemption_per_h == spot.spot_preemption_per_h > 0
    assert h100.pool.environment.multi_node
    assert not l40s.pool.environment.multi_node
    assert l40s.selector["nvidia.com/gpu.product"] == "NVIDIA-L40S"
    assert l40s.selector["karpenter.sh/capacity-type"] == "on-demand"
    assert h100.selector["eks.amazonaws.com/capacityType"] == "ON_DEMAND"
    assert {
        "key": "nvidia.com/gpu",
        "operator": "Equal",
        "value": "present",
        "effect": "NoSchedule",
    } in [dict(t) for t in h100.tolerations]


def test_nodes_that_cannot_serve_are_left_out_and_said_so(
    cluster: FakeCluster, launcher: KubernetesLauncher
) -> None:
    cluster.nodes += [
        gpu_node("l40s-down", gpus=4, labels=L40S, ready=False),
        gpu_node("l40s-cordoned", gpus=4, labels=L40S, unschedulable=True),
        gpu_node("l40s-degraded", gpus=3, labels=L40S),
        gpu_node("mystery", gpus=2, labels={"nvidia.com/gpu.product": "NVIDIA-X9000"}),
    ]
    with pytest.warns(KoiWarning) as caught:
        views = launcher.pools()
    text = str(caught[0].message)
    assert views[L40S_POOL].pool.capacity_instances == 2
    for fragment in (
        "l40s-down: not Ready",
        "l40s-cordoned: cordoned",
        "3 of 4 GPUs",
        "NVIDIA-X9000",
    ):
        assert fragment in text


def test_price_override_and_alias(cluster: FakeCluster, api: KubeApi) -> None:
    cluster.nodes.append(
        gpu_node("pcie", gpus=2, labels={"nvidia.com/gpu.product": "NVIDIA-H100-PCIe"})
    )
    s = KubernetesSettings(
        cloud="onprem",
        gpu_aliases={"NVIDIA-H100-PCIe": "H100-SXM"},
        prices={"g6e.12xlarge": 7.5},
    )
    views = KubernetesLauncher(api, s).pools()
    assert views["onprem/us-east-1/on_demand/g6e.12xlarge"].pool.environment.price_usd_per_h == 7.5
    pcie = views["onprem/default/on_demand/h100-sxm-x2"].pool
    assert pcie.environment.gpu == "H100-SXM"
    assert pcie.capacity_instances == 1


def test_gke_nodes_take_their_gpu_and_market_from_gke_labels(
    cluster: FakeCluster, api: KubeApi
) -> None:
    from koi.catalog import load_catalog
    from koi.integrations.kubernetes import gpu_name

    l4 = {
        "cloud.google.com/gke-accelerator": "nvidia-l4",
        "cloud.google.com/gke-spot": "true",
        "node.kubernetes.io/instance-type": "g2-standard-4",
        "topology.kubernetes.io/region": "us-central1",
    }
    h100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}  # no instance-type label
    cluster.nodes = [
        gpu_node("gke-l4", gpus=1, labels=l4),
        gpu_node("gke-h100", gpus=2, labels=h100),
    ]
    settings = KubernetesSettings(cloud="gcp")
    cat = load_catalog()
    assert gpu_name(h100, cat, settings)[:2] == (
        "H100-SXM",
        ("cloud.google.com/gke-accelerator", "nvidia-h100-80gb"),
    )
    views = KubernetesLauncher(api, settings).pools()
    spot = views["gcp/us-central1/spot/g2-standard-4"]
    assert spot.pool.environment.gpu == "L4"
    assert spot.pool.environment.price_usd_per_h == cat.instance(
        "gcp", "g2-standard-4"
    ).price_usd_per_h("spot")
    assert spot.selector["cloud.google.com/gke-accelerator"] == "nvidia-l4"
    assert spot.selector["cloud.google.com/gke-spot"] == "true"
    (other,) = [v for k, v in views.items() if k != "gcp/us-central1/spot/g2-standard-4"]
    assert other.pool.environment.gpu == "H100-SXM"
    assert other.pool.environment.gpus_per_instance == 2


def test_snapshot_reads_the_ladders_koi_applied(api: KubeApi, settings: KubernetesSettings) -> None:
    snap = example_snapshot()
    job = attrs.evolve(snap.jobs[0], id="chat", model="Llama-3.1-8B")
    launcher = KubernetesLauncher(api, attrs.evolve(settings, jobs=(job,)))
    ladder = Ladder((rank(launcher, replicas=2), rank(launcher, L4_POOL, replicas=1)))
    result = launch(launcher, plan(*ladder.ranks))
    assert result.complete, result.message
    snapshot = launcher.koi_snapshot(now=60.0)
    assert snapshot is not None
    assert snapshot.time_s == 60.0
    assert snapshot.current_ladders["chat"].gpus_by_pool() == ladder.gpus_by_pool()
    assert {r.replicas for r in snapshot.current_ladders["chat"].ranks} == {1, 2}


def test_no_jobs_no_snapshot(launcher: KubernetesLauncher) -> None:
    assert launcher.koi_snapshot(now=0.0) is None  # another plugin knows the jobs


# -- modes --------------------------------------------------------------------------------------


def test_dry_run_mode_sends_everything_with_dry_run_and_stores_nothing(
    cluster: FakeCluster, api: KubeApi, settings: KubernetesSettings
) -> None:
    launcher = KubernetesLauncher(api, attrs.evolve(settings, mode="dry-run"))
    result = launch(launcher, plan(rank(launcher)))
    patches = apply_patches(cluster)
    assert len(patches) == 2  # the Service and the Deployment
    assert all(q["dryRun"] == "All" and q["fieldManager"] == "koi" for _, q in patches)
    assert cluster.objects == {}
    assert result.materialized == Ladder()
    assert "dry-run: the server accepted 1 of 1 ranks; nothing applied" in result.message


def test_advisory_mode_writes_manifests_and_needs_no_cluster(tmp_path: Path) -> None:
    from koi.catalog import load_catalog

    env = load_catalog().instance("aws", "g6e.12xlarge").environment("us-east-1", "on_demand")
    settings = KubernetesSettings(cloud="aws", mode="advisory", out_dir=tmp_path / "out")
    launcher = KubernetesLauncher(None, settings)
    p = plan(Rank(Chain("Llama-3.1-8B", env, Config(tp=2)), 3))
    result = launch(launcher, p)
    path = tmp_path / "out" / "koi-chat.yaml"
    assert result.materialized == Ladder()
    assert str(path) in result.message
    docs = list(yaml.safe_load_all(path.read_text()))
    assert [d["kind"] for d in docs] == ["Service", "Deployment"]
    assert docs[1]["spec"]["replicas"] == 3


def test_modes_check_their_inputs(tmp_path: Path) -> None:
    from koi.errors import InvalidInput

    with pytest.raises(InvalidInput, match="needs a cluster client"):
        KubernetesLauncher(None, KubernetesSettings(mode="apply"))
    with pytest.raises(InvalidInput, match="needs a folder"):
        KubernetesLauncher(None, KubernetesSettings(mode="advisory"))
    with pytest.raises(InvalidInput, match="mode: must be one of"):
        KubernetesSettings(mode="yolo")


# -- apply ----------------------------------------------------------------------------------------


def test_apply_dry_runs_every_object_first_then_applies_server_side(
    cluster: FakeCluster, launcher: KubernetesLauncher
) -> None:
    r = rank(launcher, replicas=2, tp=2)
    result = launch(launcher, plan(r))
    assert result.complete
    assert result.message.startswith("2 of 2 replicas ready")
    patches = apply_patches(cluster)
    dry = [p for p, q in patches if q.get("dryRun") == "All"]
    real = [p for p, q in patches if "dryRun" not in q]
    assert sorted(dry) == sorted(real)
    assert len(real) == 2
    assert max(patches.index((p, q)) for p, q in patches if "dryRun" in q) < min(
        patches.index((p, q)) for p, q in patches if "dryRun" not in q
    )
    assert all(q["fieldManager"] == "koi" and q["force"] == "false" for _, q in patches)
    dep = cluster.workload(workload_name("chat", r.chain))
    assert dep is not None
    assert dep["spec"]["replicas"] == 2
    limits = dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "2"}
    assert launcher.actions[-1] == f"applied Deployment {workload_name('chat', r.chain)}"


def test_reapplying_the_same_plan_changes_nothing(
    cluster: FakeCluster, launcher: KubernetesLauncher
) -> None:
    p = plan(rank(launcher))
    launch(launcher, p)
    before = {k: dict(v) for k, v in cluster.objects.items()}
    result = launch(launcher, attrs.evolve(p, actions=[attrs.evolve(p.actions[0], kind="keep")]))
    assert result.complete
    assert {k: dict(v) for k, v in cluster.objects.items()} == before


def test_scale_keeps_the_workload_and_changes_replicas(
    cluster: FakeCluster, launcher: KubernetesLauncher
) -> None:
    r = rank(launcher, replicas=1)
    launch(launcher, plan(r))
    result = launch(launcher, plan(attrs.evolve(r, replicas=2), kind="reconfigure"))
    assert result.complete
    deps = [k for k in cluster.objects if k[0] == "deployments"]
    assert len(deps) == 1
    dep = cluster.workload(workload_name("chat", r.chain))
    assert dep is not None
    assert dep["spec"]["replicas"] == 2
    assert dep["metadata"]["generation"] == 2


def test_a_409_conflict_is_reported_and_force_takes_the_field(
    cluster: FakeCluster, api: KubeApi, settings: KubernetesSettings
) -> None:
    launcher = KubernetesLauncher(api, settings)
    r = rank(launcher, replicas=2)
    launch(launcher, plan(r))
    name = workload_name("chat", r.chain)
    cluster.owners[name] = "hpa-controller"  # an autoscaler took spec.replicas over
    result = launch(launcher, plan(attrs.evolve(r, replicas=3), kind="reconfigure"))
    assert "HTTP 409" in result.message
    assert "hpa-controller" in result.message
    assert "force_conflicts=True" in result.message
    # nothing was changed, and what still serves is reported
    assert cluster.workload(name)["spec"]["replicas"] == 2  # type: ignore[index]
    assert result.materialized == Ladder((r,))
    forced = KubernetesLauncher(api, attrs.evolve(settings, force_conflicts=True))
    result = launch(forced, plan(attrs.evolve(r, replicas=3), kind="reconfigure"))
    assert result.complete
    assert cluster.workload(name)["spec"]["replicas"] == 3
    assert all(q["force"] == "true" for _, q in apply_patches(cluster)[-4:])


def test_partial_rollout_one_of_three_ready_is_reported(
    cluster: FakeCluster, launcher: KubernetesLauncher
) -> None:
    r = rank(launcher, replicas=3)
    cluster.ready_cap[workload_name("chat", r.chain)] = 1
    result = launch(launcher, plan(r))
    assert result.materialized == Ladder((attrs.evolve(r, replicas=1),))
    assert "1 of 3 replicas ready after 0.6 s" in result.message


def test_a_partial_launch_reaches_the_planners_ledger(
    cluster: FakeCluster, api: KubeApi, settings: KubernetesSettings
) -> None:
    """A whole tick: snapshot from the cluster, plan, launch; the ledger holds what came up."""
    job = Job(
        id="chat",
        model="Llama-3.1-8B",
        job_class="online",
        workload=WorkloadProfile(
            LengthDist(800, 0.4, 4096), LengthDist(200, 0.4, 1024), rate_rps=120.0
        ),
        target=ServingTarget.online(p99_ttft_ms=1500, p99_tpot_ms=60),
    )
    launcher = KubernetesLauncher(api, attrs.evolve(settings, jobs=(job,)))
    cluster.ready_cap_default = 1  # every workload gets one ready replica, whatever it asked
    planner = Planner(plugins=[launcher])
    result = planner.tick()
    planned = result.plan.ladders["chat"]
    assert not result.fallback
    entries = {chain: e for (j, chain), e in planner.state.ledger.items() if j == "chat"}
    assert set(entries) == {r.chain for r in planned.ranks}
    assert all(e.replicas == 1 for e in entries.values())
    assert planned.replicas > len(planned.ranks), "the plan asked for more than one per rank"
    # and the next snapshot reports the one ready replica per rank as the current ladder
    snapshot = launcher.snapshot(now=300.0)
    assert {r.chain: r.replicas for r in snapshot.current_ladders["chat"].ranks} == dict.fromkeys(
        entries, 1
    )


def test_make_before_break_retires_the_old_rank_once_the_new_one_is_ready(
    cluster: FakeCluster, launcher: KubernetesLauncher
) -> None:
    old = rank(launcher, replicas=2, tp=1)
    launch(launcher, plan(old))
    new = rank(launcher, replicas=1, tp=4)
    result = launch(launcher, plan(new, kind="reconfigure"))
    assert result.complete, result.message
    old_name, new_name = workload_name("chat", old.chain), workload_name("chat", new.chain)
    assert f"retired Deployment {old_name} (scaled to 0)" in result.message
    assert cluster.workload(old_name)["spec"]["replicas"] == 0  # type: ignore[index]
    # order: the new workload was applied and seen ready before the old one was scaled down
    calls = [(m, p, q) for m, p, q in cluster.requests]
    new_ready = max(i for i, (m, p, _) in enumerate(calls) if m == "GET" and p.endswith(new_name))
    old_down = max(i for i, (m, p, q) in enumerate(calls) if m == "PATCH" and p.endswith(old_name))
    assert new_ready < old_down
    # the next launch deletes the retired workload
    launch(launcher, plan(new, kind="keep"))
    assert cluster.workload(old_name) is None
    assert f"deleted Deployment {old_name}" in launcher.actions


def test_the_old_rank_keeps_serving_while_the_new_one_is_not_ready(
    cluster: FakeCluster, launcher: KubernetesLauncher
) -> None:
    old = rank(launcher, replicas=2, tp=1)
    launch(launcher, plan(old))
    new = rank(launcher, replicas=1, tp=4)
    cluster.ready_cap[workload_name("chat", new.chain)] = 0
    result = launch(launcher, plan(new, kind="reconfigure"))
    assert result.materialized == Ladder()
    assert "kept 1 replaced workload(s) running" in result.message
    assert cluster.workload(workload_name("chat", old.chain))["spec"]["replicas"] == 2  # type: ignore[index]


def test_break_before_make_when_the_pool_cannot_hold_both(
    cluster: FakeCluster, launcher: KubernetesLauncher
) -> None:
    old = rank(launcher, replicas=2, tp=4)  # both L40S nodes, 8 GPUs
    launch(launcher, plan(old))
    cluster.pods = [
        {
            "spec": {
                "nodeName": node,
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}],
            },
            "status": {"phase": "Running"},
        }
        for node in ("l40s-a", "l40s-b")
    ]
    new = rank(launcher, replicas=2, tp=2)
    result = launch(launcher, plan(new, kind="reconfigure"))
    assert "break-before-make" in result.message
    assert "has 0 free GPUs, needs 4" in result.message
    old_name, new_name = workload_name("chat", old.chain), workload_name("chat", new.chain)
    patches = [(p, q) for p, q in apply_patches(cluster) if "dryRun" not in q]
    order = [p.rsplit("/", 1)[1] for p, _ in patches]
    assert order.index(old_name, 1) < order.index(new_name)  # old scaled down first
    assert cluster.workload(old_name)["spec"]["replicas"] == 0  # type: ignore[index]


def test_a_stopped_job_is_scaled_to_zero_without_a_result(
    cluster: FakeCluster, launcher: KubernetesLauncher
) -> None:
    r = rank(launcher)
    launch(launcher, plan(r))
    results = launcher.koi_launch(Plan(0.0, [JobAction("chat", ActionKind.STOP)]))
    assert results == []
    assert cluster.workload(workload_name("chat", r.chain))["spec"]["replicas"] == 0  # type: ignore[index]
    assert launcher.koi_launch(Plan(0.0, [JobAction("chat", ActionKind.DEFER)])) == []
    assert cluster.workload(workload_name("chat", r.chain)) is None  # deleted a launch later


def test_multi_node_chain_becomes_a_leaderworkerset(
    cluster: FakeCluster, launcher: KubernetesLauncher
) -> None:
    r = rank(launcher, H100_POOL, replicas=1, model="Llama-3.1-405B", tp=8, pp=2, quant="fp8")
    result = launch(launcher, plan(r))
    assert result.complete, result.message
    lws = cluster.workload(workload_name("chat", r.chain))
    assert lws is not None
    assert lws["kind"] == "LeaderWorkerSet"
    tpl = lws["spec"]["leaderWorkerTemplate"]
    assert tpl["size"] == 2
    leader = tpl["leaderTemplate"]["spec"]["containers"][0]
    assert leader["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert "--pipeline-parallel-size 2" in leader["command"][-1]
    tolerations = tpl["workerTemplate"]["spec"]["tolerations"]
    assert {
        "key": "nvidia.com/gpu",
        "operator": "Equal",
        "value": "present",
        "effect": "NoSchedule",
    } in tolerations


# -- bad input ------------------------------------------------------------------------------------


def test_a_rank_on_an_unknown_pool_is_reported_and_the_rest_launches(
    launcher: KubernetesLauncher,
) -> None:
    good = rank(launcher)
    env = attrs.evolve(good.chain.environment, region="us-west-2")
    bad = Rank(attrs.evolve(good.chain, environment=env), 1)
    result = launch(launcher, plan(good, bad))
    assert result.materialized == Ladder((good,))
    assert "unknown pool 'aws/us-west-2/on_demand/g6e.12xlarge'" in result.message
    assert L40S_POOL in result.message  # the message lists the pools that exist


def test_a_gpu_type_no_node_carries_is_reported(launcher: KubernetesLauncher) -> None:
    from koi.catalog import load_catalog

    env = next(e for e in load_catalog().environments(clouds=["aws"], gpus=["B200"]))
    result = launch(launcher, plan(Rank(Chain("Llama-3.1-8B", env, Config()), 1)))
    assert result.materialized == Ladder()
    assert "no node carries GPU type 'B200'" in result.message
    assert "H100-SXM, L4, L40S" in result.message


def test_an_api_error_is_reported_not_raised(
    cluster: FakeCluster, launcher: KubernetesLauncher
) -> None:
    cluster.failures.append(("PATCH", "/deployments/", 500, "etcdserver: request timed out"))
    result = launch(launcher, plan(rank(launcher)))
    assert result.materialized == Ladder()
    assert "HTTP 500: etcdserver: request timed out" in result.message


def test_an_unreachable_cluster_is_reported_for_every_job(
    cluster: FakeCluster, launcher: KubernetesLauncher
) -> None:
    r = rank(launcher)
    cluster.failures.append(("GET", "/api/v1/nodes", 503, "apiserver is shutting down"))
    p = Plan(0.0, [JobAction("a", "place", Ladder((r,))), JobAction("b", "place", Ladder((r,)))])
    results = launcher.koi_launch(p)
    assert [x.job_id for x in results] == ["a", "b"]
    assert all(x.materialized == Ladder() for x in results)
    assert all("nothing applied: list nodes: HTTP 503" in x.message for x in results)


def test_an_api_timeout_is_reported(
    cluster: FakeCluster, api: KubeApi, settings: KubernetesSettings
) -> None:
    impatient = KubernetesLauncher(KubeApi(api._client, timeout_s=0.3), settings)
    r = rank(impatient)
    cluster.hang.add("/deployments/")
    cluster.hang_s = 1.0  # the client gives up after 0.3 s
    result = launch(impatient, plan(r))
    assert result.materialized == Ladder()
    assert "no answer" in result.message
    assert "timed out" in result.message.lower()


def test_a_missing_leaderworkerset_crd_is_reported(
    cluster: FakeCluster, launcher: KubernetesLauncher
) -> None:
    cluster.lws_installed = False
    r = rank(launcher, H100_POOL, replicas=1, model="Llama-3.1-405B", tp=8, pp=2, quant="fp8")
    result = launch(launcher, plan(r))
    assert result.materialized == Ladder()
    assert "HTTP 404" in result.message


def test_a_chain_too_wide_for_a_single_node_pool_is_reported(launcher: KubernetesLauncher) -> None:
    r = rank(launcher, L40S_POOL, replicas=1, model="Llama-3.1-70B", tp=4, pp=2)
    result = launch(launcher, plan(r))
    assert result.materialized == Ladder()
    assert "does not allow multi-node chains" in result.message


def test_ranks_on_other_clouds_are_left_to_other_launchers(launcher: KubernetesLauncher) -> None:
    r = rank(launcher)
    other = attrs.evolve(r.chain.environment, cloud="gcp")
    p = plan(Rank(attrs.evolve(r.chain, environment=other), 1))
    assert launcher.koi_launch(p) == []


# -- the launcher contract ------------------------------------------------------------------------


class TestKubernetesLauncherContract(LauncherContract):
    @pytest.fixture
    def launcher(self, api: KubeApi, settings: KubernetesSettings) -> KubernetesLauncher:
        return KubernetesLauncher(api, settings)

    @pytest.fixture
    def launch_plan(self, launcher: KubernetesLauncher) -> Plan:
        return Plan(
            0.0,
            [
                JobAction("chat", "place", Ladder((rank(launcher),))),
                JobAction("batch", "place", Ladder((rank(launcher, L4_POOL, replicas=1),))),
                JobAction("idle", "defer"),
            ],
        )

    @pytest.fixture
    def partial_launch_plan(self, cluster: FakeCluster, launcher: KubernetesLauncher) -> Plan:
        r = rank(launcher, replicas=3)
        cluster.ready_cap[workload_name("chat", r.chain)] = 1
        return plan(r)


def test_a_kept_rank_is_looked_at_not_waited_for(
    cluster: FakeCluster, api: KubeApi, settings: KubernetesSettings
) -> None:
    import time

    r = rank(KubernetesLauncher(api, settings), replicas=2)
    cluster.ready_cap[workload_name("chat", r.chain)] = 1
    launch(KubernetesLauncher(api, settings), plan(r))
    patient = KubernetesLauncher(api, attrs.evolve(settings, ready_timeout_s=60.0))
    start = time.monotonic()
    result = launch(patient, plan(r, kind="keep"))
    assert time.monotonic() - start < 30.0  # far below the 60 s it would wait for a new rank
    assert "1 of 2 replicas ready (kept)" in result.message
    assert result.materialized == Ladder((attrs.evolve(r, replicas=1),))


def test_a_recycled_replica_is_its_pod_deleted_and_nothing_else(
    cluster: FakeCluster, launcher: KubernetesLauncher, settings: KubernetesSettings
) -> None:
    r = rank(launcher)
    launch(launcher, plan(r))

    def pod(name: str, job: str, namespace: str = settings.namespace) -> dict[str, object]:
        meta = {"name": name, "namespace": namespace, "labels": {JOB_LABEL: job}}
        return {"metadata": meta, "spec": {}, "status": {"phase": "Running"}}

    cluster.pods = [
        pod("chat-a", "chat"),
        pod("chat-b", "chat"),
        pod("other-a", "other"),  # another job's pod of the same name is not chat's
        pod("chat-c", "chat", namespace="elsewhere"),  # not this launcher's namespace
    ]
    keep = Plan(
        0.0,
        [JobAction("chat", "keep", Ladder((r,)), recycle=("chat-b", "other-a", "chat-c"))],
    )
    result = launch(launcher, keep)
    assert "recycled pod chat-b" in result.message
    names = [p["metadata"]["name"] for p in cluster.pods]  # type: ignore[index]
    assert names == ["chat-a", "other-a", "chat-c"]
    deletes = [path for m, path, _ in cluster.requests if m == "DELETE"]
    assert deletes == [f"/api/v1/namespaces/{settings.namespace}/pods/chat-b"]

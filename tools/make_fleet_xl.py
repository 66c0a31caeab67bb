"""Write the ``fleet-xl`` scenario: about 10,000 GPUs, 300 jobs, 6 hours (run once; kept as TOML).

The jobs are twelve tenants' copies of the 25-job mix of ``hetero-3h`` (read from that file),
at three traffic tiers (×1, ×1.5, ×2.5); four tenants serve premium chat on Llama-3.1-405B
instead of Llama-3.1-70B and three run their agent on Llama-4-Scout instead of Mixtral, so all
12 catalog architectures appear.  Tenant ``k`` arrives ``15·k`` minutes in.  Two rounds of
``hetero-3h``'s events (at 0 h and 3 h) hit three tenants each and the shared pools.

    python tools/make_fleet_xl.py > src/koi/sim/scenarios/fleet-xl.toml
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE.parent / "src" / "koi" / "sim" / "scenarios"

TENANTS = 12
TIERS = (1.0, 1.5, 2.5)
TENANT_STEP_MIN = 15

# (cloud, region, market, instance type, instances, what it is)
POOLS: tuple[tuple[str, str, str, str, int, str], ...] = (
    ("aws", "us-east-1", "on_demand", "p5.48xlarge", 80, "8 x H100-SXM"),
    ("aws", "us-east-1", "spot", "p5.48xlarge", 40, "8 x H100-SXM"),
    ("aws", "us-east-2", "reserved", "p5.48xlarge", 60, "8 x H100-SXM"),
    ("aws", "us-west-2", "on_demand", "p5en.48xlarge", 40, "8 x H200"),
    ("aws", "us-east-1", "reserved", "p6-b200.48xlarge", 30, "8 x B200"),
    ("aws", "us-west-2", "spot", "p6-b200.48xlarge", 20, "8 x B200"),
    ("aws", "us-west-2", "reserved", "p4de.24xlarge", 75, "8 x A100-80GB"),
    ("aws", "us-east-1", "spot", "g6e.12xlarge", 150, "4 x L40S"),
    ("aws", "us-east-1", "on_demand", "g6e.xlarge", 400, "1 x L40S"),
    ("aws", "eu-west-1", "on_demand", "g6e.48xlarge", 25, "8 x L40S"),
    ("aws", "us-east-1", "on_demand", "g6.xlarge", 300, "1 x L4"),
    ("aws", "us-west-2", "spot", "g6.12xlarge", 150, "4 x L4"),
    ("aws", "us-east-1", "on_demand", "g5.12xlarge", 100, "4 x A10G"),
    ("aws", "eu-west-1", "spot", "g5.xlarge", 100, "1 x A10G"),
    ("gcp", "us-central1", "on_demand", "a3-highgpu-8g", 75, "8 x H100-SXM"),
    ("gcp", "us-central1", "spot", "a3-highgpu-1g", 400, "1 x H100-SXM"),
    ("gcp", "us-east4", "spot", "a3-highgpu-4g", 50, "4 x H100-SXM"),
    ("gcp", "us-central1", "spot", "a2-ultragpu-8g", 75, "8 x A100-80GB"),
    ("gcp", "us-central1", "on_demand", "a2-ultragpu-1g", 200, "1 x A100-80GB"),
    ("gcp", "europe-west4", "reserved", "a3-ultragpu-8g", 50, "8 x H200"),
    ("gcp", "us-central1", "on_demand", "g4-standard-384", 50, "8 x RTXPRO6000"),
    ("gcp", "us-central1", "spot", "g2-standard-4", 400, "1 x L4"),
    ("azure", "eastus", "on_demand", "Standard_ND96isr_MI300X_v5", 40, "8 x MI300X"),
    ("azure", "eastus", "reserved", "Standard_ND96isr_MI300X_v5", 10, "8 x MI300X"),
    ("azure", "eastus", "spot", "Standard_ND96amsr_A100_v4", 25, "8 x A100-80GB"),
    ("azure", "westeurope", "reserved", "Standard_ND96isr_H100_v5", 40, "8 x H100-SXM"),
    ("onprem", "dc1", "reserved", "onprem-hgx-h100-8", 30, "8 x H100-SXM"),
    ("onprem", "dc1", "reserved", "onprem-rtxpro6000-8", 10, "8 x RTXPRO6000"),
    ("onprem", "dc1", "reserved", "onprem-l40s-4", 50, "4 x L40S"),
    ("onprem", "dc1", "reserved", "onprem-l4-8", 25, "8 x L4"),
)


def _gpus(what: str) -> int:
    return int(what.split(" x ")[0])


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, float):
        return f"{round(v, 3):g}"
    return str(v)


def _table(name: str, fields: dict[str, Any], comment: str = "") -> list[str]:
    lines = [f"[[{name}]]"]
    for k, v in fields.items():
        note = f"   # {comment}" if comment and k == "id" else ""
        lines.append(f"{k} = {_value(v)}{note}")
    return [*lines, ""]


def _job(base: dict[str, Any], tenant: int) -> tuple[dict[str, Any], str]:
    job = dict(base)
    scale = TIERS[tenant % len(TIERS)]
    name = job["id"]
    if name == "chat-70b" and tenant % 4 == 3:
        name = "chat-405b"
        job.update(model="Llama-3.1-405B", p99_ttft_ms=3000, p99_tpot_ms=100)
    if name == "agent-mixtral" and tenant % 4 == 1:
        name = "agent-scout"
        job["model"] = "Llama-4-Scout-17B-16E"
    job["id"] = f"{name}-t{tenant:02d}"
    job["tenant"] = f"t{tenant:02d}"
    job["arrival_min"] = job.get("arrival_min", 0) + TENANT_STEP_MIN * tenant
    if "rate_rps" in job:
        job["rate_rps"] = round(job["rate_rps"] * scale, 3)
    if "requests" in job:
        job["requests"] = int(job["requests"] * scale)
    order = ["id", "model", "class", "tenant", "priority", "arrival_min"]
    ordered = {k: job[k] for k in order if k in job}
    ordered.update({k: v for k, v in job.items() if k not in ordered})
    return ordered, f"tenant {tenant}, traffic x{scale:g}"


def _events() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for rnd, (start, tenants) in enumerate(((0, (0, 1, 2)), (180, (4, 5, 6)))):
        for k, t in enumerate(tenants):
            # In the first round a tenant's events follow its arrival; by the second round
            # every targeted job is there, so they only stagger.
            shift = start + (TENANT_STEP_MIN * t if rnd == 0 else 5 * k)
            sfx = f"-t{t:02d}"
            events += [
                {"at_min": 30 + shift, "kind": "degrade", "job": "chat-70b" + sfx, "slow": 2.5},
                {
                    "at_min": 100 + shift,
                    "kind": "workload_drift",
                    "job": "chat-8b" + sfx,
                    "rate_scale": 1.5,
                },
                {
                    "at_min": 120 + shift,
                    "kind": "workload_drift",
                    "job": "agent-qwen30b" + sfx,
                    "output_scale": 1.4,
                },
                {
                    "at_min": 165 + shift,
                    "kind": "workload_drift",
                    "job": "summ-70b" + sfx,
                    "input_scale": 1.2,
                },
            ]
        events += [
            {
                "at_min": 50 + start,
                "kind": "preemption",
                "pool": "aws/us-east-1/spot/p5.48xlarge",
                "instances": 5,
                "notice": False,
            },
            {
                "at_min": 60 + start,
                "kind": "driver_update",
                "gpu": "L40S" if rnd == 0 else "A100-80GB",
            },
            {
                "at_min": 80 + start,
                "kind": "pool_change",
                "pool": "gcp/us-central1/spot/a3-highgpu-1g",
                "instances": 200,
            },
            {
                "at_min": 140 + start,
                "kind": "pool_change",
                "pool": "gcp/us-central1/spot/a3-highgpu-1g",
                "instances": 400,
            },
            {
                "at_min": 150 + start,
                "kind": "driver_update",
                "gpu": "H100-SXM" if rnd == 0 else "B200",
                "engine": "vllm",
                "speed": 0.8 if rnd == 0 else 0.9,
            },
        ]
    return sorted(events, key=lambda e: e["at_min"])


def main() -> None:
    base = tomllib.loads((SCENARIOS / "hetero-3h.toml").read_text())
    gpus = sum(n * _gpus(what) for *_, n, what in POOLS)
    jobs = [_job(j, t) for t in range(TENANTS) for j in base["jobs"]]
    online = sum(j["class"] == "online" for j, _ in jobs)
    models = {j["model"] for j, _ in jobs}
    desc = (
        f"6 h, {gpus:,} GPUs over aws/gcp/azure/onprem, 9 GPU types, 3 markets; "
        f"{len(jobs)} jobs ({online} online, {len(jobs) - online} batch) over "
        f"{len(models)} architectures, 12 tenants"
    )
    out = [
        f"# fleet-xl: {desc}",
        "# Written by tools/make_fleet_xl.py from hetero-3h's job mix; see docs/scenarios.md.",
        "",
        "[scenario]",
        'name = "fleet-xl"',
        f'description = "{desc}"',
        "duration_h = 6",
        "tick_s = 300",
        "",
    ]
    for cloud, region, market, itype, n, what in POOLS:
        out += [
            "[[pools]]",
            f'cloud = "{cloud}"',
            f'region = "{region}"',
            f'market = "{market}"',
            f'instance_type = "{itype}"   # {what}',
            f"instances = {n}",
            "",
        ]
    for job, note in jobs:
        out += _table("jobs", job, note)
    for event in _events():
        out += _table("events", event)
    sys.stdout.write("\n".join(out).rstrip("\n") + "\n")


if __name__ == "__main__":
    main()

"""``koi render PLAN.json --target k8s|skypilot --out DIR``: a plan as manifests, for GitOps."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import attrs

from koi.errors import InvalidInput

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "render",
        help="write the manifests of a plan (Kubernetes or SkyServe)",
        description=(
            "Turn PLAN.json (the output of `koi plan --json`, or a koi.types.Plan as JSON; "
            "'-' reads standard input) into manifests in DIR: for --target k8s one YAML file "
            "per job (its Service and one Deployment or LeaderWorkerSet per rank), for "
            "--target skypilot one SkyServe service YAML per rank. Nothing is applied. A rank "
            "that cannot be rendered (among them a rank whose precision is outside the job's "
            "`precisions` in the plan JSON) is named on stderr and the exit code is 1; the "
            "other files are still written."
        ),
    )
    p.add_argument("plan", metavar="PLAN.json", help="plan JSON file, or - for stdin")
    p.add_argument("--target", required=True, choices=("k8s", "skypilot"))
    p.add_argument("--out", required=True, type=Path, metavar="DIR")
    p.add_argument(
        "--clouds",
        default=None,
        help="comma-separated koi clouds to render (default: all for k8s; aws,azure,gcp for "
        "skypilot)",
    )
    p.add_argument("--namespace", default="default", help="Kubernetes namespace (k8s)")
    p.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="ENGINE=IMAGE",
        help="container image of an engine, e.g. vllm=vllm/vllm-openai:v0.11.0 (repeatable)",
    )
    p.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="MODEL=REPO",
        help="checkpoint a model serves, e.g. Llama-3.1-8B=meta-llama/Llama-3.1-8B-Instruct; "
        "MODEL@int4=REPO for a quantized one (repeatable)",
    )
    p.add_argument(
        "--fallback-tolerance",
        type=float,
        default=None,
        metavar="F",
        help="skypilot: allow other regions/clouds at most F (0.1 = 10%%) pricier (any_of)",
    )
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(handler=_run)


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise InvalidInput(f"{flag}: expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def _read(source: str) -> tuple[Any, str]:
    from koi.types import parse_json

    where = "<stdin>" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"{where}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        msg = f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        raise InvalidInput(msg) from None
    return parse_json(text, where=where), where


def _precisions(data: Any) -> dict[str, Any]:
    """Each job's accepted precisions as ``koi plan --json`` lists them (jobs without: none)."""
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, list):
        return {}
    return {
        j["job_id"]: j["precisions"]
        for j in jobs
        if isinstance(j, dict) and isinstance(j.get("job_id"), str) and "precisions" in j
    }


def _run(args: argparse.Namespace) -> int:
    from koi.catalog import load_catalog
    from koi.integrations.engine import EngineSettings, service_name
    from koi.integrations.render import ranks_on, read_plan, to_yaml, write_files

    data, where = _read(args.plan)
    plan = read_plan(data, where=where)
    checkpoints = _pairs(args.checkpoint, "--checkpoint")
    try:
        engine = EngineSettings(checkpoints=checkpoints, precisions=_precisions(data))
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: jobs: {exc}") from None
    images = _pairs(args.image, "--image")
    if images:
        engine = attrs.evolve(engine, images={**engine.images, **images})
    clouds = args.clouds.split(",") if args.clouds else None
    files: dict[str, str] = {}
    failed: list[str] = []
    left_out: list[str] = []
    if args.target == "k8s":
        from koi.integrations.kubernetes import KubernetesSettings, render_rank, render_service

        k8s = KubernetesSettings(namespace=args.namespace, engine=engine)
        for job_id, ladder in sorted(plan.ladders.items()):
            mine = ranks_on(ladder, clouds)
            objs = []
            for rank in mine.ranks:
                try:
                    objs.append(render_rank(job_id, rank, k8s))
                except InvalidInput as exc:
                    failed.append(f"{job_id}: {rank.chain.environment.id}: {exc}")
            if objs:
                files[f"{service_name(job_id)}.yaml"] = to_yaml(
                    [render_service(job_id, k8s), *objs]
                )
    else:
        from koi.integrations.skypilot import (
            SkyPilotSettings,
            owned_ranks,
            render_service_config,
            service_names,
        )

        sky = SkyPilotSettings(engine=engine, fallback_price_tolerance=args.fallback_tolerance)
        if clouds is not None:
            sky = attrs.evolve(sky, clouds=tuple(clouds))
        catalog = load_catalog()
        for job_id, ladder in sorted(plan.ladders.items()):
            owned = owned_ranks(ladder, sky)
            left_out += [
                f"{job_id}: {r.chain.environment.id} (cloud not in {','.join(sky.clouds)})"
                for r in ladder.ranks
                if r not in owned
            ]
            for rank, name in zip(owned, service_names(job_id, owned), strict=True):
                try:
                    cfg = render_service_config(job_id, rank, sky, catalog, name=name)
                except InvalidInput as exc:
                    failed.append(f"{job_id}: {rank.chain.environment.id}: {exc}")
                    continue
                files[f"{name}.yaml"] = to_yaml([cfg])
    paths = write_files(files, args.out)
    if args.json:
        out = {
            "files": [str(p) for p in paths],
            "failed": failed,
            "left_out": left_out,
        }
        print(json.dumps(out, indent=2))
    else:
        for path in paths:
            print(path)
        for item in left_out:
            print(f"left out: {item}")
    for item in failed:
        print(f"koi: cannot render {item}", file=sys.stderr)
    return 1 if failed else 0

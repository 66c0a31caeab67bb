"""Offline schema checks of rendered manifests: kubernetes-validate (strict) and the LWS API."""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
from kubernetes_validate.utils import all_versions
from referencing import Registry, Resource

LWS_SCHEMA = Path(__file__).parent / "data" / "leaderworkerset-v1.schema.json"

#: every Kubernetes minor version from 1.30 that kubernetes-validate ships schemas for
VERSIONS = tuple(
    sorted(
        {
            v.rsplit(".", 1)[0]
            for v in all_versions()
            if tuple(map(int, v.split(".")[:2])) >= (1, 30)
        },
        key=lambda v: tuple(map(int, v.split("."))),
    )
)


@functools.cache
def _lws_validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(LWS_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@functools.cache
def _strict_validator(version: str, kind: str, api_version: str) -> jsonschema.Validator:
    """kubernetes-validate's strict schema for one kind, loaded once (its own way)."""
    base = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    folder = base / f"v{version}.0-local-strict"
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = json.loads((folder / f"{kind.lower()}-{api}.json").read_text(encoding="utf-8"))
    defs = json.loads((folder / "_definitions.json").read_text(encoding="utf-8"))
    registry = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(defs) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    tpl = obj["spec"]["leaderWorkerTemplate"]
    out = [tpl["workerTemplate"]]
    if "leaderTemplate" in tpl:
        out.append(tpl["leaderTemplate"])
    return [
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": obj["metadata"], "template": t}
        for t in out
    ]


def validate(obj: dict[str, Any], version: str, *, fast: bool = False) -> None:
    """Raise if ``obj`` is not a valid object of Kubernetes ``version`` (strict).

    A LeaderWorkerSet is checked against the LWS v1 schema (jsonschema) and its pod templates
    and metadata against Kubernetes' own PodTemplate schema.  ``fast`` uses cached
    validators built from kubernetes-validate's files (for the fake API server's hot path);
    otherwise ``kubernetes_validate.validate`` itself runs.
    """
    if obj.get("kind") == "LeaderWorkerSet":
        _lws_validator().validate(obj)
        for pt in _pod_templates(obj):
            validate(pt, version, fast=fast)
        return
    if fast:
        _strict_validator(version, obj["kind"], obj["apiVersion"]).validate(obj)
    else:
        kubernetes_validate.validate(obj, version, strict=True)


def warm_up(version: str = "1.30") -> None:
    """Build the cached validators the fake API server uses."""
    _lws_validator()
    for kind, api in (("Deployment", "apps/v1"), ("Service", "v1"), ("PodTemplate", "v1")):
        _strict_validator(version, kind, api)

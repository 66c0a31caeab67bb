"""From koi ranks to the label values of their engines' series."""

from __future__ import annotations

import fnmatch
import re
import string
from collections.abc import Mapping

import attrs

from koi.errors import InvalidInput
from koi.types import Chain

__all__ = ["PLACEHOLDERS", "RankRule", "placeholders"]

#: the placeholders a label template may use
PLACEHOLDERS = (
    "job",
    "model",
    "served_model",
    "pool",
    "pool_slug",
    "cloud",
    "region",
    "market",
    "instance_type",
    "gpu",
    "engine",
    "tp",
    "pp",
    "quant",
)


def _slug(text: str) -> str:
    """A Kubernetes-label-safe spelling: lower case, runs of other characters as ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def placeholders(job_id: str, chain: Chain, served_model: str) -> dict[str, str]:
    """The values of :data:`PLACEHOLDERS` for one rank of ``job_id``."""
    env, cfg = chain.environment, chain.config
    return {
        "job": job_id,
        "model": chain.model,
        "served_model": served_model,
        "pool": env.id,
        "pool_slug": _slug(env.id),
        "cloud": env.cloud,
        "region": env.region,
        "market": env.market.value,
        "instance_type": env.instance_type,
        "gpu": env.gpu,
        "engine": cfg.engine,
        "tp": str(cfg.tp),
        "pp": str(cfg.pp),
        "quant": cfg.quant.value,
    }


def _labels(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping) or not value:
        raise InvalidInput(f"labels: must be a non-empty table of label = template, got {value!r}")
    out = {}
    for key, template in value.items():
        if not isinstance(key, str) or not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", key):
            raise InvalidInput(f"labels: {key!r} is not a Prometheus label name")
        if not isinstance(template, str):
            raise InvalidInput(f"labels.{key}: must be a string, got {template!r}")
        for _, field, _, _ in string.Formatter().parse(template):
            if field is not None and field not in PLACEHOLDERS:
                known = ", ".join(PLACEHOLDERS)
                raise InvalidInput(
                    f"labels.{key}: unknown placeholder {{{field}}} (known: {known})"
                )
        out[key] = template
    return out


def _pattern(_inst: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{attribute.name}: must be a non-empty glob pattern, got {value!r}")


@attrs.frozen
class RankRule:
    """One line of the mapping from koi ranks to engine series.

    A rank matches when its job id, pool id, GPU type and engine match the glob patterns
    (``*`` by default); the first matching rule gives the rank's ``labels``: label name ->
    value template over :data:`PLACEHOLDERS`, e.g. ``{"namespace": "llm", "deployment":
    "{job}-{gpu}"}`` (wrap a literal brace as ``{{``).  The series whose labels equal every
    rendered value are that rank's, summed over any other label (replicas, engines, le).

    .. versionadded:: 0.1
    """

    labels: Mapping[str, str] = attrs.field(converter=_labels, hash=False)
    job: str = attrs.field(default="*", validator=_pattern)
    pool: str = attrs.field(default="*", validator=_pattern)
    gpu: str = attrs.field(default="*", validator=_pattern)
    engine: str = attrs.field(default="*", validator=_pattern)

    def matches(self, job_id: str, chain: Chain) -> bool:
        return (
            fnmatch.fnmatchcase(job_id, self.job)
            and fnmatch.fnmatchcase(chain.environment.id, self.pool)
            and fnmatch.fnmatchcase(chain.environment.gpu, self.gpu)
            and fnmatch.fnmatchcase(chain.config.engine, self.engine)
        )

    def render(self, values: Mapping[str, str]) -> dict[str, str]:
        return {k: t.format_map(values) for k, t in self.labels.items()}

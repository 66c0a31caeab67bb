"""SkyServe service YAML for one rank, and the SkyPilot launcher's settings."""

from __future__ import annotations

import hashlib
import shlex
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from koi.catalog import Catalog
from koi.errors import InvalidInput
from koi.integrations.engine import (
    EngineSettings,
    chain_key,
    check_precision,
    dns_label,
    engine_command,
)
from koi.integrations.render import LaunchMode, to_mode
from koi.types import Chain, Environment, Ladder, Market, Rank
from koi.types.validators import non_negative, optional, positive, to_tuple

__all__ = [
    "SkyPilotSettings",
    "owned_ranks",
    "render_service_config",
    "serve_name",
    "service_names",
]


def _str_map(value: Mapping[str, str]) -> Mapping[str, str]:
    return types.MappingProxyType({str(k): str(v) for k, v in dict(value).items()})


@attrs.frozen
class SkyPilotSettings:
    """How koi's ranks become SkyServe services.

    ``clouds`` are the koi clouds this launcher owns (ranks elsewhere are another launcher's);
    ``sky_clouds`` maps them to SkyPilot's cloud names and ``accelerators`` koi GPU names to
    SkyPilot's accelerator names.  ``fallback_price_tolerance`` turns on fallbacks: a rank
    may also come up in another region or cloud that sells the same GPU count in the same
    market for at most that much more than the plan priced (``0.1`` = 10 %), listed in
    ``resources.any_of``; ``None`` pins every rank to its planned region.
    ``update_mode`` is SkyServe's update mode (``blue_green`` is make-before-break).

    .. versionadded:: 0.1
    """

    clouds: tuple[str, ...] = attrs.field(default=("aws", "azure", "gcp"), converter=to_tuple)
    mode: LaunchMode = attrs.field(default=LaunchMode.APPLY, converter=to_mode)
    out_dir: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    engine: EngineSettings = attrs.field(factory=EngineSettings)
    sky_clouds: Mapping[str, str] = attrs.field(
        factory=lambda: {"aws": "aws", "azure": "azure", "gcp": "gcp"},
        converter=_str_map,
        hash=False,
    )
    accelerators: Mapping[str, str] = attrs.field(
        factory=lambda: {
            "H100-SXM": "H100",
            "H200": "H200",
            "B200": "B200",
            "A100-80GB": "A100-80GB",
            "L40S": "L40S",
            "L4": "L4",
            "A10G": "A10G",
            "RTXPRO6000": "RTXPRO6000",
            "MI300X": "MI300X",
        },
        converter=_str_map,
        hash=False,
    )
    fallback_price_tolerance: float | None = attrs.field(
        default=None, validator=optional(non_negative)
    )
    update_mode: str = attrs.field(
        default="blue_green", validator=attrs.validators.in_(("blue_green", "rolling"))
    )
    #: bound of one launch's wait for ready replicas, and the status poll period
    ready_timeout_s: float = attrs.field(default=1800.0, validator=non_negative)
    poll_interval_s: float = attrs.field(default=15.0, validator=positive)


def serve_name(job_id: str, chain: Chain, *, index: int = 0) -> str:
    """The SkyServe service of one rank: one per job, pool and model.

    A config change on the same pool keeps the name, so it goes out as ``sky serve update``;
    a move to another pool is a new service.  ``index`` separates two ranks of one job that
    share pool and model.
    """
    env = chain.environment
    key = f"{job_id}|{env.id}|{chain.model}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:6]
    suffix = f"-{index + 1}" if index else ""
    return f"koi-{dns_label(job_id, max_len=18)}-{digest}{suffix}"


def _infra(env: Environment, settings: SkyPilotSettings) -> str:
    cloud = settings.sky_clouds.get(env.cloud)
    if cloud is None:
        known = ", ".join(sorted(settings.sky_clouds))
        msg = f"cloud {env.cloud!r} has no SkyPilot name (SkyPilotSettings.sky_clouds: {known})"
        raise InvalidInput(msg)
    return f"{cloud}/{env.region}"


def _fallbacks(env: Environment, catalog: Catalog, settings: SkyPilotSettings) -> list[Environment]:
    tol = settings.fallback_price_tolerance
    if tol is None:
        return []
    limit = env.price_usd_per_h * (1.0 + tol)
    out = []
    for e in catalog.environments(gpus=[env.gpu], markets=[env.market]):
        if (
            e.id != env.id
            and e.cloud in settings.clouds
            and e.cloud in settings.sky_clouds
            and e.gpus_per_instance == env.gpus_per_instance
            and e.price_usd_per_h <= limit
        ):
            out.append(e)
    return out


def render_service_config(
    job_id: str,
    rank: Rank,
    settings: SkyPilotSettings,
    catalog: Catalog,
    *,
    name: str | None = None,
) -> dict[str, Any]:
    """The SkyServe service YAML (as data) that runs ``rank``: resources, service, run.

    A rank whose precision the job's owner does not accept (``settings.engine.precisions``)
    is refused with ``InvalidInput``.
    """
    chain = rank.chain
    check_precision(job_id, chain, settings.engine.precisions)
    env = chain.environment
    if chain.gpus > env.gpus_per_instance:
        msg = (
            f"chain of {chain.model} spans {-(-chain.gpus // env.gpus_per_instance)} instances of "
            f"{env.id}: koi renders SkyServe replicas on one node; serve it with the "
            "Kubernetes launcher (LeaderWorkerSet) instead"
        )
        raise InvalidInput(msg)
    if env.gpu not in settings.accelerators:
        msg = f"GPU {env.gpu!r} has no SkyPilot accelerator name (SkyPilotSettings.accelerators)"
        raise InvalidInput(msg)
    command = engine_command(chain, settings.engine)
    resources: dict[str, Any] = {
        "accelerators": f"{settings.accelerators[env.gpu]}:{chain.gpus}",
        "use_spot": env.market is Market.SPOT,
        "ports": settings.engine.port,
        "image_id": f"docker:{settings.engine.image(chain.config.engine)}",
    }
    alternatives = _fallbacks(env, catalog, settings)
    if alternatives:
        resources["any_of"] = [{"infra": _infra(e, settings)} for e in (env, *alternatives)]
    else:
        resources["infra"] = _infra(env, settings)
    eng = settings.engine
    return {
        "name": name or serve_name(job_id, chain),
        "resources": resources,
        "service": {
            "readiness_probe": {
                "path": eng.health_path,
                "initial_delay_seconds": eng.startup_timeout_s,
            },
            "replica_policy": {"min_replicas": rank.replicas, "max_replicas": rank.replicas},
        },
        "run": shlex.join(command) + "\n",
    }


def service_names(job_id: str, ranks: Sequence[Rank]) -> list[str]:
    """Service names of a job's ranks, in order; ranks sharing pool and model get indices."""
    seen: dict[str, int] = {}
    out = []
    for r in ranks:
        base = serve_name(job_id, r.chain)
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.append(serve_name(job_id, r.chain, index=k))
    return out


def owned_ranks(ladder: Ladder, settings: SkyPilotSettings) -> list[Rank]:
    """The ranks of ``ladder`` on the clouds SkyPilot owns, in a stable order (for naming)."""
    ranks = [r for r in ladder.ranks if r.chain.environment.cloud in settings.clouds]
    return sorted(ranks, key=lambda r: chain_key(r.chain))

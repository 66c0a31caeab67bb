"""SkyPilot / SkyServe launcher (optional extra ``koi[skypilot]``).

Each rank of a ladder becomes one SkyServe service: ``resources`` ask for the chain's GPUs
(``accelerators: L40S:4``) in the planned cloud and region (``infra``), on spot when the pool
is spot, with an ``any_of`` list of equivalent regions when fallbacks are allowed; ``service``
carries the readiness probe and a fixed replica policy; ``run`` is the engine command line.
In ``apply`` mode the launcher calls ``sky serve up`` for a new service and ``sky serve
update`` (blue-green: make-before-break) for an existing one, waits a bounded time for READY
replicas and reports per rank what came up.  Rendering needs no SkyPilot install.

.. versionadded:: 0.1
"""

from __future__ import annotations

from koi.integrations.skypilot._launcher import ServiceState, SkyPilotLauncher, service_states
from koi.integrations.skypilot._render import (
    SkyPilotSettings,
    owned_ranks,
    render_service_config,
    serve_name,
    service_names,
)

__all__ = [
    "ServiceState",
    "SkyPilotLauncher",
    "SkyPilotSettings",
    "owned_ranks",
    "render_service_config",
    "serve_name",
    "service_names",
    "service_states",
]

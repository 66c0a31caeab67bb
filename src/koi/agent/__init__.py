"""``koi agent``: the production control loop over the plugins a config file names.

Every ``tick_s`` the agent takes the snapshot (``koi_snapshot``), collects telemetry
(``koi_collect_telemetry``), plans, launches (``koi_launch``, not in ``--dry-run``) and
checkpoints the planner state.  It logs one JSON object per line and serves ``/metrics``
(Prometheus text format), ``/healthz`` and ``/status`` on ``127.0.0.1``::

    koi agent --config examples/sim-agent.toml       # the simulated fleet as the fleet
    curl -s 127.0.0.1:9464/metrics | grep koi_agent_

See ``docs/operations.md`` for the file format and for running it next to Prometheus.
Needs the ``agent`` extra (``prometheus-client``).
"""

from __future__ import annotations

from koi.agent._config import AgentConfig, PluginSpec, load_config, load_plugin, parse_config
from koi.agent._log import JsonLog
from koi.agent._loop import Abandoned, Agent
from koi.agent._sim import SimulatedFleet

__all__ = [
    "Abandoned",
    "Agent",
    "AgentConfig",
    "JsonLog",
    "PluginSpec",
    "SimulatedFleet",
    "load_config",
    "load_plugin",
    "parse_config",
]

"""Prometheus telemetry for koi: vLLM, SGLang and TensorRT-LLM metrics as koi observations.

Standard-library HTTP only (extra ``koi[prometheus]`` needs nothing)::

    from koi.integrations.prometheus import PrometheusTelemetry
    from koi.planner import Planner

    source = PrometheusTelemetry(
        "http://prometheus.monitoring:9090",
        selector='namespace="llm"',
        rules=[{"labels": {"namespace": "llm", "deployment": "{job}-{pool_slug}"}}],
    )
    planner = Planner(plugins=[my_fleet, source], state_path="koi-state.json")

Each tick the plugin asks Prometheus, at the window's end, for the rates of the engines'
latency histograms summed by ``le`` and by the labels that identify a rank, the generated-token
counter, the KV-cache, running and waiting gauges and the preemption counter (those an engine
exports: TensorRT-LLM has the latency histograms only), and turns them into one
:class:`~koi.types.Observation` per rank.  See ``docs/operations.md`` for the metric mapping
and for how bucket layout limits p99 accuracy near an SLO bound.
"""

from __future__ import annotations

from koi.integrations.prometheus._api import PrometheusApi, PrometheusError, Sample, Unreachable
from koi.integrations.prometheus._families import ENGINES, EngineMetrics
from koi.integrations.prometheus._histogram import QuantileEstimate, histogram_quantile
from koi.integrations.prometheus._mapping import PLACEHOLDERS, RankRule, placeholders
from koi.integrations.prometheus._plugin import EngineWindow, PrometheusTelemetry

__all__ = [
    "ENGINES",
    "PLACEHOLDERS",
    "EngineMetrics",
    "EngineWindow",
    "PrometheusApi",
    "PrometheusError",
    "PrometheusTelemetry",
    "QuantileEstimate",
    "RankRule",
    "Sample",
    "Unreachable",
    "histogram_quantile",
    "placeholders",
]

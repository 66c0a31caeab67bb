"""The Prometheus telemetry plugin: vLLM, SGLang and TensorRT-LLM metrics -> koi observations.

Longer than most modules: the plugin's settings, the per-rank window and the fetcher that
runs one collection's queries under its time budget are one path from PromQL series to an
observation, and the missing-versus-zero rules must read the same at every step of it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.integrations.prometheus._api import PrometheusApi, PrometheusError, Sample, Unreachable
from koi.integrations.prometheus._families import ENGINES, EngineMetrics
from koi.integrations.prometheus._histogram import QuantileEstimate, histogram_quantile
from koi.integrations.prometheus._mapping import RankRule, placeholders
from koi.plugins import hookimpl
from koi.types import Mediator, Mediators, Observation, Outcome, Outcomes, Rank, Resolution

__all__ = ["EngineWindow", "PrometheusTelemetry"]

log = logging.getLogger("koi.integrations.prometheus")

_HISTOGRAMS = ("ttft", "itl", "e2e", "request_tpot")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@attrs.frozen
class EngineWindow:
    """Everything the plugin read for one rank over one window, before it becomes an
    :class:`~koi.types.Observation`.

    ``latency_ms`` maps ``"p50_ttft"``, ``"p99_ttft"``, ``"p50_itl"``, ``"p99_itl"``,
    ``"p50_e2e"``, ``"p99_e2e"``, ``"p50_request_tpot"``, ``"p99_request_tpot"`` to the estimate
    and the bucket it lies in (milliseconds); absent keys were not measured, and so are the
    ``None`` fields.  Gauges are means over the window and over the rank's replicas;
    ``preemptions_per_s`` is per replica.  ``prefix_hit_rate`` is the share of prompt tokens
    served from the prefix cache: hits over queries of the engine's counters, else its hit-rate
    gauge.  ``notes`` say what was dropped and why.  ``replica_tpot_ms`` is each replica's
    median TPOT (by its ``replica_label``), from the same histogram as the p99 TPOT, for the
    replicas with at least ``PrometheusTelemetry.min_replica_requests`` in the window.

    .. versionadded:: 0.1
    """

    job_id: str
    rank: Rank
    start_s: float
    end_s: float
    replicas_up: int
    requests: int | None
    completed: int | None
    latency_ms: Mapping[str, QuantileEstimate] = attrs.field(hash=False)
    throughput_tok_s: float | None
    kv_cache_util: float | None
    running: float | None
    waiting: float | None
    preemptions_per_s: float | None
    notes: tuple[str, ...] = ()
    prefix_hit_rate: float | None = None
    replica_tpot_ms: tuple[tuple[str, float], ...] = ()

    @property
    def tpot(self) -> tuple[str, QuantileEstimate] | None:
        """The p99 TPOT koi learns from: per-request TPOT where the engine has it, else the
        inter-token latency (``(source, estimate)``)."""
        for source in ("request_tpot", "itl"):
            est = self.latency_ms.get(f"p99_{source}")
            if est is not None:
                return source, est
        return None

    def observation(self) -> Observation | None:
        """The koi observation, or ``None`` without a request count (nothing to learn from)."""
        if self.requests is None:
            return None
        missing: set[str] = set()
        resolution: list[Resolution] = []

        def latency(name: str, est: QuantileEstimate | None) -> float:
            if est is None:
                missing.add(name)
                return 0.0
            if est.high > est.low:
                resolution.append(Resolution(name, est.low, est.high))
            return est.value

        ttft = latency(Outcome.TTFT.value, self.latency_ms.get("p99_ttft"))
        tpot_pick = self.tpot
        tpot = latency(Outcome.TPOT.value, tpot_pick[1] if tpot_pick else None)

        def value(name: str, x: float | None) -> float:
            if x is None:
                missing.add(name)
                return 0.0
            return x

        tput = value(Outcome.THROUGHPUT.value, self.throughput_tok_s)
        if self.throughput_tok_s is not None and self.throughput_tok_s > 0:
            price = self.rank.chain.price_usd_per_h * max(self.replicas_up, 1)
            cost = price / 3600.0 / self.throughput_tok_s * 1e6
        else:
            cost = value(Outcome.COST.value, None)
        missing.add(Outcome.SLO_MARGIN.value)  # needs the job's targets: the planner's business
        mediators = Mediators(
            kv_cache_util=value(Mediator.KV_CACHE_UTIL.value, self.kv_cache_util),
            mean_batch_size=value(Mediator.MEAN_BATCH.value, self.running),
            queue_depth=value(Mediator.QUEUE_DEPTH.value, self.waiting),
            mem_bw_util=0.0,
            compute_util=0.0,
            comm_share=0.0,
            bubble_fraction=0.0,
            preemption_rate=value(Mediator.PREEMPTION_RATE.value, self.preemptions_per_s),
            prefill_share=0.0,
            memory_pressure=0.0,
            prefix_hit_rate=value(Mediator.PREFIX_HIT_RATE.value, self.prefix_hit_rate),
        )
        # Engines do not export these; a profiler or DCGM source may add them.
        missing.update(
            m.value
            for m in (
                Mediator.MEM_BW_UTIL,
                Mediator.COMPUTE_UTIL,
                Mediator.COMM_SHARE,
                Mediator.BUBBLE_FRACTION,
                Mediator.PREFILL_SHARE,
                Mediator.MEMORY_PRESSURE,
            )
        )
        return Observation(
            job_id=self.job_id,
            chain=self.rank.chain,
            start_s=self.start_s,
            end_s=self.end_s,
            requests=self.requests,
            completed=self.completed if self.completed is not None else self.requests,
            replicas_up=self.replicas_up,
            outcomes=Outcomes(
                cost_per_mtok_usd=cost,
                p99_ttft_ms=ttft,
                p99_tpot_ms=tpot,
                throughput_tok_s=tput,
                slo_margin=0.0,
            ),
            mediators=mediators,
            healthy=self.replicas_up >= self.rank.replicas,
            missing=missing,
            resolution=resolution,
            replica_tpot_ms=self.replica_tpot_ms,
        )


def _rules(value: object) -> tuple[RankRule, ...]:
    if value is None:
        return (RankRule(labels={"model_name": "{served_model}"}),)
    if isinstance(value, Mapping | str) or not isinstance(value, Iterable):
        raise InvalidInput(f"rules: must be a list of rules, got {value!r}")
    out = []
    for k, item in enumerate(value):
        if isinstance(item, RankRule):
            out.append(item)
            continue
        if not isinstance(item, Mapping):
            raise InvalidInput(f"rules[{k}]: must be a table, got {item!r}")
        unknown = sorted(set(item) - {"labels", "job", "pool", "gpu", "engine"})
        if unknown:
            raise InvalidInput(f"rules[{k}]: unknown key(s) {unknown}")
        try:
            out.append(RankRule(**item))
        except InvalidInput as exc:
            raise InvalidInput(f"rules[{k}].{exc}") from None
        except TypeError as exc:
            raise InvalidInput(f"rules[{k}]: {exc}") from None
    if not out:
        raise InvalidInput("rules: at least one rule is needed")
    return tuple(out)


def _selector(text: str) -> str:
    text = text.strip().strip(",")
    if "{" in text or "}" in text:
        raise InvalidInput(f'selector: give bare matchers such as namespace="llm", got {text!r}')
    return f", {text}" if text else ""


def _by(*labels: str) -> str:
    names = [n for n in labels if n]
    return f" by ({', '.join(names)})" if names else ""


@attrs.define
class _Target:
    job_id: str
    rank: Rank
    metrics: EngineMetrics
    expected: dict[str, str]


class PrometheusTelemetry:
    """``koi_collect_telemetry`` from the Prometheus HTTP API, for vLLM, SGLang and TensorRT-LLM
    ranks.

    Parameters
    ----------
    url
        Prometheus' base URL, e.g. ``http://prometheus.monitoring:9090``.
    rules
        The mapping from ranks to series: :class:`RankRule` values or tables with ``labels``
        and optional ``job`` / ``pool`` / ``gpu`` / ``engine`` globs; the first match wins.
        Default: one rule matching vLLM's and SGLang's ``model_name`` label to the served model
        (TensorRT-LLM 1.2 labels its series ``model_name="undefined"``: its ranks need a rule
        on the labels Prometheus attaches to the scrape target, e.g. the pod's).
    models
        koi model name -> the name the engine serves it under (the ``{served_model}``
        placeholder); a model not listed serves under its koi name.
    selector
        Extra PromQL matchers added to every query, e.g. ``namespace="llm"``.
    replica_label
        The label that tells a rank's replicas apart (``instance`` as Prometheus sets it, or
        ``pod`` with Kubernetes service discovery).
    timeout_s
        Time-out of each query (client and server side).
    budget_s
        Wall-clock budget of one collection; queries past it are not sent and what they would
        have measured is reported as missing.
    headers
        HTTP headers for every request (e.g. ``Authorization`` for a proxy in front of
        Prometheus).
    min_replica_requests
        Requests a replica must have finished in the window before its median TPOT is
        reported (:attr:`Observation.replica_tpot_ms`: how the planner finds a slow replica).

    A metric that is absent is reported as *missing* (:attr:`Observation.missing`), never as
    zero, and so is one the engine does not export (a ``None`` family of its
    :class:`EngineMetrics`, which is not queried: TensorRT-LLM's throughput, cost, KV-cache,
    batch and queue); so are values that come back NaN, infinite or negative (with a note in
    the log).  A p99 read from a histogram carries the bucket it fell in as a
    :class:`~koi.types.Resolution`.  A source that cannot reach Prometheus raises
    :class:`PrometheusError`: the planner reports it and ticks on without telemetry.

    .. versionadded:: 0.1
    """

    koi_plugin_name = "koi.prometheus"

    def __init__(
        self,
        url: str,
        *,
        rules: Iterable[RankRule | Mapping[str, Any]] | None = None,
        models: Mapping[str, str] | None = None,
        selector: str = "",
        replica_label: str = "instance",
        timeout_s: float = 5.0,
        budget_s: float = 30.0,
        headers: Mapping[str, str] | None = None,
        engines: Mapping[str, EngineMetrics] | None = None,
        clock: Callable[[], float] = time.monotonic,
        min_replica_requests: int = 5,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidInput(f"url: must be an http(s) URL, got {url!r}")
        for name, v in (("timeout_s", timeout_s), ("budget_s", budget_s)):
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf:
                raise InvalidInput(f"{name}: must be a number > 0, got {v!r}")
        if isinstance(min_replica_requests, bool) or not isinstance(min_replica_requests, int):
            raise InvalidInput(
                f"min_replica_requests: must be an integer, got {min_replica_requests!r}"
            )
        if min_replica_requests < 1:
            raise InvalidInput(f"min_replica_requests: must be >= 1, got {min_replica_requests}")
        if not isinstance(replica_label, str) or not _LABEL.fullmatch(replica_label):
            raise InvalidInput(f"replica_label: not a label name: {replica_label!r}")
        if not isinstance(selector, str):
            raise InvalidInput(f"selector: must be a string, got {selector!r}")
        if models is not None and not (
            isinstance(models, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in models.items())
        ):
            raise InvalidInput(f"models: must map koi model names to served names, got {models!r}")
        self.api = PrometheusApi(url, float(timeout_s), dict(headers or {}))
        self.rules = _rules(rules)
        self.models = dict(models or {})
        self.selector = _selector(selector)
        self.replica_label = replica_label
        self.min_samples = min_replica_requests
        self.budget_s = float(budget_s)
        self.engines = dict(ENGINES if engines is None else engines)
        self._clock = clock
        self.last_windows: tuple[EngineWindow, ...] = ()
        self.last_notes: tuple[str, ...] = ()

    # -- the hook -----------------------------------------------------------------------------

    @hookimpl
    def koi_collect_telemetry(
        self, ranks: Sequence[tuple[str, Rank]], window: tuple[float, float]
    ) -> Iterable[Observation]:
        windows = self.read(ranks, window)
        return [o for w in windows if (o := w.observation()) is not None]

    # -- reading ------------------------------------------------------------------------------

    def read(
        self, ranks: Sequence[tuple[str, Rank]], window: tuple[float, float]
    ) -> list[EngineWindow]:
        """What Prometheus holds for each visible rank over ``window`` (unix seconds).

        Raises
        ------
        PrometheusError
            Prometheus is unreachable, or every query failed.
        """
        start, end = float(window[0]), float(window[1])
        notes: list[str] = []
        targets: list[_Target] = []
        for job_id, rank in ranks:
            chain = rank.chain
            metrics = self.engines.get(chain.config.engine)
            if metrics is None:
                notes.append(f"{job_id}: engine {chain.config.engine!r} has no metric mapping")
                continue
            rule = next((r for r in self.rules if r.matches(job_id, chain)), None)
            if rule is None:
                notes.append(f"{job_id}: no rule maps its rank on {chain.environment.id}")
                continue
            served = self.models.get(chain.model, chain.model)
            expected = rule.render(placeholders(job_id, chain, served))
            targets.append(_Target(job_id, rank, metrics, expected))
        out: list[EngineWindow] = []
        if targets and end > start:
            deadline = self._clock() + self.budget_s
            fetcher = _Fetcher(self, start, end, deadline, notes)
            by_engine: dict[EngineMetrics, list[_Target]] = defaultdict(list)
            for t in targets:
                by_engine[t.metrics].append(t)
            for metrics, group in by_engine.items():
                keys = sorted({k for t in group for k in t.expected})
                data = fetcher.fetch(metrics, keys)
                out.extend(self._window(t, data, start, end, notes) for t in group)
            fetcher.check()
        for note in notes:
            log.warning("prometheus telemetry: %s", note)
        self.last_windows = tuple(out)
        self.last_notes = tuple(notes)
        return out

    def _window(
        self,
        t: _Target,
        data: Mapping[str, list[Sample]],
        start: float,
        end: float,
        notes: list[str],
    ) -> EngineWindow:
        span = end - start
        where = f"{t.job_id} on {t.rank.chain.environment.id}"

        def mine(name: str) -> list[Sample]:
            return [
                s
                for s in data.get(name, ())
                if all(s.labels.get(k, "") == v for k, v in t.expected.items())
            ]

        def clean(name: str, samples: list[Sample], *, upper: float = math.inf) -> list[Sample]:
            kept = []
            for s in samples:
                if math.isfinite(s.value) and 0 <= s.value <= upper:
                    kept.append(s)
                else:
                    notes.append(f"{where}: {name} = {s.value} dropped (not in [0, {upper:g}])")
            return kept

        latency: dict[str, QuantileEstimate] = {}
        requests = completed = None
        for family in _HISTOGRAMS:
            samples = clean(f"{family} buckets", mine(family))
            buckets: dict[float, float] = defaultdict(float)
            for s in samples:
                try:
                    buckets[float(s.labels.get("le", "nan"))] += s.value
                except ValueError:
                    notes.append(f"{where}: {family} bucket le={s.labels.get('le')!r} ignored")
            for q in (0.5, 0.99):
                est = histogram_quantile(q, buckets.items())
                if est is not None:
                    latency[f"p{round(q * 100)}_{family}"] = est.scaled(1000.0)
            inf_rate = buckets.get(math.inf)
            if inf_rate is not None and inf_rate >= 0:
                if family == "ttft":
                    requests = round(inf_rate * span)
                elif family == "e2e":
                    completed = round(inf_rate * span)
        if requests is None and completed is not None:
            requests = completed

        replicas = {_replica(s, self.replica_label) for s in mine("replicas")}

        def gauge(name: str, *, upper: float = math.inf) -> float | None:
            per_replica = clean(name, mine(name), upper=upper)
            if not per_replica:
                return None
            return sum(s.value for s in per_replica) / len(per_replica)

        def counter(name: str) -> float | None:
            samples = clean(name, mine(name))
            return sum(s.value for s in samples) if samples else None

        per_replica: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
        for s in clean("replica_tpot buckets", mine("replica_tpot")):
            name, le = s.labels.get(self.replica_label), s.labels.get("le", "nan")
            with contextlib.suppress(ValueError):  # a malformed bucket was noted above
                if name:
                    per_replica[name][float(le)] += s.value
        replica_tpot = []
        for name, buckets in sorted(per_replica.items()):
            median = histogram_quantile(0.5, buckets.items())
            if median is not None and buckets.get(math.inf, 0.0) * span >= self.min_samples:
                replica_tpot.append((name, median.value * 1000.0))
        preempt = counter("preemptions")
        hits, looked_up = counter("prefix_hits"), counter("prefix_queries")
        if hits is not None and looked_up is not None and looked_up > 0:
            prefix_rate: float | None = min(1.0, hits / looked_up)
        else:  # no lookups in the window, or an engine with only the gauge
            prefix_rate = gauge("prefix_rate", upper=1.0)
        return EngineWindow(
            job_id=t.job_id,
            rank=t.rank,
            start_s=start,
            end_s=end,
            replicas_up=len(replicas),
            requests=requests,
            completed=completed,
            latency_ms=latency,
            throughput_tok_s=counter("generation"),
            kv_cache_util=gauge("kv", upper=1.0),
            running=gauge("running"),
            waiting=gauge("waiting"),
            preemptions_per_s=preempt / max(len(replicas), 1) if preempt is not None else None,
            notes=tuple(n for n in notes if n.startswith(where)),
            prefix_hit_rate=prefix_rate,
            replica_tpot_ms=tuple(replica_tpot),
        )


def _replica(sample: Sample, label: str) -> tuple[tuple[str, str], ...]:
    value = sample.labels.get(label)
    return ((label, value),) if value is not None else tuple(sorted(sample.labels.items()))


class _Fetcher:
    """Runs one collection's queries under its budget; remembers what failed."""

    def __init__(
        self,
        plugin: PrometheusTelemetry,
        start: float,
        end: float,
        deadline: float,
        notes: list[str],
    ) -> None:
        self.plugin = plugin
        self.end = end
        self.range = f"[{max(1, round((end - start) * 1000))}ms]"
        self.deadline = deadline
        self.notes = notes
        self.sent = 0
        self.failed: list[str] = []

    def fetch(self, m: EngineMetrics, keys: list[str]) -> dict[str, list[Sample]]:
        p = self.plugin
        sel, w, rl = p.selector, self.range, p.replica_label

        def vec(name: str, suffix: str = "") -> str:
            return f'{{__name__=~"{name}{suffix}"{sel}}}'

        queries: dict[str, str] = {}
        for family in _HISTOGRAMS:
            name = getattr(m, family)
            if name is not None:
                queries[family] = f"sum{_by('le', *keys)} (rate({vec(name, '_bucket')}{w}))"
        tpot = m.request_tpot if m.request_tpot is not None else m.itl  # EngineWindow.tpot's
        if tpot is not None:
            queries["replica_tpot"] = f"sum{_by('le', *keys, rl)} (rate({vec(tpot, '_bucket')}{w}))"
        if m.generation_tokens is not None:
            queries["generation"] = f"sum{_by(*keys)} (rate({vec(m.generation_tokens)}{w}))"
        if m.preemptions is not None:
            queries["preemptions"] = f"sum{_by(*keys)} (rate({vec(m.preemptions)}{w}))"
        for name, counter in (("prefix_hits", m.prefix_hits), ("prefix_queries", m.prefix_queries)):
            if counter is not None:
                queries[name] = f"sum{_by(*keys)} (rate({vec(counter)}{w}))"
        if m.prefix_hit_rate is not None:
            queries["prefix_rate"] = (
                f"avg{_by(*keys, rl)} (avg_over_time({vec(m.prefix_hit_rate)}{w}))"
            )
        for name, metric in (("kv", m.kv_cache), ("running", m.running), ("waiting", m.waiting)):
            if metric is not None:
                queries[name] = f"avg{_by(*keys, rl)} (avg_over_time({vec(metric)}{w}))"
        # A replica is up once it reports a gauge, or has answered a request (TTFT's count).
        up = f"{m.ttft}_count" if m.running is None else f"(?:{m.running}|{m.ttft}_count)"
        queries["replicas"] = f"group{_by(*keys, rl)} ({vec(up)})"
        out: dict[str, list[Sample]] = {}
        for name, promql in queries.items():
            if self.plugin._clock() > self.deadline:
                self.notes.append(f"{name}: not queried, the {p.budget_s:g} s budget was spent")
                continue
            self.sent += 1
            try:
                out[name] = p.api.query(promql, self.end)
            except Unreachable:
                raise
            except PrometheusError as exc:
                self.failed.append(str(exc))
                self.notes.append(f"{name}: {exc}; reported as missing")
        return out

    def check(self) -> None:
        if self.sent and len(self.failed) == self.sent:
            raise PrometheusError(f"all {self.sent} queries failed; first: {self.failed[0]}")

"""Scenarios: the fleet, the jobs and the events of one simulated run, loaded from TOML.

The file format is documented in ``docs/scenarios.md``; built-in scenarios live in
``koi/sim/scenarios/*.toml`` and are found with :func:`scenario_names`.

Longer than most modules because the format is one concept: each section's value type, its
validation with the file path and key in every error, and the conversion to koi types stay
together, so a reader of the format finds all of it here.
"""

from __future__ import annotations

import difflib
import enum
import importlib.resources
import math
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from koi.errors import InvalidInput, KoiError, read_text
from koi.types import (
    DEFAULT_PRECISIONS,
    AdmissionPolicy,
    Environment,
    GpuSpec,
    Job,
    JobClass,
    LengthDist,
    Market,
    ModelSpec,
    ObjectiveWeights,
    Pool,
    ServingTarget,
    WorkloadProfile,
    to_market,
)
from koi.types.validators import (
    boolean,
    engine_name,
    identifier,
    non_negative,
    non_negative_int,
    one_of,
    optional,
    positive,
    positive_int,
    to_tuple,
)

__all__ = [
    "Event",
    "EventKind",
    "PoolSpec",
    "Scenario",
    "check_names",
    "load_scenario",
    "parse_scenario",
    "scenario_names",
]


class EventKind(enum.StrEnum):
    """What an event changes in the world (DESIGN §10.1)."""

    DRIVER_UPDATE = "driver_update"  # a GPU type's speed moves (engine/driver/NCCL update)
    WORKLOAD_DRIFT = "workload_drift"  # a job's input/output lengths or rate shift
    POOL_CHANGE = "pool_change"  # a pool shrinks or grows
    PREEMPTION = "preemption"  # spot instances of a pool vanish now
    DEGRADE = "degrade"  # replicas of a running job start to run slow


def _int_as_float(value: Any) -> Any:
    # A TOML integer is a number of seconds too; anything else is left to the validator.
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _to_event_kind(value: Any) -> EventKind:
    try:
        return EventKind(value)
    except ValueError:
        return value  # type: ignore[no-any-return]


@attrs.frozen
class PoolSpec:
    """One pool of a scenario's fleet.

    ``instance_type`` names a catalog instance of ``cloud``; ``gpu``, ``gpus_per_instance``,
    ``price_usd_per_h``, ``preemption_per_h`` and ``multi_node`` override the catalog (all of the
    first three given: the pool needs no catalog entry, e.g. an on-prem rack).
    """

    cloud: str = attrs.field(validator=identifier)
    region: str = attrs.field(validator=identifier)
    market: Market = attrs.field(converter=to_market, validator=one_of(Market))
    instance_type: str = attrs.field(validator=identifier)
    instances: int = attrs.field(validator=non_negative_int)
    gpu: str | None = attrs.field(default=None, validator=optional(identifier))
    gpus_per_instance: int | None = attrs.field(default=None, validator=optional(positive_int))
    price_usd_per_h: float | None = attrs.field(default=None, validator=optional(non_negative))
    preemption_per_h: float | None = attrs.field(default=None, validator=optional(non_negative))
    multi_node: bool | None = attrs.field(default=None, validator=optional(boolean))

    @property
    def id(self) -> str:
        return f"{self.cloud}/{self.region}/{self.market.value}/{self.instance_type}"

    @property
    def inline(self) -> bool:
        return None not in (self.gpu, self.gpus_per_instance, self.price_usd_per_h)

    def resolve(self, instances: Iterable[Any]) -> Pool:
        """The :class:`Pool` this spec describes, looking up the catalog's instance types.

        ``instances`` are catalog ``InstanceType`` objects (``cloud``, ``name``,
        ``.environment(region, market)``); they are only consulted for non-inline pools.
        """
        if self.inline:
            assert self.gpu is not None
            assert self.gpus_per_instance is not None
            assert self.price_usd_per_h is not None
            env = Environment(
                cloud=self.cloud,
                region=self.region,
                market=self.market,
                instance_type=self.instance_type,
                gpu=self.gpu,
                gpus_per_instance=self.gpus_per_instance,
                price_usd_per_h=self.price_usd_per_h,
                preemption_per_h=self.preemption_per_h or 0.0,
                multi_node=bool(self.multi_node),
            )
            return Pool(env, self.instances)
        match = [i for i in instances if i.cloud == self.cloud and i.name == self.instance_type]
        if not match:
            msg = f"instance_type: unknown {self.cloud} instance {self.instance_type!r}"
            raise InvalidInput(msg)
        try:
            env = match[0].environment(self.region, self.market)
        except KoiError as exc:
            raise InvalidInput(f"market: {exc}") from None
        over: dict[str, Any] = {
            k: v
            for k, v in (
                ("gpu", self.gpu),
                ("gpus_per_instance", self.gpus_per_instance),
                ("price_usd_per_h", self.price_usd_per_h),
                ("preemption_per_h", self.preemption_per_h),
                ("multi_node", self.multi_node),
            )
            if v is not None
        }
        return Pool(attrs.evolve(env, **over), self.instances)


#: The fields each kind of event reads (the others must keep their defaults).
_EVENT_FIELDS = {
    EventKind.DRIVER_UPDATE: {"at_s", "kind", "gpu", "engine", "speed"},
    EventKind.WORKLOAD_DRIFT: {"at_s", "kind", "job", "input_scale", "output_scale", "rate_scale"},
    EventKind.POOL_CHANGE: {"at_s", "kind", "pool", "instances"},
    EventKind.PREEMPTION: {"at_s", "kind", "pool", "instances", "notice"},
    EventKind.DEGRADE: {"at_s", "kind", "job", "slow"},
}


@attrs.frozen
class Event:
    """A scheduled change of the world at ``at_s`` seconds after the start.

    Fields by kind — ``driver_update``: ``gpu`` (and optionally ``engine``), ``speed`` (step
    times divide by it; drawn from ``TruthConfig.driver_update_error`` when omitted);
    ``workload_drift``: ``job`` and any of ``input_scale``, ``output_scale``, ``rate_scale``;
    ``pool_change``: ``pool`` (its id) and ``instances`` (the new capacity);
    ``preemption``: ``pool`` and ``instances`` (how many vanish) and ``notice`` (one tick ahead);
    ``degrade``: ``job`` and ``slow`` (step-time multiplier for one replica of each rank).
    """

    at_s: float = attrs.field(validator=non_negative)
    kind: EventKind = attrs.field(converter=_to_event_kind, validator=one_of(EventKind))
    gpu: str | None = attrs.field(default=None, validator=optional(identifier))
    engine: str | None = attrs.field(default=None, validator=optional(engine_name))
    speed: float | None = attrs.field(default=None, validator=optional(positive))
    job: str | None = attrs.field(default=None, validator=optional(identifier))
    input_scale: float = attrs.field(default=1.0, validator=positive)
    output_scale: float = attrs.field(default=1.0, validator=positive)
    rate_scale: float = attrs.field(default=1.0, validator=positive)
    pool: str | None = attrs.field(default=None, validator=optional(identifier))
    instances: int | None = attrs.field(default=None, validator=optional(non_negative_int))
    notice: bool = attrs.field(default=False, validator=boolean)
    slow: float = attrs.field(default=2.0, validator=positive)

    def __attrs_post_init__(self) -> None:
        need = {
            EventKind.DRIVER_UPDATE: ("gpu",),
            EventKind.WORKLOAD_DRIFT: ("job",),
            EventKind.POOL_CHANGE: ("pool", "instances"),
            EventKind.PREEMPTION: ("pool", "instances"),
            EventKind.DEGRADE: ("job",),
        }[self.kind]
        for key in need:
            if getattr(self, key) is None:
                raise InvalidInput(f"{key}: required for a {self.kind.value} event")
        # A key of another kind would be ignored without a word: refuse it.
        for a in attrs.fields(Event):
            if a.name not in _EVENT_FIELDS[self.kind] and getattr(self, a.name) != a.default:
                raise InvalidInput(f"{a.name}: not a field of a {self.kind.value} event")


MIN_TICK_S = 1.0
#: The longest run a scenario may ask for (a month): the simulator's cost grows with it, and a
#: typo such as 1e300 would otherwise run until killed.
MAX_DURATION_S = 31 * 24 * 3600.0


#: Kinds of hidden truth a scenario may ask for (docs/evaluation.md, "The truth model").
WORLDS = ("measured", "synthetic")


def _world_kind(_inst: object, attribute: attrs.Attribute[str], value: object) -> None:
    if value not in WORLDS:
        raise InvalidInput(f"{attribute.name}: must be one of {', '.join(WORLDS)}, got {value!r}")


@attrs.frozen
class Scenario:
    """A simulated run: duration, planning tick, fleet, jobs and scheduled events."""

    name: str = attrs.field(validator=identifier)
    duration_s: float = attrs.field(validator=positive)
    tick_s: float = attrs.field(converter=_int_as_float, validator=positive)
    pools: tuple[PoolSpec, ...] = attrs.field(converter=to_tuple)
    jobs: tuple[Job, ...] = attrs.field(converter=to_tuple)
    events: tuple[Event, ...] = attrs.field(default=(), converter=to_tuple)
    description: str = ""
    seed_salt: int = attrs.field(default=0, validator=non_negative_int)
    world: str = attrs.field(default="measured", validator=_world_kind)

    def __attrs_post_init__(self) -> None:
        _unique("pools", [p.id for p in self.pools])
        _unique("jobs", [j.id for j in self.jobs])
        pool_ids = {p.id for p in self.pools}
        job_ids = {j.id for j in self.jobs}
        if not self.pools:
            raise InvalidInput("pools: a scenario needs at least one pool ([[pools]])")
        if self.tick_s < MIN_TICK_S:
            # A planner tick takes around a second of wall time; shorter ticks only spin.
            raise InvalidInput(f"tick_s: must be >= {MIN_TICK_S:g} s, got {self.tick_s}")
        if self.tick_s > self.duration_s:
            dur, tick = self.duration_s, self.tick_s
            raise InvalidInput(f"tick_s: must be <= the run's duration ({dur:g} s), got {tick:g}")
        if self.duration_s > MAX_DURATION_S:
            days = MAX_DURATION_S / 86400
            raise InvalidInput(f"duration_s: must be at most {days:g} days, got {self.duration_s}")
        for k, e in enumerate(self.events):
            if e.pool is not None and e.pool not in pool_ids:
                raise InvalidInput(f"events[{k}].pool: unknown pool {e.pool!r}")
            if e.job is not None and e.job not in job_ids:
                raise InvalidInput(f"events[{k}].job: unknown job {e.job!r}")
            if e.at_s >= self.duration_s:
                raise InvalidInput(_after_the_end(f"events[{k}].at_s", e.at_s, self.duration_s))
        for k, j in enumerate(self.jobs):
            # A job arriving after the last tick is allowed: no planner ever sees it, so
            # every planner is scored on it alike (docs/scenarios.md).
            if j.arrival_s >= self.duration_s:
                raise InvalidInput(
                    _after_the_end(f"jobs[{k}].arrival_s", j.arrival_s, self.duration_s)
                )

    @property
    def ticks(self) -> int:
        """Number of planning ticks (the last window may be shorter)."""
        n = int(self.duration_s // self.tick_s)
        return n + (1 if n * self.tick_s < self.duration_s else 0)

    @property
    def online_jobs(self) -> tuple[Job, ...]:
        return tuple(j for j in self.jobs if j.is_online)

    @property
    def batch_jobs(self) -> tuple[Job, ...]:
        return tuple(j for j in self.jobs if not j.is_online)

    @property
    def gpu_count(self) -> int:
        """GPUs in the fleet at the start, for pools with a known instance size."""
        return sum(p.instances * (p.gpus_per_instance or 0) for p in self.pools)


def _after_the_end(field: str, at_s: float, duration_s: float) -> str:
    """The message for a time at or past the end of the run, in the file's minutes too."""
    return (
        f"{field}: must be before the end of the run ({duration_s:g} s = "
        f"{duration_s / 60:g} min), got {at_s:g} s = {at_s / 60:g} min"
    )


def _unknown(kind: str, name: str, known: Iterable[str]) -> str:
    """``unknown <kind> '<name>'``, with the catalog's closest spelling or its names."""
    by_fold = {k.casefold(): k for k in known}
    close = difflib.get_close_matches(name.casefold(), list(by_fold), n=1, cutoff=0.75)
    hint = (
        f"did you mean {by_fold[close[0]]!r}?"
        if close
        else "known: " + ", ".join(sorted(by_fold.values()))
    )
    return f"unknown {kind} {name!r} ({hint})"


def check_names(
    scenario: Scenario,
    pools: Iterable[Pool],
    gpus: Mapping[str, GpuSpec],
    models: Mapping[str, ModelSpec],
) -> None:
    """Every model and GPU type ``scenario`` names (its jobs, its resolved ``pools``, its
    driver updates) is in the catalog maps; the error names the entry."""
    where = scenario.name
    for k, j in enumerate(scenario.jobs):
        if j.model not in models:
            raise InvalidInput(f"{where}: jobs[{k}].model: {_unknown('model', j.model, models)}")
    for k, p in enumerate(pools):
        if p.environment.gpu not in gpus:
            unknown = _unknown("GPU", p.environment.gpu, gpus)
            raise InvalidInput(f"{where}: pools[{k}].gpu: {unknown}")
    for k, e in enumerate(scenario.events):
        if e.gpu is not None and e.gpu not in gpus:
            raise InvalidInput(f"{where}: events[{k}].gpu: {_unknown('GPU', e.gpu, gpus)}")


def _unique(what: str, ids: list[str]) -> None:
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            raise InvalidInput(f"{what}: duplicate id {i!r}")
        seen.add(i)


# --- TOML parsing ------------------------------------------------------------------------------

_SCENARIO_KEYS = {
    "name",
    "description",
    "duration_h",
    "duration_min",
    "tick_s",
    "seed_salt",
    "world",
}
_POOL_KEYS = {f.name for f in attrs.fields(PoolSpec)}
_EVENT_KEYS = ({f.name for f in attrs.fields(Event)} - {"at_s"}) | {"at_min"}
_JOB_KEYS = {
    "id",
    "model",
    "class",
    "tenant",
    "priority",
    "quota_group",
    "arrival_min",
    "input",
    "output",
    "arrival",
    "rate_rps",
    "gamma_cv",
    "prefix_share",
    "prefix_tokens",
    "prefixes",
    "requests",
    "p99_ttft_ms",
    "p99_tpot_ms",
    "deadline_min",
    "weights",
    "precisions",
    "admission",
}
_ONLINE_KEYS = ("rate_rps", "p99_ttft_ms", "p99_tpot_ms")
_BATCH_KEYS = ("requests", "deadline_min")
_LENGTH_KEYS = {"mean", "cv", "max"}
_WEIGHT_KEYS = {f.name for f in attrs.fields(ObjectiveWeights)}


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{where}: must be a table, got {type(value).__name__}")
    return value


def _check_keys(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for key in table:
        if key not in allowed:
            known = ", ".join(sorted(allowed))
            raise InvalidInput(f"{where}.{key}: unknown key (allowed: {known})")


def _build(where: str, fn: Callable[[], Any], keys: Mapping[str, str] | None = None) -> Any:
    """Call ``fn``; prefix any validation error with ``where`` so the key is named, and name
    the fields ``keys`` maps as the file spells them."""
    try:
        return fn()
    except InvalidInput as exc:
        raise InvalidInput(f"{where}.{_file_keys(str(exc), keys or {})}") from None
    except TypeError as exc:
        raise InvalidInput(f"{where}: {exc}") from None


def _file_keys(message: str, keys: Mapping[str, str]) -> str:
    """``message`` (``path.to[k].field: why``) with each step of its path renamed by ``keys``:
    a type's field (``total_requests``) named as the file's key (``requests``)."""
    path, sep, why = message.partition(": ")
    if not sep:
        return message
    steps = []
    for step in path.split("."):
        name, bracket, index = step.partition("[")
        steps.append(keys.get(name, name) + bracket + index)
    return ".".join(steps) + sep + why


# The types' fields that a scenario file spells otherwise (in its time units: the messages
# state both).
_WORKLOAD_KEYS = {"total_requests": "requests", "prefix_count": "prefixes"}
_SCENARIO_FILE_KEYS = {"at_s": "at_min", "arrival_s": "arrival_min"}


def _minutes(table: Mapping[str, Any], key: str, where: str, default: float = 0.0) -> float:
    value = table.get(key, default)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value < math.inf  # NaN fails too
    ):
        raise InvalidInput(f"{where}.{key}: must be a finite number >= 0, got {value!r}")
    return float(value) * 60.0


def _length(value: Any, where: str) -> LengthDist:
    t = _table(value, where)
    _check_keys(t, _LENGTH_KEYS, where)
    if "mean" not in t:
        raise InvalidInput(f"{where}.mean: required")
    return _build(where, lambda: LengthDist(**t))  # type: ignore[no-any-return]


def _job(raw: Any, where: str) -> Job:
    t = _table(raw, where)
    _check_keys(t, _JOB_KEYS, where)
    for key in ("id", "model", "class", "input", "output"):
        if key not in t:
            raise InvalidInput(f"{where}.{key}: required")
    if t["class"] not in [c.value for c in JobClass]:
        raise InvalidInput(f"{where}.class: must be online or batch, got {t['class']!r}")
    online = t["class"] == JobClass.ONLINE.value
    needed = _ONLINE_KEYS if online else _BATCH_KEYS
    for key in needed:
        if key not in t:
            raise InvalidInput(f"{where}.{key}: required for a {t['class']} job")
    for key in _BATCH_KEYS if online else _ONLINE_KEYS:
        if key in t:  # it would be ignored without a word
            raise InvalidInput(f"{where}.{key}: not a key of a {t['class']} job")
    arrival_s = _minutes(t, "arrival_min", where)
    input_len = _length(t["input"], f"{where}.input")
    output_len = _length(t["output"], f"{where}.output")
    workload = _build(
        where,
        lambda: WorkloadProfile(
            input_len=input_len,
            output_len=output_len,
            arrival=t.get("arrival", "poisson"),
            rate_rps=t.get("rate_rps"),
            total_requests=t.get("requests"),
            gamma_cv=t.get("gamma_cv", 1.0),
            prefix_share=t.get("prefix_share", 0.0),
            prefix_tokens=t.get("prefix_tokens"),
            prefix_count=t.get("prefixes", 1),
        ),
        _WORKLOAD_KEYS,
    )
    if online:
        target = _build(
            where,
            lambda: ServingTarget.online(
                p99_ttft_ms=t["p99_ttft_ms"], p99_tpot_ms=t["p99_tpot_ms"]
            ),
        )
    else:
        due_in_s = _minutes(t, "deadline_min", where)
        if due_in_s == 0:
            raise InvalidInput(f"{where}.deadline_min: must be > 0 (minutes after arrival), got 0")
        target = ServingTarget.batch(deadline_s=arrival_s + due_in_s)
    weights = ObjectiveWeights()
    if "weights" in t:
        w = _table(t["weights"], f"{where}.weights")
        _check_keys(w, _WEIGHT_KEYS, f"{where}.weights")
        weights = _build(where, lambda: ObjectiveWeights(**w))
    return _build(  # type: ignore[no-any-return]
        where,
        lambda: Job(
            id=t["id"],
            model=t["model"],
            job_class=t["class"],
            workload=workload,
            target=target,
            tenant=t.get("tenant", "default"),
            weights=weights,
            priority=t.get("priority", 0),
            arrival_s=arrival_s,
            quota_group=t.get("quota_group"),
            precisions=t.get("precisions", DEFAULT_PRECISIONS),
            admission=t.get("admission", AdmissionPolicy.SERVE_BEST_EFFORT),
        ),
    )


def _event(raw: Any, where: str) -> Event:
    t = _table(raw, where)
    _check_keys(t, _EVENT_KEYS, where)
    for key in ("at_min", "kind"):
        if key not in t:
            raise InvalidInput(f"{where}.{key}: required")
    fields = {k: v for k, v in t.items() if k != "at_min"}
    at_s = _minutes(t, "at_min", where)
    return _build(where, lambda: Event(at_s=at_s, **fields))  # type: ignore[no-any-return]


def _pool(raw: Any, where: str) -> PoolSpec:
    t = _table(raw, where)
    _check_keys(t, _POOL_KEYS, where)
    for key in ("cloud", "region", "market", "instance_type", "instances"):
        if key not in t:
            raise InvalidInput(f"{where}.{key}: required")
    return _build(where, lambda: PoolSpec(**t))  # type: ignore[no-any-return]


def _array(doc: Mapping[str, Any], key: str, source: str) -> list[Any]:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise InvalidInput(f"{source}: {key}: must be an array of tables ([[{key}]])")
    return value


def parse_scenario(text: str, *, source: str = "<string>") -> Scenario:
    """Parse scenario TOML; a malformed file raises :class:`InvalidInput` naming the key.

    Examples
    --------
    >>> s = parse_scenario('''
    ... [scenario]
    ... name = "tiny"
    ... duration_min = 10
    ... [[pools]]
    ... cloud = "onprem"
    ... region = "lab"
    ... market = "reserved"
    ... instance_type = "box"
    ... instances = 1
    ... gpu = "L4"
    ... gpus_per_instance = 1
    ... price_usd_per_h = 0.5
    ... ''')
    >>> s.name, s.duration_s, s.tick_s
    ('tiny', 600.0, 300.0)
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{source}: not valid TOML ({exc})") from None
    except RecursionError:
        raise InvalidInput(f"{source}: TOML nested too deeply") from None
    for key in doc:
        if key not in ("scenario", "pools", "jobs", "events"):
            msg = f"{source}: {key}: unknown key (allowed: events, jobs, pools, scenario)"
            raise InvalidInput(msg)
    head = _table(doc.get("scenario", {}), f"{source}: scenario")
    _check_keys(head, _SCENARIO_KEYS, f"{source}: scenario")
    if "name" not in head:
        raise InvalidInput(f"{source}: scenario.name: required")
    if "duration_h" in head:
        duration = _minutes(head, "duration_h", f"{source}: scenario") * 60.0
    elif "duration_min" in head:
        duration = _minutes(head, "duration_min", f"{source}: scenario")
    else:
        raise InvalidInput(f"{source}: scenario.duration_h: required (or duration_min)")
    raw_pools = _array(doc, "pools", source)
    raw_jobs = _array(doc, "jobs", source)
    pools = tuple(_pool(p, f"{source}: pools[{k}]") for k, p in enumerate(raw_pools))
    jobs = tuple(_job(j, f"{source}: jobs[{k}]") for k, j in enumerate(raw_jobs))
    events = tuple(
        _event(e, f"{source}: events[{k}]") for k, e in enumerate(_array(doc, "events", source))
    )
    try:
        return Scenario(
            name=head["name"],
            duration_s=duration,
            tick_s=head.get("tick_s", 300.0),
            pools=pools,
            jobs=jobs,
            events=events,
            description=head.get("description", ""),
            seed_salt=head.get("seed_salt", 0),
            world=head.get("world", "measured"),
        )
    except (InvalidInput, TypeError) as exc:
        # A field of [scenario], or a check across the file's arrays (named as they are).
        text = _file_keys(str(exc), _SCENARIO_FILE_KEYS)
        inside = "" if text.startswith(("pools", "jobs", "events")) else "scenario."
        raise InvalidInput(f"{source}: {inside}{text}") from None


def _builtin_dir() -> importlib.resources.abc.Traversable:
    return importlib.resources.files("koi.sim").joinpath("scenarios")


def scenario_names() -> tuple[str, ...]:
    """Names of the built-in scenarios, sorted."""
    files = [f.name for f in _builtin_dir().iterdir() if f.name.endswith(".toml")]
    return tuple(sorted(n.removesuffix(".toml") for n in files))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A built-in scenario by name (``"hetero-3h"``) or a scenario TOML file by path."""
    if isinstance(name_or_path, str) and name_or_path in scenario_names():
        res = _builtin_dir().joinpath(f"{name_or_path}.toml")
        return parse_scenario(res.read_text(encoding="utf-8"), source=f"{name_or_path}.toml")
    path = Path(name_or_path)
    if not path.is_file():
        known = ", ".join(scenario_names())
        msg = f"scenario: no built-in scenario or file {str(path)!r} (built-in: {known})"
        raise InvalidInput(msg)
    return parse_scenario(read_text(path), source=str(path))

"""Build any benchmark planner by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import numpy as np

from koi.baselines._common import Toolkit
from koi.baselines._config import BaselineConfig
from koi.baselines._evolution import Evolutionary
from koi.baselines._feedback import FeedbackMilp
from koi.baselines._koi import KoiPolicy, koi_config
from koi.baselines._milp import RollingMilp
from koi.baselines._milp_truth import MilpTruth, TruthProfiles
from koi.baselines._perjob import PerJob
from koi.baselines._queue import BestFixed, QueueFirstFit, edf_key, fcfs_key
from koi.baselines._thompson import Thompson
from koi.catalog import Catalog, load_catalog
from koi.config import KoiConfig
from koi.errors import InvalidInput
from koi.planner import Planner
from koi.sim import Policy, World, reference_truth
from koi.surrogate import Surrogate
from koi.types import ClusterSnapshot, Observation, Plan

__all__ = [
    "CONFIGURABLE",
    "DEFAULT_PLANNERS",
    "EXTRA_PLANNERS",
    "LLM_PLANNERS",
    "PLANNERS",
    "REFERENCE",
    "STOCHASTIC",
    "make_policy",
]

#: Every built-in planner, in table order: koi, its ablations, the baselines, the references.
PLANNERS: tuple[str, ...] = (
    "koi",
    "koi-nograph",
    "koi-frozen",
    "fcfs",
    "edf",
    "best-fixed",
    "per-job",
    "rolling-milp",
    "feedback-milp",
    "thompson",
    "evolutionary",
    "milp-truth",
    "koi-truth",
)
#: ``koi bench``'s default set: every non-LLM planner and both references.  ``milp-truth`` is
#: the rolling MILP on the truth (DESIGN §10.4's oracle); ``koi-truth`` is koi's own planner with
#: the truth as its step model ("koi with perfect hardware knowledge").  Both are references,
#: not ceilings: either can score below a planner that learns (see docs/benchmark.md).
DEFAULT_PLANNERS: tuple[str, ...] = PLANNERS
#: Extra planners outside the default set (none at present).
EXTRA_PLANNERS: tuple[str, ...] = ()
#: Planners that draw random numbers (their seed is the run's seed).
STOCHASTIC: frozenset[str] = frozenset({"thompson", "evolutionary"})
#: Reference planners that may see the truth; never competitors.
REFERENCE: frozenset[str] = frozenset({"milp-truth", "koi-truth"})
#: Planners built on koi's planner: the only ones that read a :class:`~koi.config.KoiConfig`.
CONFIGURABLE: frozenset[str] = frozenset({"koi", "koi-nograph", "koi-frozen", "koi-truth"})
#: LLM planners of the paper; they need an LLM plugin and are not built in.
LLM_PLANNERS: tuple[str, ...] = ("llm-only", "llm-agent")


@attrs.frozen
class _Build:
    """What a planner is built from: the catalog, the run's seed, the world (references only),
    the baselines' knobs and the base configuration of koi's planners."""

    name: str
    catalog: Catalog
    seed: int
    world: World | None
    cfg: BaselineConfig
    config: KoiConfig | None

    def toolkit(self) -> Toolkit:
        return Toolkit.build(dict(self.catalog.gpus), dict(self.catalog.models))

    def rng(self) -> np.random.Generator:
        return np.random.default_rng([self.seed, len(self.name)])

    def truth(self) -> World:
        if self.world is None:
            raise InvalidInput(
                f"{self.name}: needs the world (koi.sim.build_world(scenario, seed=...))"
            )
        return self.world


def _koi(b: _Build) -> Policy:
    return KoiPolicy(Planner(config=koi_config(b.name, b.config), catalog=b.catalog, name=b.name))


def _koi_truth(b: _Build) -> Policy:
    world = b.truth()
    base = koi_config("koi", b.config)
    profiles = TruthProfiles(reference_truth(world))
    surrogate = Surrogate(
        dict(b.catalog.gpus), dict(b.catalog.models), base.surrogate, profiles=profiles
    )
    return KoiPolicy(Planner(config=base, catalog=b.catalog, surrogate=surrogate, name=b.name))


def _milp_truth(b: _Build) -> Policy:
    world = b.truth()
    return MilpTruth(
        gpus=dict(b.catalog.gpus),
        models=dict(b.catalog.models),
        scenario=world.scenario,
        world_seed=world.seed,
        truth=reference_truth(world),
        max_candidates=b.cfg.max_candidates,
        selector=b.cfg.selector,
    )


_BUILDERS: dict[str, Callable[[_Build], Policy]] = {
    "koi": _koi,
    "koi-nograph": _koi,
    "koi-frozen": _koi,
    "fcfs": lambda b: QueueFirstFit("fcfs", b.toolkit(), fcfs_key),
    "edf": lambda b: QueueFirstFit("edf", b.toolkit(), edf_key),
    "best-fixed": lambda b: BestFixed(b.toolkit()),
    "per-job": lambda b: PerJob(
        b.toolkit(), max_candidates=b.cfg.max_candidates, search_rounds=b.cfg.search_rounds
    ),
    "rolling-milp": lambda b: RollingMilp(
        b.toolkit(),
        max_candidates=b.cfg.max_candidates,
        selector=b.cfg.selector,
        search_rounds=b.cfg.search_rounds,
    ),
    "feedback-milp": lambda b: FeedbackMilp(
        b.toolkit(),
        max_candidates=b.cfg.max_candidates,
        selector=b.cfg.selector,
        search_rounds=b.cfg.search_rounds,
    ),
    "thompson": lambda b: Thompson(b.toolkit(), b.rng(), b.cfg),
    "evolutionary": lambda b: Evolutionary(b.toolkit(), b.rng(), b.cfg),
    "milp-truth": _milp_truth,
    "koi-truth": _koi_truth,
}


def make_policy(
    name: str,
    *,
    catalog: Catalog | None = None,
    seed: int = 0,
    world: World | None = None,
    cfg: BaselineConfig | None = None,
    config: KoiConfig | None = None,
) -> Policy:
    """A fresh policy for planner ``name`` (see :data:`PLANNERS`).

    ``catalog`` defaults to :func:`koi.catalog.load_catalog`; ``seed`` seeds stochastic
    planners; ``world`` (a :class:`koi.sim.World` built for the run's scenario and seed) is
    required by — and only given to — the references (``milp-truth``, ``koi-truth``).
    ``config`` is the base :class:`~koi.config.KoiConfig` of koi's planners (its ablations
    switch their part off on top of it); the baselines read only its
    ``planner.slow_replica_ratio``: when koi recycles slow replicas, every baseline's plans do
    too, by the same rule on the same telemetry.
    """
    builder = _BUILDERS.get(name)
    if builder is None:
        if name in LLM_PLANNERS:
            raise InvalidInput(f"planner {name!r}: needs an LLM plugin (not configured)")
        known = ", ".join((*PLANNERS, *EXTRA_PLANNERS))
        raise InvalidInput(f"planner: unknown {name!r}; choose from {known}")
    built = _Build(name, catalog or load_catalog(), seed, world, cfg or BaselineConfig(), config)
    policy = builder(built)
    ratio = (config or KoiConfig()).planner.slow_replica_ratio
    if isinstance(policy, KoiPolicy) or ratio is None:
        return policy  # koi's planners recycle by their own PlannerConfig
    return _Recycling(policy, ratio)


@attrs.define
class _Recycling:
    """A baseline whose plans also replace the replicas telemetry shows running slow, as
    koi's do (``PlannerConfig.slow_replica_ratio``): the same telemetry, the same reflex, so
    that it is no advantage of koi's."""

    policy: Policy
    ratio: float
    earlier: tuple[Observation, ...] = ()  # the window before the last

    @property
    def name(self) -> str:
        return self.policy.name

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        plan = self.policy.decide(snapshot, observations)
        plan = plan.recycling(observations, self.earlier, self.ratio, snapshot.pools)
        self.earlier = tuple(observations)
        return plan

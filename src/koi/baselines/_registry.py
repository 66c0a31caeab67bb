"""Build any benchmark planner by name."""

from __future__ import annotations

from typing import Any

import numpy as np

from koi.baselines._common import Toolkit
from koi.baselines._config import BaselineConfig
from koi.baselines._evolution import Evolutionary
from koi.baselines._koi import KoiPolicy, koi_config
from koi.baselines._milp import RollingMilp
from koi.baselines._perjob import PerJob
from koi.baselines._queue import BestFixed, QueueFirstFit, edf_key, fcfs_key
from koi.baselines._thompson import Thompson
from koi.config import KoiConfig
from koi.errors import InvalidInput

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

#: Every built-in planner, in table order: koi, its ablations, the baselines, the oracle.
PLANNERS: tuple[str, ...] = (
    "koi",
    "koi-nograph",
    "koi-frozen",
    "fcfs",
    "edf",
    "best-fixed",
    "per-job",
    "rolling-milp",
    "thompson",
    "evolutionary",
    "oracle",
    "oracle-koi",
)
#: ``koi bench``'s default set: every non-LLM planner and both references.  ``oracle`` is the
#: rolling MILP on the truth that DESIGN §10.4 specifies; ``oracle-koi`` is koi's own planner
#: with the truth as its step model — the ceiling koi's decisions can reach (the MILP oracle has
#: no risk term, so koi can beat it; see docs/benchmark.md).
DEFAULT_PLANNERS: tuple[str, ...] = PLANNERS
#: Extra planners outside the default set (none at present).
EXTRA_PLANNERS: tuple[str, ...] = ()
#: Planners that draw random numbers (their seed is the run's seed).
STOCHASTIC: frozenset[str] = frozenset({"thompson", "evolutionary"})
#: Reference planners that may see the truth; never competitors.
REFERENCE: frozenset[str] = frozenset({"oracle", "oracle-koi"})
#: Planners built on koi's planner: the only ones that read a :class:`~koi.config.KoiConfig`.
CONFIGURABLE: frozenset[str] = frozenset({"koi", "koi-nograph", "koi-frozen", "oracle-koi"})
#: LLM planners of the paper; they need an LLM plugin and are not built in.
LLM_PLANNERS: tuple[str, ...] = ("llm-only", "llm-agent")


def make_policy(
    name: str,
    *,
    catalog: Any = None,
    seed: int = 0,
    world: Any = None,
    cfg: BaselineConfig | None = None,
    config: KoiConfig | None = None,
) -> Any:
    """A fresh policy for planner ``name`` (see :data:`PLANNERS`).

    ``catalog`` defaults to :func:`koi.catalog.load_catalog`; ``seed`` seeds stochastic
    planners; ``world`` (a :class:`koi.sim.World` built for the run's scenario and seed) is
    required by — and only given to — the references.  ``config`` is the base
    :class:`~koi.config.KoiConfig` of koi's planners (its ablations switch their part off on
    top of it); the baselines do not read it.
    """
    from koi.catalog import load_catalog

    cfg = cfg or BaselineConfig()
    cat = catalog or load_catalog()
    gpus, models = dict(cat.gpus), dict(cat.models)
    if name in ("koi", "koi-nograph", "koi-frozen"):
        from koi.planner import Planner

        return KoiPolicy(Planner(config=koi_config(name, config), catalog=cat, name=name))
    if name in REFERENCE and world is None:
        raise InvalidInput(f"{name}: needs the world (koi.sim.build_world(scenario, seed=...))")
    if name == "oracle-koi":
        from koi.baselines._oracle import TruthProfiles
        from koi.planner import Planner
        from koi.sim import TruthModel
        from koi.surrogate import Surrogate

        truth = TruthModel(world.seed, world.cfg.truth)
        base = koi_config("koi", config)
        surrogate = Surrogate(gpus, models, base.surrogate, profiles=TruthProfiles(truth))
        return KoiPolicy(Planner(config=base, catalog=cat, surrogate=surrogate, name=name))
    if name == "oracle":
        if world is None:
            raise InvalidInput("oracle: needs the world (koi.sim.build_world(scenario, seed=...))")
        from koi.baselines._oracle import Oracle
        from koi.sim import TruthModel

        return Oracle(
            gpus=gpus,
            models=models,
            scenario=world.scenario,
            world_seed=world.seed,
            truth=TruthModel(world.seed, world.cfg.truth),
            max_candidates=cfg.max_candidates,
            selector=cfg.selector,
        )
    tk = Toolkit.build(gpus, models)
    rng = np.random.default_rng([seed, len(name)])
    if name == "fcfs":
        return QueueFirstFit("fcfs", tk, fcfs_key)
    if name == "edf":
        return QueueFirstFit("edf", tk, edf_key)
    if name == "best-fixed":
        return BestFixed(tk)
    if name == "per-job":
        return PerJob(tk, max_candidates=cfg.max_candidates)
    if name == "rolling-milp":
        return RollingMilp(
            tk,
            max_candidates=cfg.max_candidates,
            selector=cfg.selector,
        )
    if name == "thompson":
        return Thompson(tk, rng, cfg)
    if name == "evolutionary":
        return Evolutionary(tk, rng, cfg)
    if name in LLM_PLANNERS:
        raise InvalidInput(f"planner {name!r}: needs an LLM plugin (not configured)")
    known = ", ".join((*PLANNERS, *EXTRA_PLANNERS))
    raise InvalidInput(f"planner: unknown {name!r}; choose from {known}")

"""The synthetic world's truth (``world = "synthetic"``): the surrogate's prior times factors.

This is the old, closed-form construction, kept for tests that need the truth in closed form;
the built-in scenarios use the measured world (:mod:`koi.sim._measured`).  Per (GPU, engine,
model class) the truth draws one multiplicative factor per step-time
component from the documented ranges of :class:`~koi.sim.TruthConfig`; collective communication
on PCIe at high tensor parallelism is several times slower than the ring model says.  The true
step time of a replica is the surrogate operator model's step, scaled by those factors, by the
current speed of the GPU type (engine/driver updates), by a per-replica slowdown (degraded
replicas) and by per-step noise.  Nothing here is reachable from a policy.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable

import attrs
import numpy as np

from koi.sim._config import TruthConfig
from koi.surrogate import MemoStepModel
from koi.surrogate.replay import StepTime, StepTimeModel
from koi.types import Config, Environment, GpuSpec, LinkKind, ModelSpec

__all__ = [
    "ReplicaLimits",
    "SpeedBoard",
    "TrueStepModel",
    "TruthFactors",
    "TruthModel",
    "event_rng",
    "stable_seed",
]

# ``TruthConfig.pcie_comm_tp8`` is the PCIe communication multiplier at TP=8 (log2 8 = 3); a
# smaller TP moves it toward 1 in proportion to log2(tp).
_PCIE_TP8_LOG2 = 3.0


def stable_seed(*parts: object) -> int:
    """A process-independent 32-bit seed for a tuple of labels (``hash()`` is salted)."""
    return zlib.crc32("\x1f".join(map(str, parts)).encode())


def event_rng(seed: int, index: int) -> np.random.Generator:
    """The generator the world uses for its ``index``-th scheduled event (sorted by time).

    A driver update without a given speed draws it from this generator, so a reference
    planner (the oracle) that replays the scenario's events draws the same speeds.
    """
    return np.random.default_rng([seed, stable_seed("event", index)])


@attrs.frozen
class ReplicaLimits:
    """What one replica's engine really runs with: KV capacity, scheduler limits and the stall
    each preempted sequence costs (see :class:`~koi.surrogate.replay.ReplicaSpec`)."""

    kv_capacity_tokens: int
    max_batch_size: int
    max_batched_tokens: int
    mixed_prefill: bool
    chunk_admission: bool = False
    preempt_stall_s: float = 0.0
    preempt_stall_s_per_token: float = 0.0


@attrs.frozen
class TruthFactors:
    """Multipliers applied to each :class:`StepTime` component (1.0 = the prior is right)."""

    compute: float
    memory: float
    comm: float
    bubble: float
    overhead: float


@attrs.define
class SpeedBoard:
    """Current speed of each GPU type (and engine) after engine/driver updates; 1.0 at start.

    Step times divide by the speed, so 0.8 means 25 % slower steps.
    """

    _speed: dict[tuple[str, str | None], float] = attrs.field(factory=dict)

    def speed(self, gpu: str, engine: str) -> float:
        return self._speed.get((gpu, None), 1.0) * self._speed.get((gpu, engine), 1.0)

    def update(self, gpu: str, factor: float, *, engine: str | None = None) -> None:
        """Multiply the speed of ``gpu`` (optionally only under ``engine``) by ``factor``."""
        self._speed[gpu, engine] = self._speed.get((gpu, engine), 1.0) * factor

    def drift(
        self,
        gpu: str,
        rng: np.random.Generator,
        error: tuple[float, float],
        *,
        engine: str | None = None,
        speed: float | None = None,
    ) -> float:
        """An engine/driver update: ``speed`` or one drawn ``error`` away, faster or slower
        with equal odds, applied and returned."""
        if speed is None:
            m = rng.uniform(*error)
            speed = 1.0 + m if rng.uniform() < 0.5 else 1.0 / (1.0 + m)
        self.update(gpu, speed, engine=engine)
        return speed


class TrueStepModel:
    """A :class:`StepTimeModel` for one replica under the truth.

    ``step = prior.step(...).scaled(f_c, f_m, f_k, f_b, f_o) * slow / speed * noise`` where the
    ``f`` are the hidden :class:`TruthFactors`, ``slow`` the replica's degradation, ``speed`` the
    GPU type's current speed from the :class:`SpeedBoard` and ``noise`` a log-normal factor of
    CV ``noise_cv``.  The noise is a deterministic function of the iteration's batch shape
    (prefill tokens and decode sequences, hashed into a seeded table), so that the engine's
    step-time cache stays exact while iterations of different shapes still scatter around the
    systematic error.
    """

    __slots__ = ("_board", "_engine", "_factors", "_gpu", "_noise", "_prior", "slow")

    def __init__(
        self,
        prior: StepTimeModel,
        factors: TruthFactors,
        *,
        board: SpeedBoard,
        gpu: str,
        engine: str,
        slow: float = 1.0,
        noise: np.ndarray | None = None,
    ) -> None:
        self._prior = prior
        self._factors = factors
        self._board = board
        self._gpu = gpu
        self._engine = engine
        self.slow = slow
        self._noise = noise.tolist() if noise is not None and noise.size else [1.0]

    def step(
        self,
        *,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepTime:
        base = self._prior.step(
            prefill_tokens=prefill_tokens,
            prefill_pairs=prefill_pairs,
            decode_seqs=decode_seqs,
            decode_context_tokens=decode_context_tokens,
        )
        # Noise keyed by the batch shape only: affine in pairs and context, like the prior, so
        # the engine's affine step-time cache stays exact.
        key = f"{prefill_tokens}:{decode_seqs}"
        n = self._noise[zlib.crc32(key.encode()) % len(self._noise)]
        k = n * self.slow / self._board.speed(self._gpu, self._engine)
        f = self._factors
        return base.scaled(
            compute=f.compute * k,
            memory=f.memory * k,
            comm=f.comm * k,
            bubble=f.bubble * k,
            overhead=f.overhead * k,
        )


PriorFactory = Callable[[GpuSpec, ModelSpec, Config], StepTimeModel]


def _default_prior(gpu: GpuSpec, model: ModelSpec, config: Config) -> StepTimeModel:
    from koi.surrogate import OperatorModel

    return OperatorModel(gpu, model, config)


class TruthModel:
    """Draws and holds the hidden efficiency factors of one seeded world.

    Factors are a pure function of ``(seed, gpu, engine, model class, link, tp)``: two runs with
    the same seed see the same hardware whatever the policy does.
    """

    kind = "synthetic"

    def __init__(
        self,
        seed: int,
        cfg: TruthConfig | None = None,
        *,
        prior: PriorFactory | None = None,
    ) -> None:
        self._seed = seed
        self._cfg = cfg or TruthConfig()
        self._prior = prior or _default_prior
        self._priors: dict[tuple[str, str, Config], MemoStepModel] = {}
        self.board = SpeedBoard()

    def _relative(self, rng: np.random.Generator, span: tuple[float, float]) -> float:
        m = rng.uniform(*span)
        slower = rng.uniform() < self._cfg.slow_bias
        return 1.0 + m if slower else 1.0 / (1.0 + m)

    def factors(self, gpu: GpuSpec, model: ModelSpec, config: Config) -> TruthFactors:
        """Hidden factors of ``(gpu, engine, model class)``; comm also depends on link and tp."""
        c = self._cfg
        rng = np.random.default_rng(
            [self._seed, stable_seed(gpu.name, config.engine, model.size_class)]
        )
        compute = self._relative(rng, c.compute_error)
        memory = self._relative(rng, c.memory_error)
        bubble = self._relative(rng, c.bubble_error)
        overhead = self._relative(rng, c.overhead_error)
        comm = self._relative(rng, c.comm_error)
        u = rng.uniform()
        if LinkKind(gpu.link) is LinkKind.PCIE and config.tp > 1:
            lo, hi = c.pcie_comm_tp8
            at8 = lo + u * (hi - lo)
            comm = 1.0 + (at8 - 1.0) * min(1.0, math.log2(config.tp) / _PCIE_TP8_LOG2)
        return TruthFactors(compute, memory, comm, bubble, overhead)

    def step_model(
        self,
        gpu: GpuSpec,
        model: ModelSpec,
        config: Config,
        *,
        slow: float = 1.0,
        environment: Environment | None = None,
    ) -> TrueStepModel:
        """The true step-time model of one replica (``slow`` > 1 for a degraded replica).

        ``environment`` is accepted for the common truth interface and ignored: the synthetic
        truth keys the interconnect by the GPU's catalog link only.

        A pure function of the seed, the chain and ``slow`` (its noise table included), so a
        reference planner holding a :class:`TruthModel` of the same seed sees the same steps.
        """
        del environment
        cv = self._cfg.step_noise_cv
        noise = None
        if cv > 0:
            label = stable_seed("noise", gpu.name, model.name, config, slow)
            rng = np.random.default_rng([self._seed, label])
            sigma = math.sqrt(math.log1p(cv * cv))
            noise = np.exp(rng.normal(-0.5 * sigma * sigma, sigma, size=4096))
        key = (gpu.name, model.name, config)
        prior = self._priors.get(key)
        if prior is None:
            prior = self._priors[key] = MemoStepModel(self._prior(gpu, model, config), limit=None)
        return TrueStepModel(
            prior,
            self.factors(gpu, model, config),
            board=self.board,
            gpu=gpu.name,
            engine=config.engine,
            slow=slow,
            noise=noise,
        )

    def limits(
        self, gpu: GpuSpec, model: ModelSpec, config: Config, environment: Environment | None
    ) -> ReplicaLimits | None:
        """Memory and scheduling exactly as the surrogate assumes them (only speed is hidden)."""
        from koi.surrogate import SurrogateConfig, feasibility

        fe = feasibility(gpu, model, config, environment)
        return ReplicaLimits(
            kv_capacity_tokens=max(fe.kv_capacity_tokens, 1),
            max_batch_size=config.max_batch_size,
            max_batched_tokens=config.max_batched_tokens,
            mixed_prefill=SurrogateConfig().engine_profile(config.engine).mixed_prefill,
            chunk_admission=SurrogateConfig().engine_profile(config.engine).chunk_admission,
        )

    def driver_update(
        self,
        gpu: str,
        rng: np.random.Generator,
        *,
        engine: str | None = None,
        speed: float | None = None,
    ) -> float:
        """Move ``gpu``'s speed by ``speed`` (or a drawn 10–30 % either way); return the factor."""
        error = self._cfg.driver_update_error
        return self.board.drift(gpu, rng, error, engine=engine, speed=speed)

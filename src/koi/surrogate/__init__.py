"""The deterministic surrogate (paper §2.3, DESIGN §9): operator-level step times, memory and
feasibility (C2), replay-based serving predictions, corrections and substitution.
"""

from __future__ import annotations

from koi.surrogate._aic import AicProfiles, aic_available
from koi.surrogate._config import Collective, Efficiency, EngineProfile, SurrogateConfig
from koi.surrogate._correct import MemoStepModel, RankCorrection, ScaledStepCache, ScaledStepModel
from koi.surrogate._memory import Feasibility, feasibility
from koi.surrogate._operator import OperatorModel
from koi.surrogate._point import ServingPrediction, predict_serving
from koi.surrogate._predict import Prediction, RankPrediction, Surrogate
from koi.surrogate._protocol import (
    MAX_CONCURRENCY,
    MAX_REQUESTS,
    PROTOCOL_PRESETS,
    LoadProtocol,
    protocol_preset,
)
from koi.surrogate._replay_adapter import replay_horizon
from koi.surrogate._substitute import (
    ProfileSource,
    Substitution,
    architecture_distance,
    nearest_architecture,
    select_step_model,
)

__all__ = [
    "MAX_CONCURRENCY",
    "MAX_REQUESTS",
    "PROTOCOL_PRESETS",
    "AicProfiles",
    "Collective",
    "Efficiency",
    "EngineProfile",
    "Feasibility",
    "LoadProtocol",
    "MemoStepModel",
    "OperatorModel",
    "Prediction",
    "ProfileSource",
    "RankCorrection",
    "RankPrediction",
    "ScaledStepCache",
    "ScaledStepModel",
    "ServingPrediction",
    "Substitution",
    "Surrogate",
    "SurrogateConfig",
    "aic_available",
    "architecture_distance",
    "feasibility",
    "nearest_architecture",
    "predict_serving",
    "protocol_preset",
    "replay_horizon",
    "select_step_model",
]

"""The replay engine: continuous batching over replicas, driven by a step-time model."""

from __future__ import annotations

from koi.surrogate.replay._step import StepTime, StepTimeModel

__all__ = ["StepTime", "StepTimeModel"]

"""Shared test configuration."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

pytest.register_assert_rewrite("koi.testing.contracts")

# CI machines are small and shared: fewer examples, no deadline flakiness.
settings.register_profile(
    "ci", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

"""The numpydoc examples in the evidence packages run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "koi.beliefs._beta",
    "koi.beliefs._invariance",
    "koi.cusum._sigma",
    "koi.risk._breach",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0
    assert result.failed == 0

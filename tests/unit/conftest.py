"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest

from worker.engines.espeak import EspeakEngine


@pytest.fixture(scope="module")
def engine() -> EspeakEngine:
    """The embedded espeak engine, one per test module."""
    return EspeakEngine()

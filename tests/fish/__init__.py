"""Tests of the Fish Speech engine (they need the optional ``fish`` extra, which ``make test`` installs)."""

from __future__ import annotations

from tests.support.engine_jobs import require_package


def require_fish_speech() -> None:
    """Skip the calling test (tests/fish/conftest.py calls it for each module) where ``fish_speech`` does not
    import (a failure under CI)."""

    def load() -> object:
        from worker.engines.fish import import_fish_speech

        return import_fish_speech()

    require_package(load, "fish_speech", "fish")

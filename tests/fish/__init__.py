"""Tests of the Fish Speech engine (they need the optional ``fish`` extra, which ``make test`` installs)."""

from __future__ import annotations

import os

import pytest


def require_fish_speech() -> None:
    """Skip the calling test module where ``fish_speech`` does not import, with the reason; under CI
    (``CI`` or ``TOME_TEST_REQUIRE_SERVICES=1``, as ``.ci/run`` sets) that is a failure instead, never a
    silent skip."""
    try:
        from worker.engines.fish import import_fish_speech

        import_fish_speech()
    except ImportError as exc:  # pragma: no cover - depends on the environment
        if os.environ.get("CI") or os.environ.get("TOME_TEST_REQUIRE_SERVICES") == "1":
            raise
        pytest.skip(f"fish_speech is not importable ({exc}); install the fish extra", allow_module_level=True)

"""Tests of the Qwen3-TTS engine (they need the optional ``qwen3`` extra, which ``make test`` installs)."""

from __future__ import annotations

import os

import pytest


def require_qwen_tts() -> None:
    """Skip the calling test module where ``qwen_tts`` does not import, with the reason; under CI (``CI`` or
    ``TOME_TEST_REQUIRE_SERVICES=1``, as ``.ci/run`` sets) that is a failure instead, never a silent skip."""
    try:
        from worker.engines.qwen3 import import_qwen_tts

        import_qwen_tts()
    except ImportError as exc:  # pragma: no cover - depends on the environment
        if os.environ.get("CI") or os.environ.get("TOME_TEST_REQUIRE_SERVICES") == "1":
            raise
        pytest.skip(f"qwen_tts is not importable ({exc}); install the qwen3 extra", allow_module_level=True)

"""Tests of the Qwen3-TTS engine (they need the optional ``qwen3`` extra, which ``make test`` installs)."""

from __future__ import annotations

from tests.support.engine_jobs import require_package


def require_qwen_tts() -> None:
    """Skip the calling test (tests/qwen3/conftest.py calls it for each module) where ``qwen_tts`` does not
    import (a failure under CI)."""

    def load() -> object:
        from worker.engines.qwen3 import import_qwen_tts

        return import_qwen_tts()

    require_package(load, "qwen_tts", "qwen3")

"""Every test here needs ``qwen_tts``: a module's tests are skipped where it does not import (a failure
under CI). The check runs before a module's first test, not when the module is collected: importing
qwen-tts (torch, transformers) costs seconds of CPU, and every pytest process collects every module, so
the modules here import torch only in the tests and fixtures that use it."""

from __future__ import annotations

import pytest

from tests.qwen3 import require_qwen_tts


@pytest.fixture(scope="module", autouse=True)
def _qwen_tts_imports() -> None:
    require_qwen_tts()

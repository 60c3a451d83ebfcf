"""Every test here needs ``qwen_tts``: a module's tests are skipped where it does not import (a failure
under CI). The check runs before a module's first test, not when the module is collected: importing
qwen-tts (torch, transformers) costs seconds of CPU, and every pytest process collects every module, so
the modules here import torch only in the tests and fixtures that use it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.qwen3 import require_qwen_tts
from tests.qwen3.fast_rows import SR, voice_wave
from tests.qwen3.tiny_checkpoint import build_tiny_checkpoint

if TYPE_CHECKING:
    from worker.engines.base import SpeakerPrompt
    from worker.engines.qwen3 import Qwen3Engine


@pytest.fixture(scope="module", autouse=True)
def _qwen_tts_imports() -> None:
    require_qwen_tts()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny checkpoint (deterministic), built for each module: a loaded model is cached per process by
    its folder, and some modules change theirs (greedy decoding), so no two modules share one."""
    return build_tiny_checkpoint(tmp_path_factory.mktemp("qwen3") / "tiny-base")


@pytest.fixture(scope="module")
def engine(tiny_dir: Path) -> Qwen3Engine:
    """A CPU engine on the tiny checkpoint, its defaults; a module that needs other arguments overrides it."""
    from worker.engines.qwen3 import Qwen3Engine

    return Qwen3Engine(tiny_dir, device="cpu")


@pytest.fixture(scope="module")
def prompts(engine: Qwen3Engine) -> list[SpeakerPrompt]:
    """Three voices' prompts, made by the module's own ``engine``."""
    return [
        engine.encode_speaker(voice_wave(110.0, 1), SR, "Hello there, this is a low voice."),
        engine.encode_speaker(voice_wave(220.0, 2), SR, "And this one is higher."),
        engine.encode_speaker(voice_wave(160.0, 3), SR, ""),  # x-vector only: no reference codes
    ]

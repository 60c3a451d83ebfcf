"""What the fast-runner tests share: the texts, reference tones and qwen-tts's own frames for a request
(the oracle), and a request as the fast loop's row. torch and the engine's loop are imported in the
functions that use them (tests/qwen3/conftest.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

    from worker.engines.base import SpeakerPrompt
    from worker.engines.qwen3 import Qwen3Engine
    from worker.engines.qwen3_loop import LoopRow

SR = 24000
GREEDY = {"do_sample": False, "subtalker_dosample": False}
TEXTS = (
    "The keeper climbed the stairs and counted every step.",
    "A fisherman mended his net.",
    "Beyond the wall, the ships passed slowly into the night, one by one.",
    "Short.",
    "The tide turned, and the quay was quiet once again.",
)


def voice_wave(f0: float, seed: int) -> np.ndarray:
    """Two seconds of a hummed tone at ``f0`` with a little noise: a reference to encode."""
    t = np.arange(2 * SR, dtype=np.float64) / SR
    noise = np.random.default_rng(seed).standard_normal(t.size)
    return (0.3 * np.sin(2 * np.pi * f0 * t) + 0.01 * noise).astype(np.float32)


def _generate_args(engine: Qwen3Engine, text: str, prompt: SpeakerPrompt) -> dict[str, Any]:
    qm = engine.model
    item = engine.prompt_item(prompt)
    ref = [qm._tokenize_texts([qm._build_ref_text(item.ref_text)])[0] if item.ref_text else None]
    return {
        "input_ids": qm._tokenize_texts([qm._build_assistant_text(text)]),
        "ref_ids": ref,
        "voice_clone_prompt": qm._prompt_items_to_voice_clone_prompt([item]),
        "languages": ["english"],
        "non_streaming_mode": False,
    }


def reference_frames(engine: Qwen3Engine, text: str, prompt: SpeakerPrompt, **kwargs: Any) -> torch.Tensor:
    """qwen-tts's own generate for one request: its codec frames."""
    import torch

    qm = engine.model
    with torch.inference_mode():
        codes, _ = qm.model.generate(
            **_generate_args(engine, text, prompt), **qm._merge_generate_kwargs(**kwargs)
        )
    frames: torch.Tensor = codes[0].cpu()
    return frames


def loop_row(engine: Qwen3Engine, text: str, prompt: SpeakerPrompt, seed: int = 0, **kwargs: Any) -> LoopRow:
    """The fast loop's row for one request, captured from qwen-tts's own prompt building."""
    from worker.engines.qwen3_loop import capture_prompt, row_from_capture

    qm = engine.model
    captured = capture_prompt(
        qm.model, **_generate_args(engine, text, prompt), **qm._merge_generate_kwargs(**kwargs)
    )
    return row_from_capture(captured, seed)

"""``constant``: a fixed short tone for every chunk, at no cost (the orchestration benchmark's engine).

``make bench`` measures what Tome itself adds to every chunk (database round trips, broker hops, file
writes) with this engine, so that the engine's own time is out of the figures: ``synthesize`` returns the
same 0.1 s, 220 Hz tone for every request without looking at the text, and the speaker prompt is one
number (the reference's RMS level, so that a prompt is still computed from the reference). A real engine
behind the real protocol and registry, not a stand-in for one: a process that loads ``bench.engines``
(``TOME_ENGINE_MODULES``) renders a (useless) book with it. Pure module: numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from worker.engines.base import SynthesisRequest, Waveform
from worker.engines.spec import NoSettings

SAMPLE_RATE = 24_000
TONE_SECONDS = 0.1
TONE_HZ = 220.0


def _tone() -> Waveform:
    t = np.arange(int(SAMPLE_RATE * TONE_SECONDS), dtype=np.float32) / SAMPLE_RATE
    wave = (0.3 * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.float32)
    wave.setflags(write=False)  # shared by every request: nobody may change it in place
    return wave


class ConstantEngine:
    name = "constant"
    version = "constant/1"
    sample_rate = SAMPLE_RATE
    max_chunk_chars = 200
    prompt_shapes: Mapping[str, tuple[int, ...]] = {"rms": (1,)}

    def __init__(self) -> None:
        self._tone = _tone()

    def encode_speaker(
        self, audio: Waveform, sample_rate: int, ref_text: str
    ) -> dict[str, npt.NDArray[np.generic]]:
        samples = np.asarray(audio, dtype=np.float32)
        rms = float(np.sqrt(np.mean(np.square(samples)))) if samples.size else 0.0
        return {"rms": np.asarray([rms], dtype=np.float32)}

    def synthesize(self, batch: Sequence[SynthesisRequest]) -> list[Waveform]:
        # A copy each: callers trim and fade the waveform they get.
        return [self._tone.copy() for _ in batch]


def create(settings: NoSettings) -> ConstantEngine:
    """The engine as the registry builds it (it has no settings)."""
    return ConstantEngine()

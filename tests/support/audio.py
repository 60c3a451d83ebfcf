"""Audio that tests need: a spoken reference recording, made with the embedded engine itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from worker.audio import write_wav_atomic
from worker.engines import SynthesisRequest, get_engine

TRANSCRIPT = (
    "The old lighthouse keeper climbed the stairs every evening, counting each step, "
    "and watched the ships pass slowly beyond the harbour wall."
)
# The shared reference recording's transcript (``reference_audio``): about 4 s of espeak speech. Every
# voice built from it has its reference heard by the transcript check (pocketsphinx), whose time grows
# with the recording: 0.16 s of CPU for this one, 0.27 s for TRANSCRIPT's 7.3 s (docs/benchmarks.md).
REFERENCE_TEXT = "The old lighthouse keeper climbed the stairs every evening, counting each step."


def speak(text: str, prompt: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, int]:
    engine = get_engine("espeak")
    [wave] = engine.synthesize([SynthesisRequest(text, prompt or {})])
    return wave, engine.sample_rate


def reference_wav(folder: Path, text: str = REFERENCE_TEXT) -> tuple[bytes, str]:
    wave, rate = speak(text)
    path = folder / "reference.wav"
    write_wav_atomic(path, wave, rate)
    return path.read_bytes(), text


def pitched_reference(folder: Path, f0: float, wpm: float, text: str = TRANSCRIPT) -> Path:
    """A reference recording of ``text`` spoken by espeak at median pitch ``f0`` and ``wpm`` words per
    minute: distinct speakers for tests that check a voice is followed."""
    prompt = {"f0_median_hz": np.array([f0], np.float32), "words_per_minute": np.array([wpm], np.float32)}
    wave, rate = speak(text, prompt)
    path = folder / f"ref-{f0:.0f}-{wpm:.0f}.wav"
    write_wav_atomic(path, wave, rate)
    return path

"""Reference recordings as the neural engines (Fish Speech, Qwen3-TTS) take them: the checks of
``encode_speaker``'s input, and the synthetic reference their warm-ups encode (pure: numpy only)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from worker.engines.base import EngineError, Waveform

MIN_SAMPLE_RATE = 8000
MIN_REFERENCE_SECONDS = 0.5


def check_sample_rate(sample_rate: object) -> None:
    """:class:`EngineError` unless ``sample_rate`` is an integer (a bool is not one) of at least
    :data:`MIN_SAMPLE_RATE` Hz."""
    if (
        isinstance(sample_rate, bool)
        or not isinstance(sample_rate, int | np.integer)
        or sample_rate < MIN_SAMPLE_RATE
    ):
        raise EngineError(
            f"reference sample rate must be an integer >= {MIN_SAMPLE_RATE} Hz, not {sample_rate!r}"
        )


def mono_reference(audio: npt.ArrayLike, sample_rate: int) -> Waveform:
    """The reference as contiguous mono float32: a 2-D array's channels (its shorter axis) averaged,
    NaN and infinities made 0. :class:`EngineError` if it is not mono or stereo-like, or shorter than
    :data:`MIN_REFERENCE_SECONDS`."""
    x = np.asarray(audio, dtype=np.float32)
    if x.ndim == 2 and min(x.shape) >= 1:
        x = x.mean(axis=int(np.argmin(x.shape)))
    if x.ndim != 1:
        raise EngineError(f"reference audio must be mono (1-D), got shape {x.shape}")
    wav = np.ascontiguousarray(np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0), dtype=np.float32)
    if wav.size / sample_rate < MIN_REFERENCE_SECONDS:
        raise EngineError(f"reference audio is shorter than {MIN_REFERENCE_SECONDS} s")
    return wav


def sine_reference(sample_rate: int) -> Waveform:
    """One second of a 150 Hz sine at amplitude 0.1: the reference a warm-up encodes (no recording is
    needed to load a model and take its first-call paths)."""
    t = np.arange(sample_rate, dtype=np.float32) / sample_rate
    return (0.1 * np.sin(2 * np.pi * 150.0 * t)).astype(np.float32)

"""Small waveform edits applied to rendered chunks before they are stored."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from worker.audio.pcm import Waveform

_FRAME_MS = 10.0


def trim_silence(
    samples: npt.NDArray[np.floating], sample_rate: int, threshold_db: float = -50.0, keep_ms: float = 20.0
) -> Waveform:
    """Cut leading and trailing silence, keeping ``keep_ms`` of margin on each side.

    The signal is cut into 10 ms frames; a frame is silent when its peak stays below ``threshold_db``
    relative to full scale (1.0). Everything before the first and after the last non-silent frame,
    minus the margin, is removed. All-silent input yields an empty array. Returns a new float32 array.
    """
    x = _mono(samples)
    start, end = silence_bounds(x, sample_rate, threshold_db, keep_ms)
    return x[start:end].copy()


def silence_bounds(
    samples: npt.NDArray[np.floating], sample_rate: int, threshold_db: float = -50.0, keep_ms: float = 20.0
) -> tuple[int, int]:
    """Where :func:`trim_silence` cuts: (first sample kept, one past the last); (0, 0) if all silent."""
    x = _mono(samples)
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    threshold = 10.0 ** (threshold_db / 20.0)
    loud = np.flatnonzero(np.abs(x) >= threshold)
    if loud.size == 0:
        return 0, 0
    frame = max(1, round(_FRAME_MS * sample_rate / 1000.0))
    keep = max(0, round(keep_ms * sample_rate / 1000.0))
    first_frame_start = (int(loud[0]) // frame) * frame
    last_frame_end = (int(loud[-1]) // frame + 1) * frame
    return max(0, first_frame_start - keep), min(x.size, last_frame_end + keep)


def apply_fades(samples: npt.NDArray[np.floating], sample_rate: int, fade_ms: float = 5.0) -> Waveform:
    """Raised-cosine fade in and fade out of ``fade_ms`` at the edges; returns a new float32 array.

    The first and last samples become exactly 0 and the samples between the two fades are unchanged.
    Fades are shortened to half the signal each when the signal is shorter than two fades.
    """
    out = _mono(samples).copy()
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    n = min(round(fade_ms * sample_rate / 1000.0), out.size // 2)
    if n <= 0:
        return out
    ramp = (0.5 - 0.5 * np.cos(np.pi * np.arange(n) / n)).astype(np.float32)
    out[:n] *= ramp
    out[out.size - n :] *= ramp[::-1]
    return out


def _mono(samples: npt.NDArray[np.floating]) -> Waveform:
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"samples must be a 1-D mono array, got shape {x.shape}")
    return x

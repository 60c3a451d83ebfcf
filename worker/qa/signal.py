"""Signal helpers of the chunk QA (numpy only): band-limited resampling and run lengths."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["longest_run", "resample", "runs"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def resample(audio: npt.ArrayLike, sample_rate: int, target_rate: int) -> FloatArray:
    """``audio`` at ``target_rate``, band-limited to the lower Nyquist frequency (FFT method: the signal is
    zero-padded to a whole number of output samples, its spectrum cut or padded, and transformed back).

    Exact for a band-limited signal, apart from the wrap-around of the FFT's periodic assumption, which
    for chunk audio (silence at both ends) is negligible. Cost O(n log n); a 30 s chunk takes ~20 ms."""
    x = np.asarray(audio, dtype=np.float64)
    if sample_rate <= 0 or target_rate <= 0:
        raise ValueError(f"sample rates must be positive, got {sample_rate} and {target_rate}")
    if sample_rate == target_rate or x.size == 0:
        return x.copy()
    step = sample_rate // math.gcd(sample_rate, target_rate)
    padded = np.concatenate((x, np.zeros((-x.size) % step)))
    n_out = padded.size * target_rate // sample_rate
    spectrum = np.fft.rfft(padded)
    kept = min(spectrum.size, n_out // 2 + 1)
    out_spectrum = np.zeros(n_out // 2 + 1, dtype=np.complex128)
    out_spectrum[:kept] = spectrum[:kept]
    y = np.fft.irfft(out_spectrum, n_out) * (n_out / padded.size)
    return y[: x.size * target_rate // sample_rate]


def runs(mask: BoolArray) -> list[tuple[int, int]]:
    """``[start, end)`` index ranges of the True runs of ``mask``."""
    padded = np.concatenate(([False], np.asarray(mask, dtype=np.bool_), [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def longest_run(mask: BoolArray) -> int:
    """Length of the longest True run of ``mask`` (0 if none)."""
    return max((b - a for a, b in runs(mask)), default=0)

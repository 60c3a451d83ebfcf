"""Mastering: per-chunk gain to one loudness target, a true-peak limiter, and the RMS a file will have.

Each chunk is measured when it is rendered (:func:`worker.audio.loudness.measure`); at stitching,
:func:`chunk_gain_db` turns its stored loudness into the gain that brings it to the target, and
:func:`apply` applies that gain and limits the chunk's true peak, one chunk in memory at a time, so that
the book stays a stream. :func:`predicted_rms_db` gives the RMS of a whole file from the stored figures
(the ACX window is an RMS window) before a sample of it is read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from worker.audio.loudness import Levels, oversampled_peak, true_peak_envelope
from worker.audio.pcm import Waveform

__all__ = ["ATTACK_S", "RELEASE_S", "Mastering", "apply", "chunk_gain_db", "predicted_rms_db"]

ATTACK_S = 0.004
"""How long the limiter takes to reach its full reduction before a peak (an S-shaped ramp)."""

RELEASE_S = 0.08
"""Time constant of the limiter's exponential recovery after a peak."""

_KERNEL_REACH = 10
"""Input samples on each side of a sample that its oversampled points depend on (resample_poly, 4x)."""

_MAX_PASSES = 4


@dataclass(frozen=True)
class Mastering:
    """The mastering decision of a job: every chunk is brought to ``target_lufs`` (integrated loudness,
    so that passages and voices do not jump), by at most ``max_gain_db`` either way (a near-silent chunk
    is not boosted into a roar of noise), under a true-peak ceiling of ``true_peak_db`` dBTP.

    The defaults aim at ACX (RMS from -23 to -18 dB, peaks at most -3 dBFS). The unweighted RMS of
    speech is close to its loudness (espeak: within 0.4 dB), and the limiter takes a little of both
    (espeak: 0.6-0.7 dB at these settings), so -18 LUFS lands near the top of ACX's window;
    :func:`predicted_rms_db` tells, before stitching, where the file will land.
    """

    target_lufs: float = -18.0
    true_peak_db: float = -3.0
    max_gain_db: float = 20.0

    def __post_init__(self) -> None:
        _check_range("target_lufs", self.target_lufs, -35.0, -10.0)
        _check_range("true_peak_db", self.true_peak_db, -9.0, 0.0)
        _check_range("max_gain_db", self.max_gain_db, 0.0, 40.0)


def chunk_gain_db(levels: Levels, mastering: Mastering) -> float:
    """The gain (dB) that brings a chunk measured as ``levels`` to ``mastering.target_lufs``, clamped to
    +-``max_gain_db``; 0 when the chunk has no loudness (too short, silent or gated out)."""
    if levels.lufs is None:
        return 0.0
    gain = mastering.target_lufs - levels.lufs
    return max(-mastering.max_gain_db, min(mastering.max_gain_db, gain))


def apply(
    samples: npt.NDArray[np.floating], sample_rate: int, gain_db: float, mastering: Mastering
) -> Waveform:
    """``samples`` times ``gain_db``, then limited so that their true peak (4x oversampled, as
    :func:`~worker.audio.loudness.oversampled_peak` reads it) is at most ``mastering.true_peak_db``.

    The limiter sees the whole chunk (chunks are short), so its look-ahead is free: the gain each sample
    needs is held and smoothed so that it falls along an S-curve from ``ATTACK_S`` before a peak and
    recovers exponentially over ``RELEASE_S``, never above the gain any sample needs; the result's true
    peak is measured again and the pass repeated with a lower ceiling if interpolation still overshoots.
    See docs/api.md, "Mastering" (the limiter's steps).

    A chunk whose gained true peak is under the ceiling is returned as ``samples * gain`` untouched.
    The result is float32 of the same length. Raises ``ValueError`` for a multi-channel array, NaN or
    infinite samples or gain, samples that are not floating point, or a bad ``sample_rate``.
    """
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    if not math.isfinite(gain_db):
        raise ValueError(f"gain_db must be finite, got {gain_db}")
    x = np.asarray(samples)
    if x.ndim != 1:
        raise ValueError(f"samples must be a 1-D mono array, got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"samples must be floating point, got {x.dtype}")
    y = x.astype(np.float64) * 10.0 ** (gain_db / 20.0)
    if not np.isfinite(y).all():
        raise ValueError("samples contain NaN or infinite values")
    if y.size == 0:
        return np.zeros(0, dtype=np.float32)
    limit = 10.0 ** (mastering.true_peak_db / 20.0)
    ceiling = limit * (1.0 - 1e-6)  # what the result must meet: float32 rounding then stays under the limit
    target = limit * (1.0 - 1e-5)  # what the limiter aims at: rounding in its arithmetic stays under ceiling
    out = y
    for _ in range(_MAX_PASSES):
        gain = _limiter_gain(y, sample_rate, target)
        if gain is None:  # nothing reaches the ceiling (a later pass always finds the same peaks)
            return _float32(out)
        out = y * gain
        peak = oversampled_peak(out)
        if peak <= ceiling:
            return _float32(out)
        target *= ceiling / peak
    return _float32(out * (ceiling / peak))


def predicted_rms_db(
    pieces: Iterable[tuple[Levels, float]], silence_samples: int, floor_rms: float
) -> float | None:
    """RMS (dBFS) of a file made of chunks, each ``(levels, gain_db)``, and ``silence_samples`` of
    pauses filled with room tone of linear RMS ``floor_rms`` (0 for digital silence), from the stored
    energies alone: ``10 log10((sum energy * 10**(gain/10) + silence * floor_rms**2) / samples)``.

    Exact for gain alone. The limiter only takes energy away, so with limited chunks this is an upper
    bound: espeak speech brought to -18 LUFS under a -3 dBTP ceiling (peaks 16-19 dB over its loudness)
    reads 0.5-0.7 dB lower than predicted; speech whose peaks stay under the ceiling, as predicted.
    ``None`` for a file of digital silence or no samples. Raises ``ValueError`` for a negative count or
    a negative or non-finite RMS or gain.
    """
    if silence_samples < 0:
        raise ValueError(f"silence_samples must not be negative, got {silence_samples}")
    if not (math.isfinite(floor_rms) and floor_rms >= 0.0):
        raise ValueError(f"floor_rms must be a finite non-negative amplitude, got {floor_rms}")
    energy = silence_samples * floor_rms * floor_rms
    count = silence_samples
    for levels, gain_db in pieces:
        if not math.isfinite(gain_db):
            raise ValueError(f"gain_db must be finite, got {gain_db}")
        energy += levels.energy * 10.0 ** (gain_db / 10.0)
        count += levels.samples
    if count == 0 or energy <= 0.0:
        return None
    return 10.0 * math.log10(energy / count)


def _limiter_gain(
    y: npt.NDArray[np.float64], sample_rate: int, ceiling: float
) -> npt.NDArray[np.float64] | None:
    """The limiter's gain per sample for the gained chunk ``y`` (steps 1-4 of :func:`apply`), or
    ``None`` when nothing in ``y`` reaches ``ceiling``."""
    from scipy.ndimage import minimum_filter1d  # imported on first use (worker.audio.loudness says why)

    envelope = np.maximum(true_peak_envelope(y, ceiling), np.abs(y))
    over = np.flatnonzero(envelope > ceiling)
    if over.size == 0:
        return None
    needed = np.ones_like(y)
    needed[over] = ceiling / envelope[over]
    half_attack = max(1, round(ATTACK_S * sample_rate / 2.0))
    hold = 2 * half_attack + _KERNEL_REACH
    reach = hold + 2 * half_attack  # how far steps 2-3 spread a sample's need
    # Steps 2-3 only where they can differ from 1: around each group of loud samples (groups further
    # apart than 4 reaches are independent, and a segment reaching 2 past its group is flat at its edges).
    reduction = np.zeros_like(y)
    splits = np.flatnonzero(np.diff(over) > 4 * reach) + 1
    for group in np.split(over, splits):
        start, stop = max(0, int(group[0]) - 2 * reach), min(y.size, int(group[-1]) + 2 * reach + 1)
        gain = minimum_filter1d(needed[start:stop], size=2 * hold + 1, mode="nearest")
        gain = _boxcar(_boxcar(gain, half_attack), half_attack)
        reduction[start:stop] = np.clip(1.0 - gain, 0.0, None)
    # Step 4: released[n] = max over k <= n of reduction[k] * exp(-(n - k) / tau), as a running maximum.
    tau = max(1.0, RELEASE_S * sample_rate)
    ramp = np.arange(y.size, dtype=np.float64) / tau
    with np.errstate(divide="ignore"):
        held = np.maximum.accumulate(np.log(reduction) + ramp) - ramp
    released: npt.NDArray[np.float64] = 1.0 - np.maximum(reduction, np.exp(held))
    return released


def _boxcar(x: npt.NDArray[np.float64], radius: int) -> npt.NDArray[np.float64]:
    """Moving average over ``2 radius + 1`` samples, the edges extended (a running-sum difference)."""
    sums = np.concatenate(([0.0], np.cumsum(np.pad(x, radius, mode="edge"))))
    out: npt.NDArray[np.float64] = (sums[2 * radius + 1 :] - sums[: -2 * radius - 1]) / (2 * radius + 1)
    return out


def _float32(x: npt.NDArray[np.float64]) -> Waveform:
    out: Waveform = x.astype(np.float32)
    return out


def _check_range(name: str, value: float, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValueError(f"Mastering.{name} must be a number from {low:g} to {high:g}, got {value!r}")

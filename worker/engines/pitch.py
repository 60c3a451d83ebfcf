"""Pitch and speaking-rate analysis of speech recordings, in numpy only (pure: no Flask, no Celery).

* :func:`track_pitch` — a YIN pitch tracker (de Cheveigné & Kawahara, 2002): difference function computed
  with FFTs, cumulative-mean normalisation, absolute threshold, parabolic interpolation, and a voicing
  decision from the aperiodicity (normalised difference at the chosen lag) and the frame energy.
* :func:`speech_activity` / :func:`speech_seconds` — an energy detector; the speech duration is the span
  from the first to the last active frame, with every internal pause longer than ``max_pause_s`` counted
  as ``max_pause_s`` (so sentence breaks and breaths of the reference do not dilute the speaking rate).
* :func:`count_words` — words of a transcript.

Everything works at the recording's own sample rate (no resampling).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "PitchTrack",
    "count_words",
    "f0_statistics",
    "frame_levels_db",
    "speech_activity",
    "speech_seconds",
    "track_pitch",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

HOP_S = 0.010  # analysis hop (pitch and energy)
LEVEL_WINDOW_S = 0.025  # energy window
_SILENT_DB = -120.0  # level of digital silence
_BLOCK_FRAMES = 256  # frames per FFT block (bounds memory at high sample rates)


@dataclass(frozen=True)
class PitchTrack:
    """Per-frame analysis: ``f0_hz`` is 0 where ``voiced`` is False; ``aperiodicity`` is YIN's d'(tau)."""

    times_s: FloatArray
    f0_hz: FloatArray
    voiced: BoolArray
    aperiodicity: FloatArray

    @property
    def voiced_f0(self) -> FloatArray:
        return self.f0_hz[self.voiced]


def _as_float(audio: npt.ArrayLike) -> FloatArray:
    x = np.asarray(audio, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"expected mono audio (1-D), got shape {x.shape}")
    return np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)


def _frame_starts(n_samples: int, hop: int) -> npt.NDArray[np.int64]:
    return np.arange(0, max(n_samples, 1), hop, dtype=np.int64)


def frame_levels_db(audio: npt.ArrayLike, sample_rate: int) -> FloatArray:
    """RMS level (dBFS) of ``LEVEL_WINDOW_S`` windows centred every ``HOP_S`` (frame i at ``i * HOP_S``)."""
    x = _as_float(audio)
    hop = max(1, round(sample_rate * HOP_S))
    win = max(1, round(sample_rate * LEVEL_WINDOW_S))
    starts = _frame_starts(x.size, hop) - win // 2
    squares = np.concatenate(([0.0], np.cumsum(x * x)))
    lo = np.clip(starts, 0, x.size)
    hi = np.clip(starts + win, 0, x.size)
    mean_square = (squares[hi] - squares[lo]) / win
    with np.errstate(divide="ignore"):
        levels = 10.0 * np.log10(mean_square)
    return np.maximum(np.nan_to_num(levels, nan=_SILENT_DB, neginf=_SILENT_DB), _SILENT_DB)


def _activity_threshold_db(levels: FloatArray) -> float:
    """Active = within 40 dB of the loudest frame, and 10 dB above the noise floor (10th percentile),
    but never demanding more than 20 dB below the peak; and above -70 dBFS in any case."""
    peak = float(levels.max())
    floor = float(np.percentile(levels, 10))
    return max(peak - 40.0, min(floor + 10.0, peak - 20.0), -70.0)


def speech_activity(audio: npt.ArrayLike, sample_rate: int) -> BoolArray:
    """Per-frame (``HOP_S``) speech/non-speech decision from the energy."""
    levels = frame_levels_db(audio, sample_rate)
    if levels.size == 0:
        return np.zeros(0, dtype=np.bool_)
    return levels > _activity_threshold_db(levels)


def _runs(mask: BoolArray) -> list[tuple[int, int]]:
    """``[start, end)`` index ranges of the True runs of ``mask``."""
    padded = np.concatenate(([False], mask, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def speech_seconds(audio: npt.ArrayLike, sample_rate: int, *, max_pause_s: float = 0.3) -> float:
    """Duration of the speech: leading/trailing silence trimmed, internal pauses capped at ``max_pause_s``."""
    active = speech_activity(audio, sample_rate)
    if not active.any():
        return 0.0
    first = int(np.argmax(active))
    last = int(active.size - 1 - np.argmax(active[::-1]))
    span = active[first : last + 1]
    excess = sum(max(0.0, (b - a) * HOP_S - max_pause_s) for a, b in _runs(~span))
    return max(0.0, (last - first + 1) * HOP_S - excess)


_WORD = re.compile(r"\w+(?:['\u2019\-]\w+)*")


def count_words(text: str) -> int:
    """Words of a transcript: runs of letters/digits, with inner apostrophes and hyphens."""
    return len(_WORD.findall(text))


def _next_pow2(n: int) -> int:
    return 1 << (max(1, n) - 1).bit_length()


def track_pitch(
    audio: npt.ArrayLike,
    sample_rate: int,
    *,
    fmin: float = 50.0,
    fmax: float = 500.0,
    threshold: float = 0.15,
    max_aperiodicity: float = 0.3,
) -> PitchTrack:
    """YIN F0 track, one frame every ``HOP_S`` (frame i is centred at ``i * HOP_S``).

    A frame is voiced when its aperiodicity is below ``max_aperiodicity`` and it is active speech
    (:func:`speech_activity`); isolated voiced frames (runs shorter than 3 frames) are discarded.
    """
    if not 0 < fmin < fmax < sample_rate / 2:
        raise ValueError(f"need 0 < fmin < fmax < sample_rate/2, got {fmin}, {fmax}, {sample_rate}")
    x = _as_float(audio)
    hop = max(1, round(sample_rate * HOP_S))
    tau_min = max(2, int(np.floor(sample_rate / fmax)))
    tau_max = int(np.ceil(sample_rate / fmin))
    window = tau_max  # integration window: one period of the lowest F0
    length = window + tau_max + 1  # samples a frame needs
    starts = _frame_starts(x.size, hop)
    n_frames = starts.size
    # Frame i covers [c - length/2, c + length/2) around its centre c = i * hop.
    offset = length // 2
    padded = np.concatenate((np.zeros(offset), x, np.zeros(length)))
    n_fft = _next_pow2(length + window)
    f0 = np.zeros(n_frames)
    aperiodicity = np.ones(n_frames)
    taus = np.arange(tau_max + 1)
    for block_start in range(0, n_frames, _BLOCK_FRAMES):
        block = starts[block_start : block_start + _BLOCK_FRAMES]
        frames = padded[block[:, None] + np.arange(length)[None, :]]
        # r(tau) = sum_{j<W} x_j x_{j+tau}, as a cross-correlation by FFT.
        spectrum_head = np.fft.rfft(frames[:, :window], n_fft)
        spectrum_all = np.fft.rfft(frames, n_fft)
        corr = np.fft.irfft(np.conj(spectrum_head) * spectrum_all, n_fft)[:, : tau_max + 1]
        squares = np.concatenate((np.zeros((block.size, 1)), np.cumsum(frames * frames, axis=1)), axis=1)
        energy = squares[:, taus + window] - squares[:, taus]  # sum_{j<W} x_{j+tau}^2
        diff = np.maximum(energy[:, :1] + energy - 2.0 * corr, 0.0)
        # Cumulative-mean normalised difference d'(tau), d'(0) = 1.
        cumulative = np.cumsum(diff[:, 1:], axis=1)
        cmnd = np.ones_like(diff)
        with np.errstate(divide="ignore", invalid="ignore"):
            cmnd[:, 1:] = np.where(cumulative > 0, diff[:, 1:] * taus[1:] / cumulative, 1.0)
        search = cmnd[:, tau_min : tau_max + 1]
        below = search < threshold
        has_dip = below.any(axis=1)
        first_dip = np.argmax(below, axis=1)
        # From the first lag under the threshold, walk down to the bottom of that dip.
        descending_stops = np.concatenate(
            (search[:, :-1] <= search[:, 1:], np.ones((block.size, 1), dtype=np.bool_)), axis=1
        )
        after_dip = np.arange(search.shape[1])[None, :] >= first_dip[:, None]
        dip_bottom = np.argmax(descending_stops & after_dip, axis=1)
        best = np.where(has_dip, dip_bottom, np.argmin(search, axis=1))
        tau = best + tau_min
        # Parabolic interpolation of the minimum.
        inner = (tau > tau_min) & (tau < tau_max)
        rows = np.arange(block.size)
        left = cmnd[rows, np.clip(tau - 1, 0, tau_max)]
        mid = cmnd[rows, tau]
        right = cmnd[rows, np.clip(tau + 1, 0, tau_max)]
        curvature = left - 2.0 * mid + right
        with np.errstate(divide="ignore", invalid="ignore"):
            shift = np.where(inner & (curvature > 0), 0.5 * (left - right) / curvature, 0.0)
        shift = np.clip(np.nan_to_num(shift), -0.5, 0.5)
        sl = slice(block_start, block_start + block.size)
        f0[sl] = sample_rate / (tau + shift)
        aperiodicity[sl] = mid
    active = speech_activity(x, sample_rate)[:n_frames]
    voiced = (aperiodicity < max_aperiodicity) & active & (f0 >= fmin * 0.97) & (f0 <= fmax * 1.03)
    for a, b in _runs(voiced):
        if b - a < 3:
            voiced[a:b] = False
    return PitchTrack(
        times_s=(np.arange(n_frames) * HOP_S).astype(np.float64),
        f0_hz=np.where(voiced, f0, 0.0),
        voiced=voiced,
        aperiodicity=aperiodicity,
    )


def f0_statistics(
    track: PitchTrack, *, low_pct: float = 10.0, high_pct: float = 90.0
) -> tuple[float, float] | None:
    """(median F0 in Hz, ``low_pct``..``high_pct`` percentile span in semitones) of the voiced frames,
    or None when fewer than 5 frames are voiced."""
    f0 = track.voiced_f0
    if f0.size < 5:
        return None
    low, median, high = np.percentile(f0, [low_pct, 50.0, high_pct])
    return float(median), float(12.0 * np.log2(high / low))

"""Pitch and speaking-rate analysis of speech recordings, in numpy only (pure: no Flask, no Celery).

* :func:`track_pitch` — a YIN pitch tracker (de Cheveigné & Kawahara, 2002): difference function computed
  with FFTs, cumulative-mean normalisation, absolute threshold, parabolic interpolation, and a voicing
  decision from the aperiodicity (normalised difference at the chosen lag) and the frame energy; then a
  guard against harmonic errors, which a recording without its fundamental (a telephone band starts at
  300 Hz) invites: a voiced frame ten semitones or more above the voiced frames around it takes the
  multiple of its period nearest them.
* :func:`speech_activity` / :func:`speech_seconds` — an energy detector; the speech duration is the span
  from the first to the last active frame, with every internal pause longer than ``max_pause_s`` counted
  as ``max_pause_s`` (so sentence breaks and breaths of the reference do not dilute the speaking rate).
* :func:`count_words` — words of a transcript.

Everything works at the recording's own sample rate (no resampling).
"""

from __future__ import annotations

import re
import warnings
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
# Harmonic errors (see _harmonic_correction).
_HARMONIC_JUMP_ST = 10.0  # a voiced frame this far above its neighbours' median has a harmonic error
_CONTEXT_S = 0.5  # the neighbours: voiced frames within this of the frame


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


def _cmnd(frames: FloatArray, window: int, taus: npt.NDArray[np.int64], n_fft: int) -> FloatArray:
    """Per frame (a row), YIN's cumulative-mean normalised difference d'(tau) for ``taus`` (0 to
    tau_max), d'(0) = 1."""
    tau_max = int(taus[-1])
    # r(tau) = sum_{j<W} x_j x_{j+tau}, as a cross-correlation by FFT.
    spectrum_head = np.fft.rfft(frames[:, :window], n_fft)
    spectrum_all = np.fft.rfft(frames, n_fft)
    corr = np.fft.irfft(np.conj(spectrum_head) * spectrum_all, n_fft)[:, : tau_max + 1]
    squares = np.concatenate((np.zeros((frames.shape[0], 1)), np.cumsum(frames * frames, axis=1)), axis=1)
    energy = squares[:, taus + window] - squares[:, taus]  # sum_{j<W} x_{j+tau}^2
    diff = np.maximum(energy[:, :1] + energy - 2.0 * corr, 0.0)
    cumulative = np.cumsum(diff[:, 1:], axis=1)
    cmnd: FloatArray = np.ones_like(diff)
    with np.errstate(divide="ignore", invalid="ignore"):
        cmnd[:, 1:] = np.where(cumulative > 0, diff[:, 1:] * taus[1:] / cumulative, 1.0)
    return cmnd


def _yin_period(cmnd: FloatArray, tau_min: int, tau_max: int, threshold: float) -> npt.NDArray[np.int64]:
    """Per frame, the lag YIN chooses: the bottom of the first dip under ``threshold`` within
    [tau_min, tau_max], else the deepest lag there."""
    search = cmnd[:, tau_min : tau_max + 1]
    below = search < threshold
    has_dip = below.any(axis=1)
    first_dip = np.argmax(below, axis=1)
    # From the first lag under the threshold, walk down to the bottom of that dip.
    descending_stops = np.concatenate(
        (search[:, :-1] <= search[:, 1:], np.ones((search.shape[0], 1), dtype=np.bool_)), axis=1
    )
    after_dip = np.arange(search.shape[1])[None, :] >= first_dip[:, None]
    dip_bottom = np.argmax(descending_stops & after_dip, axis=1)
    result: npt.NDArray[np.int64] = np.where(has_dip, dip_bottom, np.argmin(search, axis=1)) + tau_min
    return result


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
    (:func:`speech_activity`); isolated voiced frames (runs shorter than 3 frames) are discarded. A
    voiced frame an octave or two above its neighbours (a harmonic's period) then takes the multiple of
    its period nearest them (:func:`_harmonic_correction`); that changes its F0, never which frames are
    voiced.
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
    # Per frame, the period YIN chose (column 0) and its integer multiples (column k-1: k times it,
    # the deepest lag within k/2 samples of it), each as an F0 and its d'(tau); NaN and inf where the
    # multiple is past tau_max.
    n_multiples = max(1, tau_max // tau_min)
    candidate_f0 = np.full((n_frames, n_multiples), np.nan)
    candidate_d = np.full((n_frames, n_multiples), np.inf)
    taus = np.arange(tau_max + 1)
    for block_start in range(0, n_frames, _BLOCK_FRAMES):
        block = starts[block_start : block_start + _BLOCK_FRAMES]
        frames = padded[block[:, None] + np.arange(length)[None, :]]
        cmnd = _cmnd(frames, window, taus, n_fft)
        tau = _yin_period(cmnd, tau_min, tau_max, threshold)
        sl = slice(block_start, block_start + block.size)
        for k in range(1, n_multiples + 1):
            f0_k, d_k = _refine(cmnd, k * tau, k // 2, tau_min, tau_max, sample_rate)
            candidate_f0[sl, k - 1] = f0_k
            candidate_d[sl, k - 1] = d_k
    f0 = candidate_f0[:, 0]
    aperiodicity = candidate_d[:, 0]
    active = speech_activity(x, sample_rate)[:n_frames]
    voiced = (aperiodicity < max_aperiodicity) & active & (f0 >= fmin * 0.97) & (f0 <= fmax * 1.03)
    for a, b in _runs(voiced):
        if b - a < 3:
            voiced[a:b] = False
    f0, aperiodicity = _harmonic_correction(candidate_f0, candidate_d, voiced, max_aperiodicity)
    return PitchTrack(
        times_s=(np.arange(n_frames) * HOP_S).astype(np.float64),
        f0_hz=f0,
        voiced=voiced,
        aperiodicity=aperiodicity,
    )


def _refine(
    cmnd: FloatArray, centre: npt.NDArray[np.int64], half_width: int, tau_min: int, tau_max: int, rate: int
) -> tuple[FloatArray, FloatArray]:
    """Per row, the deepest lag of ``cmnd`` within ``half_width`` of ``centre`` (clipped to
    [tau_min, tau_max]), parabolically interpolated: (F0 in Hz, d' at that lag). NaN / inf where
    ``centre`` is past ``tau_max``."""
    rows = np.arange(cmnd.shape[0])
    offsets = np.arange(-half_width, half_width + 1)
    lags = np.clip(centre[:, None] + offsets[None, :], tau_min, tau_max)
    tau = lags[rows, np.argmin(cmnd[rows[:, None], lags], axis=1)]
    inner = (tau > tau_min) & (tau < tau_max)
    left = cmnd[rows, np.clip(tau - 1, 0, tau_max)]
    mid = cmnd[rows, tau]
    right = cmnd[rows, np.clip(tau + 1, 0, tau_max)]
    curvature = left - 2.0 * mid + right
    with np.errstate(divide="ignore", invalid="ignore"):
        shift = np.where(inner & (curvature > 0), 0.5 * (left - right) / curvature, 0.0)
    shift = np.clip(np.nan_to_num(shift), -0.5, 0.5)
    valid = centre <= tau_max
    return np.where(valid, rate / (tau + shift), np.nan), np.where(valid, mid, np.inf)


def _harmonic_correction(
    candidate_f0: FloatArray, candidate_d: FloatArray, voiced: BoolArray, max_aperiodicity: float
) -> tuple[FloatArray, FloatArray]:
    """(F0, aperiodicity) per frame (F0 0 where unvoiced): YIN's period (column 0), except that a voiced
    frame more than ``_HARMONIC_JUMP_ST`` above the median of the voiced frames around it
    (``_CONTEXT_S`` either side) takes the multiple of its period nearest that median, if that
    multiple is itself periodic (d' under ``max_aperiodicity``).

    Without its fundamental (a telephone band starts at 300 Hz; a low voice loses its second harmonic
    too), a voice's waveform is dominated by the harmonic nearest its first formant, and noise and a
    room blur the repetition at the fundamental's period more than at that harmonic's, which is
    shorter: at voicing onsets and in close vowels d' dips under YIN's threshold at a half, a third or
    a quarter of the period, and the frame reads one or two octaves above its neighbours. Speech does
    not leap ten semitones and back within a syllable, so the neighbours decide; only upwards, the
    direction of those errors, so that a voice's own low notes (a phrase's final fall) stay."""
    f0 = candidate_f0[:, 0].copy()
    aperiodicity = candidate_d[:, 0].copy()
    if voiced.sum() < 5:
        return np.where(voiced, f0, 0.0), aperiodicity
    log_f0 = np.where(voiced, np.log2(np.where(voiced, f0, 1.0)), np.nan)
    local = _local_median(log_f0, round(_CONTEXT_S / HOP_S))
    high = voiced & (log_f0 - local > _HARMONIC_JUMP_ST / 12.0)
    if high.any():
        rows = np.flatnonzero(high)
        with np.errstate(invalid="ignore"):
            distance = np.abs(np.log2(candidate_f0[rows, 1:]) - local[rows, None])
        distance = np.where(candidate_d[rows, 1:] < max_aperiodicity, distance, np.inf)
        distance = np.nan_to_num(distance, nan=np.inf)
        nearest = np.argmin(distance, axis=1)
        better = distance[np.arange(rows.size), nearest] < log_f0[rows] - local[rows]
        moved, column = rows[better], nearest[better] + 1
        f0[moved] = candidate_f0[moved, column]
        aperiodicity[moved] = candidate_d[moved, column]
    return np.where(voiced, f0, 0.0), aperiodicity


def _local_median(values: FloatArray, context: int) -> FloatArray:
    """Per frame, the median of the non-NaN ``values`` within ``context`` frames either side (of all of
    them where fewer than 5 are that near), in blocks so that memory stays bounded on long audio."""
    padded = np.concatenate((np.full(context, np.nan), values, np.full(context, np.nan)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * context + 1)
    local = np.empty(values.size)
    overall = float(np.nanmedian(values))
    for start in range(0, values.size, _BLOCK_FRAMES * 16):
        block = windows[start : start + _BLOCK_FRAMES * 16]
        counts = np.sum(~np.isnan(block), axis=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows: no voiced frame near
            medians = np.nanmedian(block, axis=1)
        local[start : start + block.shape[0]] = np.where(counts >= 5, medians, overall)
    return local


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

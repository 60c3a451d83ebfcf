"""A phrase said twice, heard in the audio itself (pure: numpy only).

A looping decoder says a phrase twice in a row ("walked to the walked to the harbour"); a recogniser
constrained to the text often hears the second copy as the words that follow. But the stretch just
after a doubled phrase sounds like the phrase: the chunk's short-time spectra match at a lag of the
phrase's length for much of that length. Ordinary speech repeats sounds, not phrases at the lag of
their own length.

:func:`self_repeat`: mel cepstra of 25 ms frames every 10 ms, normalised per chunk; for every lag from
``MIN_LAG_S`` to ``MAX_LAG_S`` the frames within ``MATCH_DISTANCE`` of the frame a lag later (both
sounding, the lag free to drift by a few frames), and their longest run (short gaps bridged); the
longest run that covers enough of its lag. :func:`text_repeats` says when the text itself repeats a
phrase nearby, so that the caller leaves the measure alone. Thresholds and how they were set:
``QaPolicy.max_repeat_s`` and docs/qa.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from worker.qa.signal import resample

_RATE = 16000
_HOP = 160  # 10 ms
_WINDOW = 400  # 25 ms
_BANDS = 24
_CEPSTRA = 12  # c1..c12: the spectral envelope, not the level (c0) nor the pitch's fine structure
_HIGH_HZ = 3400.0  # every voice of a telephone band still has this much
_LOW_HZ = 300.0

MIN_LAG_S = 0.35  # a two-word phrase at the fastest pace
MAX_LAG_S = 3.0  # six words at a slow pace
MATCH_DISTANCE = 0.55  # per-dimension RMS distance of normalised cepstra that counts as the same sound
_SILENCE_DB = -60.0  # frames under this (dBFS) never sound
_BRIDGE = 3  # frames of mismatch bridged inside a run (a coarticulated seam, a pitch jump)
_JITTER = 3  # frames either side of the lag (a copy's durations drift by a few frames)


@dataclass(frozen=True)
class Repeat:
    """The strongest repeat found: its lag (s), the length of its matching run (s) and that run's share
    of the lag (``coverage``); where it starts (s)."""

    lag_s: float = 0.0
    run_s: float = 0.0
    coverage: float = 0.0
    at_s: float = 0.0


def _cepstra(y: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Per 10 ms frame: normalised mel cepstra (c1..c12 of the 300-3400 Hz band) and whether it sounds
    (within 35 dB of the chunk's loud frames, above ``_SILENCE_DB``)."""
    n = 1 + max(0, (y.size - _WINDOW) // _HOP)
    if y.size < _WINDOW:
        return np.zeros((0, _CEPSTRA)), np.zeros(0, dtype=bool)
    index = np.arange(n)[:, None] * _HOP + np.arange(_WINDOW)[None, :]
    frames = y[index] * np.hamming(_WINDOW)
    power = np.abs(np.fft.rfft(frames, n=512, axis=1)) ** 2
    freqs = np.fft.rfftfreq(512, 1.0 / _RATE)
    mel = 2595.0 * np.log10(1.0 + freqs / 700.0)
    edges = np.linspace(
        2595.0 * np.log10(1.0 + _LOW_HZ / 700.0), 2595.0 * np.log10(1.0 + _HIGH_HZ / 700.0), _BANDS + 2
    )
    bank = np.zeros((_BANDS, freqs.size))
    for b in range(_BANDS):
        lo, mid, hi = edges[b], edges[b + 1], edges[b + 2]
        bank[b] = np.clip(np.minimum((mel - lo) / (mid - lo), (hi - mel) / (hi - mid)), 0.0, None)
    energy = power @ bank.T + 1e-10
    log_energy = np.log(energy)
    k = np.arange(1, _CEPSTRA + 1)[:, None]
    dct = np.cos(np.pi * k * (np.arange(_BANDS)[None, :] + 0.5) / _BANDS)
    cepstra = log_energy @ dct.T
    level = 10.0 * np.log10(np.mean(frames * frames, axis=1) + 1e-12)
    loud = np.percentile(level, 95) if level.size else 0.0
    sounding = (level > loud - 35.0) & (level > _SILENCE_DB)
    if np.count_nonzero(sounding) >= 2:
        mean = cepstra[sounding].mean(axis=0)
        std = cepstra[sounding].std(axis=0) + 1e-6
        cepstra = (cepstra - mean) / std
    return cepstra, sounding


def _longest(match: npt.NDArray[np.bool_]) -> tuple[int, int]:
    """(start, length) of the longest run of True, gaps of up to ``_BRIDGE`` frames bridged (the
    bridged frames not counted in the length)."""
    hits = np.flatnonzero(match)
    if hits.size == 0:
        return 0, 0
    breaks = np.flatnonzero(np.diff(hits) > _BRIDGE + 1)
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks + 1, [hits.size]))
    counts = ends - starts
    best = int(np.argmax(counts))
    return int(hits[starts[best]]), int(counts[best])


def self_repeat(audio: npt.ArrayLike, sample_rate: int, min_coverage: float = 0.4) -> Repeat:
    """The longest matching run, over the lags where it covers at least ``min_coverage`` of its lag
    (see the module docstring); an empty :class:`Repeat` if there is none."""
    x = np.asarray(audio, dtype=np.float64).reshape(-1)
    if x.size == 0 or sample_rate <= 0:
        return Repeat()
    y = resample(x, sample_rate, _RATE) if sample_rate != _RATE else x
    cepstra, sounding = _cepstra(y)
    n = cepstra.shape[0]
    hop_s = _HOP / _RATE
    min_lag = round(MIN_LAG_S / hop_s)
    max_lag = min(round(MAX_LAG_S / hop_s), n - 1)
    best = Repeat()
    if max_lag < min_lag:
        return best
    dims = cepstra.shape[1]
    # distance at every lag (rows: lags min_lag - jitter .. max_lag + jitter)
    lags = range(max(1, min_lag - _JITTER), min(n - 1, max_lag + _JITTER) + 1)
    dist: dict[int, npt.NDArray[np.float64]] = {}
    for lag in lags:
        diff = cepstra[:-lag] - cepstra[lag:]
        d = np.sqrt(np.sum(diff * diff, axis=1) / dims)
        both = sounding[:-lag] & sounding[lag:]
        dist[lag] = np.where(both, d, np.inf)
    for lag in range(min_lag, max_lag + 1):
        size = n - lag - _JITTER
        if size <= 0:
            break
        near = dist[lag][:size]
        for j in range(1, _JITTER + 1):
            if lag - j in dist:
                near = np.minimum(near, dist[lag - j][:size])
            if lag + j in dist:
                near = np.minimum(near, dist[lag + j][:size])
        start, length = _longest(near < MATCH_DISTANCE)
        coverage = length / lag
        if coverage >= min_coverage and length * hop_s > best.run_s:
            best = Repeat(lag * hop_s, length * hop_s, coverage, start * hop_s)
    return best


_WORD = re.compile(r"[a-z0-9']+")
_NEARBY_WORDS = 10  # as far as a repeat's lag reaches (``MAX_LAG_S``: some six words at a slow pace)


def text_repeats(text: str, within: int = _NEARBY_WORDS) -> bool:
    """Whether the text itself says a phrase again within ``within`` words ("very, very", "the doctor.
    The doctor hurried", "the old keeper waited ... The old keeper felt"): its audio then repeats by
    right, and :func:`self_repeat` cannot tell that from a doubled phrase. A phrase is two or more
    words, or one word that is not in ``_COMMON`` (any sentence says "the" twice)."""
    words = _WORD.findall(text.lower())
    for size in range(1, 7):
        for start in range(len(words) - size):
            phrase = words[start : start + size]
            if size == 1 and phrase[0] in _COMMON:
                continue
            if size == 2 and all(word in _COMMON for word in phrase):
                continue
            window = words[start + size : start + 2 * size + within]
            if any(window[k : k + size] == phrase for k in range(len(window) - size + 1)):
                return True
    return False


# Words any sentence says twice within a few words without repeating itself ("the man and the dog").
_COMMON = frozenset(
    {"a", "an", "the", "of", "to", "on", "in", "at", "and", "or", "as", "by", "for", "from", "with", "was",
     "he", "she", "it", "i", "we", "you", "they", "her", "his", "is", "that", "had", "not", "s"}
)  # fmt: skip

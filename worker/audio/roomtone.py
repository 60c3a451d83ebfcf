"""Room tone: the quiet noise of a room, to fill pauses where digital silence is not allowed (ACX).

The noise is pink (-3 dB per octave, the spectrum of real room tone: ventilation, traffic and preamp
noise all fall with frequency) and high-passed at 80 Hz (pink noise's sub-bass rumble would carry much of
the RMS without being heard, and it is what a voice recording's low cut removes anyway). White noise at
the same RMS puts most of its power in the 5-12 kHz band where hearing is most sensitive: it is heard as
hiss, where pink noise is heard as a quiet room.

Gaussian white noise from a seeded :class:`numpy.random.Generator` goes through one filter whose state
carries over from take to take, so a stream of takes is the same samples as one long take: no step at the
joins, memory that does not depend on the total, and the same bytes for the same seed. SciPy is imported
where it is used (:mod:`worker.audio.loudness` says why).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from worker.audio.pcm import Waveform

__all__ = ["HIGHPASS_HZ", "SILENT_BELOW_DB", "RoomTone", "room_tone", "room_tone_level"]

HIGHPASS_HZ = 80.0

SILENT_BELOW_DB = -90.0
"""A measured floor quieter than this is digital silence in all but name (16-bit PCM's last bit is at
-90.3 dBFS): :func:`room_tone_level` does not copy it, as a room tone there would encode as zeros."""

# Paul Kellet's "economy" pinking filter (3 poles, 3 zeros), within +-0.3 dB of -3 dB/octave over the
# speech band at the rates Tome uses (16-48 kHz); the pole near 1 sets the bass, which the high-pass cuts.
_PINK_B = (0.049922035, -0.095993537, 0.050612699, -0.004408786)
_PINK_A = (1.0, -2.494956002, 2.017265875, -0.522189400)

_WARM_UP_S = 0.5
"""Noise run through the filter before the first take, so that the first samples are already at level."""

_MIN_RATE = 8000


class RoomTone:
    """An endless room tone at ``level_db`` dBFS RMS, taken a pause at a time with :meth:`take`.

    The level is the expected RMS (exact for the filter). What a finite take reads spreads around it, the
    more so the shorter the take: at 24 kHz, half a second reads within 0.5 dB (standard deviation
    0.12 dB), a quarter of a second has a standard deviation of 0.17 dB. The same
    ``(level_db, sample_rate, seed)`` gives the same samples, and takes of any sizes join into the same
    samples as one take of their total.
    """

    def __init__(self, level_db: float, sample_rate: int, seed: int) -> None:
        if not (math.isfinite(level_db) and level_db <= 0.0):
            raise ValueError(f"room tone level_db must be a finite dBFS value at most 0, got {level_db}")
        if sample_rate < _MIN_RATE:
            raise ValueError(f"sample_rate must be at least {_MIN_RATE}, got {sample_rate}")
        if seed < 0:
            raise ValueError(f"seed must not be negative, got {seed}")
        self.level_db = level_db
        self.sample_rate = sample_rate
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._sos = _filter(sample_rate)
        self._scale = 10.0 ** (level_db / 20.0) / _noise_rms(sample_rate)
        from scipy.signal import sosfilt, sosfilt_zi

        warm = self._rng.standard_normal(round(_WARM_UP_S * sample_rate))
        zi = sosfilt_zi(self._sos) * 0.0
        _, self._state = sosfilt(self._sos, warm, zi=zi)

    def take(self, count: int) -> Waveform:
        """The next ``count`` samples (float32)."""
        if count < 0:
            raise ValueError(f"count must not be negative, got {count}")
        if count == 0:
            return np.zeros(0, dtype=np.float32)
        from scipy.signal import sosfilt

        white = self._rng.standard_normal(count)
        shaped, self._state = sosfilt(self._sos, white, zi=self._state)
        out: Waveform = (shaped * self._scale).astype(np.float32)
        return out


def room_tone(count: int, level_db: float, sample_rate: int, seed: int) -> Waveform:
    """``count`` samples of room tone at ``level_db`` dBFS RMS: the first take of a :class:`RoomTone`."""
    return RoomTone(level_db, sample_rate, seed).take(count)


def room_tone_level(
    floors: Iterable[float | None],
    ceiling_db: float = -60.0,
    default_db: float = -70.0,
    *,
    silent_below_db: float = SILENT_BELOW_DB,
) -> float:
    """The room-tone level (dBFS RMS) for a file whose chunks have the noise floors ``floors``.

    Pass the floors as they will be heard: the measured ``floor_db`` plus the chunk's mastering gain.
    The level is the median of the measured floors, so that pauses sound like the gaps between words
    (one noisy or one clean chunk does not set it); floors that are ``None`` (digital silence) or below
    ``silent_below_db`` do not count. With nothing measured (engines such as espeak render digital
    silence between words) it is ``default_db``: ACX rejects absolute silence, and -70 dB is well inside
    its -60 dB limit. Whatever the source, the level is never above ``ceiling_db - 2`` (ACX: the noise
    floor at or below -60 dB; 2 dB of margin for the encoder and the reading's spread).

    Raises ``ValueError`` for a NaN or infinite floor or argument.
    """
    for name, value in (("ceiling_db", ceiling_db), ("default_db", default_db)):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value}")
    measured = []
    for floor in floors:
        if floor is None:
            continue
        if not math.isfinite(floor):
            raise ValueError(f"noise floors must be finite dB values or None, got {floor}")
        if floor >= silent_below_db:
            measured.append(floor)
    level = statistics.median(measured) if measured else default_db
    return min(level, ceiling_db - 2.0)


@functools.cache
def _filter(sample_rate: int) -> npt.NDArray[np.float64]:
    """Second-order sections: the pinking filter, then a 2nd-order Butterworth high-pass."""
    from scipy.signal import butter, tf2sos

    pink = tf2sos(_PINK_B, _PINK_A)
    highpass = butter(2, HIGHPASS_HZ, btype="highpass", fs=sample_rate, output="sos")
    sos: npt.NDArray[np.float64] = np.vstack([pink, highpass])
    return sos


@functools.cache
def _noise_rms(sample_rate: int) -> float:
    """RMS of unit white noise through :func:`_filter`: the square root of its impulse response's energy."""
    from scipy.signal import sosfilt

    impulse = np.zeros(sample_rate * 4)
    impulse[0] = 1.0
    response = sosfilt(_filter(sample_rate), impulse)
    return float(np.sqrt(np.square(response).sum()))

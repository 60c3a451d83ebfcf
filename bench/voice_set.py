"""A deliberately varied set of voices for the QA benchmark (``python -m bench.qa --voices varied``).

Each voice is a reference recording made as a user's would arrive: spoken (by espeak, at the voice's
pitch, pitch range and rate: no human recordings are available offline), then taken through a channel:
its bandwidth (an 8 kHz telephone band of 300-3400 Hz, a 16 kHz wideband of 60-7000 Hz, or the full
band at 44.1 or 48 kHz), its room noise (pink, brown or mains hum, at a signal-to-noise ratio), its
room (a decaying-noise reverberation) and its level. The voice's prompt is what the engine's
``encode_speaker`` makes of that recording, as a voice build does, so the checks meet each voice as its
channel leaves it (a telephone line takes away the fundamental its pitch is measured from; noise and a
room blur the rest).

The set is split: the thresholds are calibrated on the ``calibrate`` voices only; the ``held-out``
voices are for the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy import signal

from worker.engines.base import SpeakerPrompt, SynthesisRequest
from worker.engines.espeak import EspeakEngine

__all__ = ["REFERENCE_TEXT", "VOICE_SET", "VoiceSpec", "prompt_of", "reference_of", "voices"]

Band = Literal["phone", "wide", "full44", "full48"]
Noise = Literal["none", "pink", "brown", "hum"]
Split = Literal["calibrate", "held-out"]

# About 12 s of speech at 170 words a minute: what a user uploads.
REFERENCE_TEXT = (
    "The old lighthouse keeper climbed the stairs every evening, counting each step, and watched the "
    "ships pass slowly beyond the harbour wall. Nobody in the village remembered when he had first "
    "arrived, or why he had stayed so long."
)

_BANDS: dict[Band, tuple[int, float, float]] = {  # output rate, low and high edge of the pass band (Hz)
    "phone": (8000, 300.0, 3400.0),
    "wide": (16000, 60.0, 7000.0),
    "full44": (44100, 40.0, 10500.0),
    "full48": (48000, 40.0, 10500.0),
}


@dataclass(frozen=True)
class VoiceSpec:
    """One voice of the set: how its speaker speaks (median pitch, 10-90 % range in semitones, words a
    minute) and the channel of its recording (band, room noise and its SNR re the speech, RT60 of the
    room, speech level in dBFS)."""

    name: str
    split: Split
    f0_hz: float
    range_st: float
    wpm: float
    band: Band
    noise: Noise = "none"
    snr_db: float = 60.0
    rt60_s: float = 0.0
    level_dbfs: float = -20.0

    def describe(self) -> str:
        rate = _BANDS[self.band][0]
        noise = "no noise" if self.noise == "none" else f"{self.noise} noise at {self.snr_db:g} dB SNR"
        room = f", RT60 {self.rt60_s:g} s" if self.rt60_s else ""
        return (
            f"{self.f0_hz:g} Hz, {self.range_st:g} st, {self.wpm:g} wpm; {self.band} ({rate} Hz), "
            f"{noise}{room}, {self.level_dbfs:g} dBFS"
        )


# Twelve voices: every band, low and high, narrow and wide pitch, slow and fast, quiet and loud, clean
# and noisy in each half. The held-out half has its own telephone voices (the case is a low
# telephone voice in a noisy room) and is never used to set a threshold.
VOICE_SET: tuple[VoiceSpec, ...] = (
    VoiceSpec("cal-phone-low", "calibrate", 95.0, 8.0, 150.0, "phone", "pink", 25.0, 0.0, -18.0),
    VoiceSpec("cal-phone-high", "calibrate", 200.0, 8.0, 180.0, "phone", "brown", 20.0, 0.0, -24.0),
    VoiceSpec("cal-wide-mid", "calibrate", 130.0, 10.0, 160.0, "wide", "hum", 30.0, 0.3, -22.0),
    VoiceSpec("cal-wide-fast", "calibrate", 165.0, 5.0, 230.0, "wide", "pink", 35.0, 0.0, -30.0),
    VoiceSpec("cal-full-bass", "calibrate", 80.0, 6.0, 140.0, "full44", "none", 60.0, 0.0, -16.0),
    VoiceSpec("cal-full-alto", "calibrate", 230.0, 4.0, 190.0, "full48", "brown", 30.0, 0.5, -26.0),
    VoiceSpec("held-phone-low", "held-out", 105.0, 7.0, 165.0, "phone", "pink", 20.0, 0.2, -20.0),
    VoiceSpec("held-phone-mid", "held-out", 150.0, 9.0, 170.0, "phone", "hum", 25.0, 0.0, -28.0),
    VoiceSpec("held-wide-low", "held-out", 88.0, 9.0, 145.0, "wide", "brown", 25.0, 0.0, -18.0),
    VoiceSpec("held-wide-high", "held-out", 215.0, 7.0, 200.0, "wide", "none", 60.0, 0.4, -24.0),
    VoiceSpec("held-full-mid", "held-out", 120.0, 5.0, 175.0, "full48", "pink", 40.0, 0.0, -14.0),
    VoiceSpec("held-full-fast", "held-out", 180.0, 6.0, 250.0, "full44", "hum", 35.0, 0.3, -32.0),
)


def voices(split: Split | Literal["all"]) -> list[VoiceSpec]:
    """The voices of a split (``all``: every voice)."""
    return [v for v in VOICE_SET if split in ("all", v.split)]


def _seed(spec: VoiceSpec) -> int:
    return sum(ord(ch) * (i + 1) for i, ch in enumerate(spec.name)) & 0xFFFF


def _noise(kind: Noise, n: int, rate: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    if kind == "hum":  # mains hum: 50 Hz and its odd harmonics, each weaker
        t = np.arange(n) / rate
        return sum((np.sin(2 * np.pi * 50.0 * k * t + k) / k for k in (1, 3, 5, 7)), np.zeros(n))
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.maximum(np.fft.rfftfreq(n, 1.0 / rate), 20.0)
    slope = 0.5 if kind == "pink" else 1.0  # amplitude ~ f^-1/2 (pink), f^-1 (brown)
    return np.asarray(np.fft.irfft(spectrum / freqs**slope, n), dtype=np.float64)


def _rms(x: npt.NDArray[np.float64]) -> float:
    return float(np.sqrt(np.mean(x * x))) if x.size else 0.0


def reference_of(spec: VoiceSpec, engine: EspeakEngine | None = None) -> tuple[npt.NDArray[np.float32], int]:
    """The voice's reference recording (samples in [-1, 1], sample rate): see the module docstring."""
    engine = engine or EspeakEngine()
    speaker = {
        "f0_median_hz": np.asarray([spec.f0_hz], np.float32),
        "f0_range_st": np.asarray([spec.range_st], np.float32),
        "words_per_minute": np.asarray([spec.wpm], np.float32),
    }
    [wave] = engine.synthesize([SynthesisRequest(REFERENCE_TEXT, speaker)])
    rate, low, high = _BANDS[spec.band]
    rng = np.random.default_rng(_seed(spec))
    x = signal.resample_poly(np.asarray(wave, np.float64), rate, engine.sample_rate)
    x = np.concatenate((np.zeros(rate // 2), x, np.zeros(rate // 2)))  # the room before and after
    if spec.rt60_s > 0:  # a room: exponentially decaying noise as its impulse response
        t = np.arange(int(spec.rt60_s * rate)) / rate
        response = rng.standard_normal(t.size) * 10.0 ** (-3.0 * t / spec.rt60_s)
        response[0] = 8.0  # the direct sound
        x = signal.fftconvolve(x, response / np.linalg.norm(response))[: x.size]
    speech = _rms(x[np.abs(x) > 1e-4])
    if spec.noise != "none":
        noise = _noise(spec.noise, x.size, rate, rng)
        x = x + noise * (speech / max(_rms(noise), 1e-12)) * 10.0 ** (-spec.snr_db / 20.0)
    band = signal.butter(6, [low, min(high, 0.45 * rate)], btype="band", fs=rate, output="sos")
    x = signal.sosfilt(band, x)
    x *= 10.0 ** (spec.level_dbfs / 20.0) / max(_rms(x[np.abs(x) > 1e-4]), 1e-12)
    return np.clip(x, -1.0, 1.0).astype(np.float32), rate


def prompt_of(spec: VoiceSpec, engine: EspeakEngine | None = None) -> SpeakerPrompt:
    """The speaker prompt the engine builds from the voice's reference, as a voice build does."""
    engine = engine or EspeakEngine()
    audio, rate = reference_of(spec, engine)
    return dict(engine.encode_speaker(audio, rate, REFERENCE_TEXT))

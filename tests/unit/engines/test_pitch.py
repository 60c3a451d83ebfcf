"""Pitch tracker and speaking-rate analysis (worker.engines.pitch) on synthetic signals."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from scipy import signal

from worker.engines.pitch import (
    HOP_S,
    count_words,
    f0_statistics,
    frame_levels_db,
    speech_activity,
    speech_seconds,
    track_pitch,
)


def harmonic(
    f0: float, seconds: float, sample_rate: int, *, amplitude: float = 0.3
) -> npt.NDArray[np.float32]:
    """A voice-like periodic signal: 8 harmonics with 1/k amplitudes and arbitrary phases."""
    t = np.arange(round(seconds * sample_rate)) / sample_rate
    x = np.zeros_like(t)
    for k in range(1, 9):
        x += (1.0 / k) * np.sin(2 * np.pi * f0 * k * t + 0.7 * k)
    scaled: npt.NDArray[np.float32] = (amplitude * x / np.abs(x).max()).astype(np.float32)
    return scaled


@pytest.mark.parametrize("sample_rate", [16000, 22050, 44100])
@pytest.mark.parametrize("f0", [120.0, 220.0])
def test_tracker_finds_harmonic_f0_within_3_percent(f0: float, sample_rate: int) -> None:
    track = track_pitch(harmonic(f0, 1.0, sample_rate), sample_rate)
    stats = f0_statistics(track)
    assert stats is not None
    median, span = stats
    assert abs(median - f0) / f0 < 0.03
    assert span < 0.5  # a steady tone has (almost) no range
    assert track.voiced.mean() > 0.9


def test_tracker_at_the_edges_of_its_range() -> None:
    for f0 in (55.0, 480.0):
        stats = f0_statistics(track_pitch(harmonic(f0, 1.0, 22050), 22050))
        assert stats is not None
        assert abs(stats[0] - f0) / f0 < 0.03


def test_tracker_measures_range_of_a_two_tone_signal() -> None:
    sr = 22050
    x = np.concatenate([harmonic(100.0, 1.0, sr), harmonic(200.0, 1.0, sr)])
    stats = f0_statistics(track_pitch(x, sr))
    assert stats is not None
    assert stats[1] == pytest.approx(12.0, abs=0.5)  # one octave between 10th and 90th percentile


def telephone_vowel(
    f0: float, *, noise_db: float | None = None, rt60_s: float = 0.0, seconds: float = 3.0
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """A voice through a telephone line: 40 harmonics of a rising and falling F0 (2 semitones either
    side of ``f0``) under a first formant that moves from vowel to vowel every 0.15 s (300-800 Hz, close
    vowels near the band's edge), taken through a 300-3400 Hz band at 8 kHz, so that the fundamental is
    gone and, in the close vowels, one harmonic dominates; with pink noise ``noise_db`` under the voice
    and a room of ``rt60_s``. Returns (samples at 8 kHz, the true F0 every ``HOP_S``)."""
    rate, fine = 8000, 48000
    t = np.arange(round(seconds * fine)) / fine
    contour = f0 * 2.0 ** (2.0 * np.sin(2 * np.pi * t / seconds) / 12.0)
    vowels = np.array([300.0, 650.0, 500.0, 800.0, 380.0, 700.0, 550.0, 450.0])
    steps = np.arange(int(seconds / 0.15) + 2) * 0.15
    first_formant = np.interp(t, steps, vowels[np.arange(steps.size) % vowels.size])
    phase = 2 * np.pi * np.cumsum(contour) / fine
    x = np.zeros_like(t)
    for k in range(1, 41):
        formant = 1.0 / (1.0 + ((k * contour - first_formant) / 100.0) ** 2)
        x += np.where(k * contour < 3800.0, formant / k * np.sin(k * phase), 0.0)
    x = signal.resample_poly(x, rate, fine)
    rng = np.random.default_rng(round(f0))
    if rt60_s:
        tail = np.arange(round(rt60_s * rate)) / rate
        response = rng.standard_normal(tail.size) * 10.0 ** (-3.0 * tail / rt60_s)
        response[0] = 8.0
        x = signal.fftconvolve(x, response / np.linalg.norm(response))[: x.size]
    if noise_db is not None:
        spectrum = np.fft.rfft(rng.standard_normal(x.size))
        pink = np.fft.irfft(spectrum / np.maximum(np.fft.rfftfreq(x.size, 1 / rate), 20.0) ** 0.5, x.size)
        x += pink * np.sqrt(np.mean(x * x) / np.mean(pink * pink)) * 10.0 ** (-noise_db / 20.0)
    band = signal.butter(6, [300.0, 3400.0], btype="band", fs=rate, output="sos")
    x = signal.sosfilt(band, x)
    truth = contour[:: round(fine * HOP_S)]
    return 0.3 * x / np.abs(x).max(), truth


@pytest.mark.parametrize("f0", [100.0, 150.0])
@pytest.mark.parametrize(("noise_db", "rt60_s"), [(None, 0.0), (20.0, 0.2)], ids=["clean", "noisy-room"])
def test_a_voice_without_its_fundamental_is_tracked_at_its_fundamental(
    f0: float, noise_db: float | None, rt60_s: float
) -> None:
    """A telephone band removes the fundamental, and a formant near the band's edge leaves one harmonic
    in charge: the tracker measures the voice's F0 and its range, not a harmonic's (an octave or two up
    on the frames of the close vowels, which widens the range it measures by an octave or more)."""
    x, truth = telephone_vowel(f0, noise_db=noise_db, rt60_s=rt60_s)
    track = track_pitch(x, 8000)
    stats = f0_statistics(track)
    assert stats is not None
    median, span = stats
    true_low, true_median, true_high = np.percentile(truth, [10, 50, 90])
    assert abs(12 * np.log2(median / true_median)) < 0.7
    assert span == pytest.approx(12 * np.log2(true_high / true_low), abs=0.7)
    assert track.voiced.mean() > 0.8
    n = min(truth.size, track.f0_hz.size)
    off = np.abs(12 * np.log2(track.f0_hz[:n][track.voiced[:n]] / truth[:n][track.voiced[:n]]))
    assert np.mean(off > 3.0) < 0.05  # hardly a frame on a harmonic or a subharmonic


def test_silence_and_noise_are_unvoiced() -> None:
    sr = 22050
    silence = np.zeros(2 * sr, dtype=np.float32)
    assert not track_pitch(silence, sr).voiced.any()
    assert f0_statistics(track_pitch(silence, sr)) is None
    assert speech_seconds(silence, sr) == 0.0
    assert np.all(np.isfinite(frame_levels_db(silence, sr)))
    noise = np.random.default_rng(0).normal(0.0, 0.1, 2 * sr).astype(np.float32)
    assert track_pitch(noise, sr).voiced.mean() < 0.05


def test_track_layout() -> None:
    sr = 22050
    track = track_pitch(harmonic(150.0, 0.5, sr), sr)
    n = track.times_s.size
    assert track.f0_hz.shape == track.voiced.shape == track.aperiodicity.shape == (n,)
    assert track.times_s[1] - track.times_s[0] == pytest.approx(HOP_S)
    assert np.all(track.f0_hz[~track.voiced] == 0)


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="fmin"):
        track_pitch(np.zeros(1000), 22050, fmin=500.0, fmax=50.0)
    with pytest.raises(ValueError, match="mono"):
        track_pitch(np.zeros((2, 1000)), 22050)


def test_speech_seconds_trims_silence_and_caps_pauses() -> None:
    sr = 22050
    tone = harmonic(150.0, 1.0, sr)

    def gap(seconds: float) -> npt.NDArray[np.float32]:
        return np.zeros(round(seconds * sr), dtype=np.float32)

    x = np.concatenate([gap(0.5), tone, gap(1.0), tone, gap(0.2), tone, gap(0.7)])
    # 3 s of tone + the 0.2 s pause + the 1 s pause counted as 0.3 s; edges trimmed.
    assert speech_seconds(x, sr) == pytest.approx(3.5, abs=0.1)
    assert speech_seconds(x, sr, max_pause_s=10.0) == pytest.approx(4.2, abs=0.1)
    active = speech_activity(x, sr)
    assert not active[:40].any()
    assert active[60:140].all()


def test_activity_is_relative_to_the_recording_level() -> None:
    sr = 22050
    loud = np.concatenate([harmonic(150.0, 1.0, sr, amplitude=0.5), np.zeros(sr, dtype=np.float32)])
    quiet = loud * np.float32(0.01)  # -40 dB
    assert speech_seconds(quiet, sr) == pytest.approx(speech_seconds(loud, sr), abs=0.02)


def test_count_words() -> None:
    assert count_words("") == 0
    assert count_words("  ... !!") == 0
    assert count_words("Don't stop -- the well-known 42 times!") == 6
    assert count_words("Grüße aus Köln, l'été") == 4


def test_a_quick_rise_of_the_voice_is_not_taken_for_a_harmonic() -> None:
    """A voice's own leap (9 semitones for 0.3 s, under the ten that make a harmonic error) is measured
    as it is; only frames ten semitones or more above their neighbours are moved down."""
    sr = 22050
    x = np.concatenate([harmonic(100.0, 1.0, sr), harmonic(168.0, 0.3, sr), harmonic(100.0, 1.0, sr)])
    track = track_pitch(x, sr)
    middle = track.f0_hz[110:120]
    assert np.all(np.abs(middle - 168.0) < 5.0)

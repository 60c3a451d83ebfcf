"""Pitch tracker and speaking-rate analysis (worker.engines.pitch) on synthetic signals."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

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

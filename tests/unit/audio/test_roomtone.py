"""Room tone (worker.audio.roomtone): level, determinism, streaming, colour, and the level to use."""

from __future__ import annotations

import itertools
import math

import numpy as np
import numpy.typing as npt
import pytest
from scipy.signal import welch

from worker.audio.loudness import measure
from worker.audio.roomtone import HIGHPASS_HZ, RoomTone, room_tone, room_tone_level


def rms_db(x: npt.NDArray[np.floating]) -> float:
    return 10 * math.log10(float(np.mean(np.asarray(x, dtype=np.float64) ** 2)))


@pytest.mark.parametrize("sr", [22_050, 24_000, 44_100, 48_000])
@pytest.mark.parametrize("level", [-50.0, -62.0, -70.0, -85.0])
def test_rms_is_the_level(sr: int, level: float) -> None:
    for seed in range(5):
        tone = room_tone(sr, level, sr, seed)  # one second
        assert tone.dtype == np.float32
        assert tone.size == sr
        assert rms_db(tone) == pytest.approx(level, abs=0.5)
        assert rms_db(tone[: sr // 2]) == pytest.approx(level, abs=0.5)
    assert measure(tone, sr).rms_db == pytest.approx(level, abs=0.5)


def test_level_holds_from_the_first_sample() -> None:
    # The filter starts in its steady state (from a zero state the first 5 ms read ~0.35 dB low).
    sr = 24_000
    power = np.mean([np.mean(room_tone(sr // 200, -65.0, sr, s).astype(np.float64) ** 2) for s in range(200)])
    assert 10 * math.log10(float(power)) == pytest.approx(-65.0, abs=0.2)


def test_deterministic_per_seed() -> None:
    a = room_tone(10_000, -65.0, 24_000, seed=7)
    np.testing.assert_array_equal(a, room_tone(10_000, -65.0, 24_000, seed=7))
    assert not np.array_equal(a, room_tone(10_000, -65.0, 24_000, seed=8))
    louder = room_tone(10_000, -55.0, 24_000, seed=7)
    np.testing.assert_allclose(louder, a * np.float32(10**0.5), rtol=1e-5)  # same noise, 10 dB up


def test_streamed_takes_are_one_take() -> None:
    sizes = [0, 1, 2, 100, 4_799, 0, 24_000, 333]
    stream = RoomTone(-62.0, 22_050, seed=3)
    takes = [stream.take(n) for n in sizes]
    assert [t.size for t in takes] == sizes
    whole = room_tone(sum(sizes), -62.0, 22_050, seed=3)
    np.testing.assert_array_equal(np.concatenate(takes), whole)


def test_no_step_at_the_joins() -> None:
    stream = RoomTone(-60.0, 24_000, seed=11)
    takes = [stream.take(12_000) for _ in range(6)]
    inside = max(float(np.max(np.abs(np.diff(t.astype(np.float64))))) for t in takes)
    joins = [abs(float(b[0]) - float(a[-1])) for a, b in itertools.pairwise(takes)]
    typical = float(np.median(np.abs(np.diff(np.concatenate(takes).astype(np.float64)))))
    assert max(joins) <= inside
    assert max(joins) < 6 * typical  # a join is an ordinary step, not the start of a new filter


def test_pink_and_band_limited() -> None:
    sr = 48_000
    freqs, power = welch(room_tone(20 * sr, -60.0, sr, seed=1).astype(np.float64), sr, nperseg=8192)

    def band_db(lo: float, hi: float) -> float:
        inside = (freqs >= lo) & (freqs < hi)
        return 10 * math.log10(float(np.mean(power[inside])))

    octaves = [band_db(f, 2 * f) for f in (200.0, 400.0, 800.0, 1600.0, 3200.0, 6400.0)]
    slopes = np.diff(octaves)
    assert np.all(slopes < -1.5)  # falls with frequency: not white
    assert np.all(slopes > -4.5)  # about -3 dB per octave: pink, not brown
    # No rumble: pink alone would be ~6 dB louder two octaves down; the high-pass makes it quieter.
    assert band_db(10.0, HIGHPASS_HZ / 2) < band_db(2 * HIGHPASS_HZ, 4 * HIGHPASS_HZ) - 6


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="level_db"):
        RoomTone(3.0, 24_000, 0)
    with pytest.raises(ValueError, match="level_db"):
        RoomTone(float("nan"), 24_000, 0)
    with pytest.raises(ValueError, match="sample_rate"):
        RoomTone(-60.0, 100, 0)
    with pytest.raises(ValueError, match="seed"):
        RoomTone(-60.0, 24_000, -1)
    with pytest.raises(ValueError, match="count"):
        RoomTone(-60.0, 24_000, 0).take(-1)


# -- the level to use --------------------------------------------------------------------------------


def test_level_is_the_median_measured_floor() -> None:
    assert room_tone_level([-75.0, None, -68.0, -80.0, None]) == pytest.approx(-75.0)
    assert room_tone_level(iter([-70.0, -66.0])) == pytest.approx(-68.0)
    assert room_tone_level([-64.0]) == pytest.approx(-64.0)


def test_level_never_above_the_ceiling_margin() -> None:
    assert room_tone_level([-50.0, -55.0, -40.0]) == pytest.approx(-62.0)
    assert room_tone_level([-50.0], ceiling_db=-70.0) == pytest.approx(-72.0)
    assert room_tone_level([], ceiling_db=-65.0, default_db=-60.0) == pytest.approx(-67.0)


def test_level_defaults_when_nothing_was_measured() -> None:
    assert room_tone_level([]) == pytest.approx(-70.0)
    assert room_tone_level([None, None]) == pytest.approx(-70.0)
    assert room_tone_level([None], default_db=-75.0) == pytest.approx(-75.0)
    # Floors at 16-bit quantisation level are digital silence: not copied into the pauses.
    assert room_tone_level([-110.0, -95.0, None]) == pytest.approx(-70.0)
    assert room_tone_level([-110.0, -80.0]) == pytest.approx(-80.0)
    assert room_tone_level([-95.0], silent_below_db=-100.0) == pytest.approx(-95.0)


def test_level_rejects_non_finite() -> None:
    with pytest.raises(ValueError, match="finite"):
        room_tone_level([-70.0, float("nan")])
    with pytest.raises(ValueError, match="default_db"):
        room_tone_level([], default_db=float("-inf"))

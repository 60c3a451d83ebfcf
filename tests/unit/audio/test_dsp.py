"""trim_silence and apply_fades."""

from __future__ import annotations

import numpy as np
import pytest

from worker.audio import apply_fades, trim_silence

SR = 24_000


def tone(seconds: float, hz: float = 300.0, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * SR)) / SR
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def test_trim_silence_keeps_margin() -> None:
    speech = tone(0.5) + np.float32(0.25)  # offset: no sample of the "speech" is near zero
    x = np.concatenate([np.zeros(SR, np.float32), speech, np.zeros(SR, np.float32)])

    out = trim_silence(x, SR, threshold_db=-50.0, keep_ms=20.0)

    keep = round(0.020 * SR)
    assert out.dtype == np.float32
    assert out.size == speech.size + 2 * keep
    np.testing.assert_array_equal(out[keep : keep + speech.size], speech)
    assert not out[:keep].any()
    assert not out[-keep:].any()


def test_trim_silence_ignores_sound_below_threshold() -> None:
    hiss = np.full(SR // 2, 10 ** (-60 / 20), dtype=np.float32)
    speech = tone(0.3) + np.float32(0.25)
    x = np.concatenate([hiss, speech, hiss])
    out = trim_silence(x, SR, threshold_db=-50.0, keep_ms=0.0)
    assert out.size == speech.size
    assert trim_silence(x, SR, threshold_db=-70.0, keep_ms=0.0).size == x.size


def test_trim_silence_works_in_frames_and_clamps_margin() -> None:
    x = np.zeros(SR, dtype=np.float32)
    x[5] = 0.5  # inside the first 10 ms frame
    x[-3] = -0.5  # inside the last frame
    assert trim_silence(x, SR, keep_ms=50.0).size == SR
    y = np.zeros(SR, dtype=np.float32)
    y[SR // 2 + 7] = 0.9
    out = trim_silence(y, SR, keep_ms=0.0)
    assert out.size == 240  # one 10 ms frame
    assert out[7] == pytest.approx(0.9)


def test_trim_silence_of_silence_is_empty() -> None:
    assert trim_silence(np.zeros(SR, dtype=np.float32), SR).size == 0
    assert trim_silence(np.zeros(0, dtype=np.float32), SR).size == 0


def test_trim_silence_does_not_alias_input() -> None:
    x = tone(0.2)
    out = trim_silence(x, SR)
    out[:] = 0
    assert x.any()


def test_apply_fades() -> None:
    x = np.full(SR, 0.5, dtype=np.float32)
    out = apply_fades(x, SR, fade_ms=5.0)
    n = round(0.005 * SR)

    assert out is not x
    assert out.dtype == np.float32
    assert (x == 0.5).all()  # input untouched
    assert out[0] == 0.0
    assert out[-1] == 0.0
    np.testing.assert_array_equal(out[n:-n], x[n:-n])
    assert (np.diff(out[: n + 1]) >= 0).all()  # monotonic raised-cosine rise
    assert (np.diff(out[-n - 1 :]) <= 0).all()
    np.testing.assert_allclose(out[:n], out[-n:][::-1])
    assert out[n // 2] == pytest.approx(0.25, abs=0.01)  # half way up: half gain


def test_apply_fades_short_signal_and_zero_fade() -> None:
    x = np.ones(10, dtype=np.float32)
    out = apply_fades(x, SR, fade_ms=5.0)
    assert out[0] == 0.0
    assert out[-1] == 0.0
    assert out.size == 10
    np.testing.assert_array_equal(apply_fades(x, SR, fade_ms=0.0), x)
    assert apply_fades(np.zeros(0, np.float32), SR).size == 0


def test_rejects_multichannel() -> None:
    with pytest.raises(ValueError, match="1-D"):
        apply_fades(np.zeros((10, 2), np.float32), SR)
    with pytest.raises(ValueError, match="1-D"):
        trim_silence(np.zeros((10, 2), np.float32), SR)

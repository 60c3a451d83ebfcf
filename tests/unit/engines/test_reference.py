"""worker.engines.reference: the reference checks and warm-up reference the neural engines share."""

from __future__ import annotations

import numpy as np
import pytest

from worker.engines.base import EngineError
from worker.engines.reference import check_sample_rate, mono_reference, sine_reference


@pytest.mark.parametrize("rate", [8000, 16_000, np.int32(24_000), np.int64(44_100)])
def test_integer_rates_from_8_khz_pass(rate: object) -> None:
    check_sample_rate(rate)


@pytest.mark.parametrize("rate", [7999, 0, -16_000, True, 16_000.0, "16000", None])
def test_other_rates_are_refused_by_name(rate: object) -> None:
    with pytest.raises(EngineError, match=r"integer >= 8000 Hz, not "):
        check_sample_rate(rate)


def test_a_reference_is_made_mono_float32_and_finite() -> None:
    left = np.full(8000, 0.5, dtype=np.float64)
    right = np.zeros(8000)
    right[0] = np.nan
    for stereo in (np.stack([left, right]), np.stack([left, right], axis=1)):  # either orientation
        wav = mono_reference(stereo, 16_000)
        assert wav.dtype == np.float32
        assert wav.shape == (8000,)
        assert wav.flags.c_contiguous
        assert wav[1] == pytest.approx(0.25)  # the channels' mean
        assert wav[0] == 0.0  # a mean with a NaN in it is made 0
        assert np.isfinite(wav).all()


def test_a_short_or_not_mono_reference_is_refused() -> None:
    with pytest.raises(EngineError, match=r"shorter than 0\.5 s"):
        mono_reference(np.zeros(7999, dtype=np.float32), 16_000)
    with pytest.raises(EngineError, match="must be mono"):
        mono_reference(np.zeros((2, 2, 8000), dtype=np.float32), 16_000)


def test_the_warm_up_reference_is_a_quiet_second_of_sine() -> None:
    wav = sine_reference(16_000)
    assert wav.dtype == np.float32
    assert wav.shape == (16_000,)
    assert float(np.abs(wav).max()) == pytest.approx(0.1, abs=1e-3)
    mono_reference(wav, 16_000)  # the engines accept it

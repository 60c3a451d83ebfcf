"""The QA bench's varied voice set (bench/voice_set.py) and its per-voice and per-check report."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from bench.qa import QaBench, main
from bench.voice_set import REFERENCE_TEXT, VOICE_SET, prompt_of, reference_of, voices
from worker.engines.base import SynthesisRequest
from worker.engines.espeak import EspeakEngine


def test_the_split_is_balanced_and_disjoint() -> None:
    calibrate, held = voices("calibrate"), voices("held-out")
    assert len(calibrate) == len(held) == 6
    assert not {v.name for v in calibrate} & {v.name for v in held}
    assert voices("all") == list(VOICE_SET)
    for half in (calibrate, held):
        assert Counter(v.band.startswith("full") for v in half) == Counter({True: 2, False: 4})
        assert {v.band for v in half} >= {"phone", "wide"}
        assert {v.noise for v in half} - {"none"}


@pytest.mark.parametrize("name", ["cal-phone-low", "held-full-fast"])
def test_a_reference_has_its_band_rate_and_level(name: str) -> None:
    (spec,) = [v for v in VOICE_SET if v.name == name]
    audio, rate = reference_of(spec)
    assert rate == (8000 if spec.band == "phone" else 44100)
    assert audio.dtype == np.float32
    assert 10 < audio.size / rate < 25
    loud = audio[np.abs(audio) > 1e-4].astype(np.float64)
    level = 20 * np.log10(np.sqrt(np.mean(loud**2)))
    assert level == pytest.approx(spec.level_dbfs, abs=1.0)
    spectrum = np.abs(np.fft.rfft(audio.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(audio.size, 1 / rate)
    above = spectrum[freqs > (3800 if spec.band == "phone" else 11000)].sum() / spectrum.sum()
    assert above < 0.01  # nothing of the speech beyond the band


@pytest.mark.parametrize("name", [v.name for v in VOICE_SET])
def test_a_reference_measures_the_pitch_of_the_voice_it_was_spoken_with(name: str) -> None:
    """Whatever the channel (a telephone band without the fundamental, room noise, a room), the prompt
    measures the pitch and range of the clean rendering the reference was made from: the band must
    not widen the range (a low telephone voice in a noisy room measured 26 semitones for 7, from frames
    read at the third or fourth harmonic), or espeak reads the voice with its widest intonation."""
    (spec,) = [v for v in VOICE_SET if v.name == name]
    engine = EspeakEngine()
    speaker = {
        "f0_median_hz": np.asarray([spec.f0_hz], np.float32),
        "f0_range_st": np.asarray([spec.range_st], np.float32),
        "words_per_minute": np.asarray([spec.wpm], np.float32),
    }
    [clean] = engine.synthesize([SynthesisRequest(REFERENCE_TEXT, speaker)])
    spoken = engine.encode_speaker(clean, engine.sample_rate, REFERENCE_TEXT)
    prompt = prompt_of(spec, engine)
    median_off = 12 * np.log2(float(prompt["f0_median_hz"][0]) / float(spoken["f0_median_hz"][0]))
    assert abs(median_off) < 1.5
    assert float(prompt["f0_range_st"][0]) == pytest.approx(float(spoken["f0_range_st"][0]), abs=1.5)


def test_the_report_has_a_row_per_voice_and_per_check() -> None:
    bench = QaBench(clean=10)
    bench.per_voice["a"].update(clean=6, clean_flagged=1, injected=4, caught=3)
    bench.per_voice["b"].update(clean=4, injected=0)
    bench.voice_notes = {"a": "phone", "b": "full"}
    bench.injected["noise"] = 4
    bench.clean_flagged_by["edges"] = 1
    bench.faults_caught_by.update({"rumble": 2, "words": 3})
    voice_rows = bench.voice_table()
    assert "| a | phone | 1 of 6 (16.7%) | 3 of 4 (75.0%) |" in voice_rows
    assert "| b | full | 0 of 4 (0.0%) | 0 of 0 (-) |" in voice_rows
    check_rows = bench.check_table()
    assert "| edges | 1 of 10 | 0 of 4 |" in check_rows
    assert "| words | 0 of 10 | 3 of 4 |" in check_rows


def test_a_split_name_that_does_not_exist_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--voices", "varied", "--split", "everyone"])
    assert "invalid choice" in capsys.readouterr().err

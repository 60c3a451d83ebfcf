"""The cheap chunk checks (worker.qa.checks) on real espeak audio and on broken waveforms."""

from __future__ import annotations

import json
import re

import numpy as np
import numpy.typing as npt
import pytest

from worker.engines import SynthesisRequest
from worker.engines.espeak import DEFAULT_F0_MEDIAN_HZ, DEFAULT_WORDS_PER_MINUTE, EspeakEngine
from worker.qa.checks import (
    DEFAULT_POLICIES,
    NEURAL_POLICY,
    QaPolicy,
    QaResult,
    SpeakingRate,
    check_audio,
    is_rule_based,
    measure_speaking_rate,
    median_f0,
    policy_for,
    spoken_units,
    unusable_audio,
)

SR = EspeakEngine.sample_rate
TEXT = (
    "The old keeper walked slowly towards the harbour. Rain drummed against the windows, "
    "and the doctor carefully opened a wooden box."
)
HIGH_VOICE = {
    "f0_median_hz": np.asarray([210.0], dtype=np.float32),
    "f0_range_st": np.asarray([4.0], dtype=np.float32),
    "words_per_minute": np.asarray([209.2], dtype=np.float32),
}


@pytest.fixture(scope="module")
def clean(engine: EspeakEngine) -> npt.NDArray[np.float32]:
    return engine.synthesize([SynthesisRequest(TEXT, {})])[0]


@pytest.fixture(scope="module")
def rate(engine: EspeakEngine) -> SpeakingRate:
    """espeak's default voice's rate, measured on other text (as the render step learns it)."""
    texts = [
        "A thick fog rolled in from the sea, and the children hurried across the market square.",
        "Why had the stranger hidden the broken clock in the narrow lane behind the church?",
        "Snow had covered the roofs overnight. Nobody believed a word of the story.",
    ]
    waves = engine.synthesize([SynthesisRequest(t, {}) for t in texts])
    measured = measure_speaking_rate(
        ((text, check_audio(wave, SR, text).speech_s) for text, wave in zip(texts, waves, strict=True)),
        min_units=100,
    )
    assert measured is not None
    return measured


def failed(result: QaResult) -> set[str]:
    return {check.name for check in result.failed}


def test_a_clean_chunk_passes_every_check(clean: npt.NDArray[np.float32], rate: SpeakingRate) -> None:
    result = check_audio(
        clean, SR, TEXT, rate=rate, expected_f0_hz=DEFAULT_F0_MEDIAN_HZ, expected_level_db=-20.0
    )
    assert result.passed, result.reasons
    assert {c.name for c in result.checks} == {
        "audio", "silence", "clipping", "duration", "pauses", "edges", "noise", "hiss", "rumble", "ending",
        "repeat", "pitch", "level",
    }  # fmt: skip
    duration = result.check("duration")
    assert duration is not None
    assert duration.score is not None
    assert 0.85 < duration.score < 1.15
    assert result.f0_median_hz is not None
    assert abs(result.f0_median_hz - DEFAULT_F0_MEDIAN_HZ) < 8
    json.dumps(result.to_json())  # storable as is


def test_the_rate_from_a_prompt_predicts_the_rendering(clean: npt.NDArray[np.float32]) -> None:
    result = check_audio(clean, SR, TEXT, rate=SpeakingRate.from_words_per_minute(DEFAULT_WORDS_PER_MINUTE))
    assert result.passed, result.reasons


def test_empty_audio_fails_and_says_so() -> None:
    result = check_audio(np.zeros(0, dtype=np.float32), SR, TEXT)
    assert not result.passed
    assert result.reasons == ["the engine returned no audio"]


def test_digital_silence_fails_as_silent() -> None:
    result = check_audio(np.zeros(SR * 3, dtype=np.float32), SR, TEXT)
    assert failed(result) == {"silence"}
    assert "silent" in result.reasons[0]


def test_non_finite_samples_fail_and_the_rest_is_still_measured(clean: npt.NDArray[np.float32]) -> None:
    broken = clean.copy()
    broken[1000:1010] = np.nan
    broken[2000] = np.inf
    result = check_audio(broken, SR, TEXT)
    assert failed(result) == {"audio"}
    audio = result.check("audio")
    assert audio is not None
    assert audio.score == 11.0
    assert result.speech_s > 3


def test_clipping(clean: npt.NDArray[np.float32]) -> None:
    loud = np.clip(clean * 8.0, -1.0, 1.0).astype(np.float32)
    assert "clipping" in failed(check_audio(loud, SR, TEXT))


def test_truncation_and_babble_fail_the_duration(clean: npt.NDArray[np.float32], rate: SpeakingRate) -> None:
    short = check_audio(clean[: clean.size // 2], SR, TEXT, rate=rate)
    assert "duration" in failed(short)
    assert "missing or cut off" in " ".join(short.reasons)
    long = check_audio(np.concatenate((clean, clean)), SR, TEXT, rate=rate)
    assert "duration" in failed(long)
    assert "repeated words" in " ".join(long.reasons)


def test_without_a_rate_only_implausible_speech_fails(clean: npt.NDArray[np.float32]) -> None:
    assert check_audio(clean, SR, TEXT).passed
    assert "duration" in failed(check_audio(clean[: SR // 2], SR, TEXT))  # 100 letters in half a second


def test_a_long_silence_inside_the_speech(clean: npt.NDArray[np.float32]) -> None:
    middle = clean.size // 2
    gap = np.concatenate((clean[:middle], np.zeros(2 * SR, dtype=np.float32), clean[middle:]))
    result = check_audio(gap, SR, TEXT)
    assert "pauses" in failed(result)


def test_noise_inside_and_at_the_edges(clean: npt.NDArray[np.float32]) -> None:
    rng = np.random.default_rng(1)
    noise = (rng.standard_normal(SR) * 0.05).astype(np.float32)
    middle = clean.size // 2
    inside = check_audio(np.concatenate((clean[:middle], noise, clean[middle:])), SR, TEXT)
    assert "noise" in failed(inside)
    assert "hiss" in failed(inside)  # white noise: a flat spectrum
    assert "rumble" not in failed(inside)
    leading = check_audio(np.concatenate((noise, clean)), SR, TEXT)
    assert "edges" in failed(leading)
    assert "start" in " ".join(leading.reasons)


def test_another_voice_fails_the_pitch(engine: EspeakEngine, clean: npt.NDArray[np.float32]) -> None:
    other = engine.synthesize([SynthesisRequest(TEXT, HIGH_VOICE)])[0]
    result = check_audio(other, SR, TEXT, expected_f0_hz=DEFAULT_F0_MEDIAN_HZ)
    assert failed(result) == {"pitch"}
    assert check_audio(clean, SR, TEXT, expected_f0_hz=DEFAULT_F0_MEDIAN_HZ).passed


ALTO = {
    "f0_median_hz": np.asarray([190.0], dtype=np.float32),
    "f0_range_st": np.asarray([4.0], dtype=np.float32),
    "words_per_minute": np.asarray([180.0], dtype=np.float32),
}
LOW_VOICE = {**ALTO, "f0_median_hz": np.asarray([103.0], dtype=np.float32)}  # ~10.6 semitones under


@pytest.mark.parametrize("heading", ["chapter seventeen", "chapter seventy-one", "chapter sixty-one"])
def test_a_headings_falling_intonation_is_not_another_voice(engine: EspeakEngine, heading: str) -> None:
    """Two words' median F0 follows their fall (about 4 semitones under the voice's median here): short
    speech gets the wider ``max_pitch_shift_short_st``, and another voice is still told apart."""
    wave = engine.synthesize([SynthesisRequest(heading, ALTO)])[0]
    result = check_audio(wave, SR, heading, expected_f0_hz=190.0)
    pitch = result.check("pitch")
    assert pitch is not None
    assert pitch.score is not None, "enough voiced speech to be judged"
    assert pitch.score < -QaPolicy().max_pitch_shift_st, "falls further than a long chunk may"
    assert pitch.passed, pitch.reason
    low = engine.synthesize([SynthesisRequest(heading, LOW_VOICE)])[0]
    lower = check_audio(low, SR, heading, expected_f0_hz=190.0).check("pitch")
    assert lower is not None
    assert not lower.passed
    assert re.fullmatch(
        r"median pitch \d+ Hz is \d+\.\d semitones below the voice's 190 Hz \(at most \d+ allowed\)",
        lower.reason,
    ), lower.reason


def test_level_against_the_job(clean: npt.NDArray[np.float32]) -> None:
    quiet = (clean * 0.1).astype(np.float32)  # -20 dB
    result = check_audio(quiet, SR, TEXT, expected_level_db=check_audio(clean, SR, TEXT).level_db)
    assert failed(result) == {"level"}
    assert re.fullmatch(
        r"speech level -\d+\.\d dBFS is 1\d\.\d dB below the job's -\d+\.\d dBFS \(at most 6 allowed\)",
        result.reasons[0],
    ), result.reasons


def test_a_very_short_chunk(engine: EspeakEngine) -> None:
    text = "Yes."
    wave = engine.synthesize([SynthesisRequest(text, {})])[0]
    rate = SpeakingRate.from_words_per_minute(DEFAULT_WORDS_PER_MINUTE)
    result = check_audio(wave, SR, text, rate=rate, expected_f0_hz=DEFAULT_F0_MEDIAN_HZ)
    assert result.passed, result.reasons


def test_speaking_rate_measurement() -> None:
    assert measure_speaking_rate([("Hello there.", 1.0)]) is None  # too little to go on
    text = "a" * 150
    rate = measure_speaking_rate([(text, 10.0), (text, 10.0), ("ignored", 0.0)])
    assert rate is not None
    assert rate.per_second == pytest.approx(15.0)
    assert rate.chunks == 2
    assert spoken_units("Twenty-one o'clock, said Dr. Hale.", "words") == 5
    assert spoken_units("Ab, c-d!", "chars") == 4
    with pytest.raises(ValueError, match="positive"):
        SpeakingRate(0.0)
    assert median_f0([100.0, None, 120.0, float("nan"), 110.0]) == 110.0
    assert median_f0([]) is None


def test_policies() -> None:
    assert policy_for("espeak") == QaPolicy()
    assert policy_for("qwen3-tts") == DEFAULT_POLICIES["qwen3-tts"]
    assert policy_for("qwen3-tts").max_pause_s > QaPolicy().max_pause_s
    # every neural engine gets the neural defaults (Fish Speech breathes and pauses as Qwen3 does), an
    # engine outside the catalog too, whatever its name; only the engines that declare the rule-based
    # profile keep the thresholds set on formant speech
    assert policy_for("fish-speech") == policy_for("qwen3-tts") == policy_for("some-new-cloner")
    assert policy_for("espeak-ng-variant") == policy_for("constant") == NEURAL_POLICY
    assert policy_for("espeak-paced") == QaPolicy()
    assert is_rule_based("espeak-paced")
    assert not is_rule_based("constant")
    assert policy_for("espeak", {"max_pause_s": 3.0}).max_pause_s == 3.0
    with pytest.raises(ValueError, match="unknown QA thresholds: nope"):
        policy_for("espeak", {"nope": 1})
    json.dumps(QaPolicy().to_json())


def test_a_short_burst_of_low_noise_is_rumble_and_of_white_noise_hiss(
    clean: npt.NDArray[np.float32],
) -> None:
    """Bursts too short for the ``noise`` check (0.35 s) still show their spectrum: pink noise (most of
    its power below 1 kHz, unlike any unvoiced speech sound) is rumble, white noise is hiss."""
    rng = np.random.default_rng(3)
    n = int(0.35 * SR)
    white = rng.standard_normal(n)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    spectrum[1:] /= np.sqrt(np.arange(1, spectrum.size))
    spectrum[0] = 0.0
    pink = np.fft.irfft(spectrum, n)
    middle = clean.size // 2
    level = float(np.sqrt(np.mean(clean.astype(np.float64) ** 2)))
    for raw, gain, check in ((white, 0.5, "hiss"), (pink, 1.0, "rumble")):
        burst = (raw / np.sqrt(np.mean(raw**2)) * level * gain).astype(np.float32)
        result = check_audio(np.concatenate((clean[:middle], burst, clean[middle:])), SR, TEXT)
        assert "noise" not in failed(result)
        assert check in failed(result), (check, result.reasons)
    assert not {"hiss", "rumble"} & failed(check_audio(clean, SR, TEXT))


def _burst(kind: str, seconds: float, rms: float, seed: int) -> npt.NDArray[np.float32]:
    """White, pink or brown noise of ``rms``."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SR)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    bins = np.arange(1, spectrum.size, dtype=np.float64)
    if kind != "white":
        spectrum[1:] /= np.sqrt(bins) if kind == "pink" else bins
        spectrum[0] = 0.0
    raw: npt.NDArray[np.float64] = np.fft.irfft(spectrum, n)
    scaled: npt.NDArray[np.float32] = (raw / np.sqrt(np.mean(raw**2)) * rms).astype(np.float32)
    return scaled


@pytest.mark.parametrize("kind", ["white", "pink", "brown"])
def test_a_quiet_noise_burst_inside_a_dense_chunk(
    clean: npt.NDArray[np.float32], rate: SpeakingRate, kind: str
) -> None:
    """Noise 18 dB below the speech, inserted between two words of a chunk with few pauses: the activity
    detector's threshold follows the chunk's quietest frames, which here are inside the speech, so the
    burst reads as a pause; it is still sound a listener hears (within ``sound_range_db`` of the speech)
    and one of the noise checks must see it."""
    level = float(np.sqrt(np.mean(clean.astype(np.float64) ** 2)))
    burst = _burst(kind, 0.5, level * 10 ** (-18 / 20), seed=5)
    middle = clean.size // 2
    noisy = np.concatenate((clean[:middle], burst, clean[middle:]))
    result = check_audio(noisy, SR, TEXT, rate=rate, expected_f0_hz=DEFAULT_F0_MEDIAN_HZ)
    assert {"noise", "hiss", "rumble"} & failed(result), result.to_json()
    # the same burst 45 dB down is below what the checks call sound: no noise check fails
    faint = np.concatenate((clean[:middle], burst * 10 ** (-27 / 20), clean[middle:]))
    assert not {"noise", "hiss", "rumble"} & failed(check_audio(faint, SR, TEXT, rate=rate))
    # with nothing heard beyond the activity detector (as before sound_range_db), it is missed
    narrow = QaPolicy(sound_range_db=0.0)
    assert not {"noise", "hiss", "rumble"} & failed(check_audio(noisy, SR, TEXT, rate=rate, policy=narrow))


def test_a_cut_off_ending(clean: npt.NDArray[np.float32], rate: SpeakingRate) -> None:
    """Audio that stops mid-sound (the last 0.4 s of the speech cut, mid-word) fails ``ending``, even
    where the duration check allows the loss; the clean rendering ends on a decay."""
    ending = check_audio(clean, SR, TEXT, rate=rate).check("ending")
    assert ending is not None
    assert ending.passed
    assert ending.score is not None
    assert ending.score < -25.0
    loud = np.flatnonzero(np.abs(clean) > 0.1 * np.max(np.abs(clean)))
    cut = clean[: int(loud[-1]) - int(0.4 * SR)]
    cut = cut[: int(np.flatnonzero(np.abs(cut) > 0.05 * np.max(np.abs(clean)))[-1]) + 1]  # mid-sound
    result = check_audio(cut, SR, TEXT, rate=rate)
    assert failed(result) == {"ending"}, result.to_json()
    assert "cut off" in " ".join(result.reasons)
    # a fade of 10 ms at the cut is an ending, not a cut
    faded = cut.copy()
    n = int(0.01 * SR)
    faded[-n:] *= np.linspace(1.0, 0.0, n, dtype=np.float32)
    assert "ending" not in failed(check_audio(faded, SR, TEXT, rate=rate))


def test_hostile_waveforms_do_not_crash_the_new_checks(clean: npt.NDArray[np.float32]) -> None:
    """All NaN, a single sample, stereo, a constant offset, and a long chunk (ten minutes: its cost is
    linear, bounded in CPU time)."""
    from tests.support.cost import CpuMeter

    nan = check_audio(np.full(SR, np.nan, dtype=np.float32), SR, TEXT)
    assert {"audio", "silence"} <= failed(nan)
    assert not check_audio(np.ones(1, dtype=np.float32), SR, TEXT).passed
    stereo = check_audio(np.stack((clean, clean), axis=1), SR, TEXT)
    assert stereo.passed, stereo.reasons
    dc = check_audio(np.full(SR * 2, 0.3, dtype=np.float32), SR, TEXT)  # no voicing: not speech
    assert not dc.passed
    long = np.tile(clean, int(np.ceil(600 * SR / clean.size)))[: 600 * SR]
    meter = CpuMeter()
    result = check_audio(long, SR, TEXT)
    assert meter.seconds() < 60.0
    assert not result.passed  # ten minutes for two sentences: the duration says so
    assert "duration" in failed(result)
    json.dumps(result.to_json())


def test_unusable_audio_is_named_and_usable_audio_passes() -> None:
    rate = 22_050
    speech = np.sin(np.linspace(0, 2000, rate)) * 0.3
    assert unusable_audio(speech, rate) is None
    cases = {
        "no audio": np.zeros(0),
        "NaN or infinite": np.concatenate([speech, [np.nan, np.inf]]),
        "silent": np.full(rate, 1e-6),
    }
    for words, audio in cases.items():
        result = unusable_audio(audio, rate)
        assert result is not None, words
        assert not result.passed
        assert words in " ".join(result.reasons), result.reasons

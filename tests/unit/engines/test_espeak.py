"""The espeak engine against the real libespeak-ng (no mocks)."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from worker.engines import Engine, EngineError, SynthesisRequest, espeak_binding
from worker.engines.espeak import (
    ANALYSIS_VERSION,
    DEFAULT_F0_MEDIAN_HZ,
    DEFAULT_F0_RANGE_ST,
    DEFAULT_WORDS_PER_MINUTE,
    FEMALE_VARIANT,
    PITCH_TABLE_DEFAULT,
    PITCH_TABLE_F3,
    RATE_TABLE,
    EspeakEngine,
    VoiceSettings,
    measure_rendering,
    settings_for_prompt,
)
from worker.engines.pitch import f0_statistics, speech_seconds, track_pitch

SR = 22050
SENTENCE = "The quick brown fox jumps over the lazy dog near the river."  # 12 words
REFERENCE_TEXT = (
    "It was a bright cold day in April, and the clocks were striking thirteen. "
    "Winston Smith slipped quickly through the glass doors of Victory Mansions."
)
OTHER_TEXT = (
    "Far out in the uncharted backwaters of the unfashionable end of the western spiral arm "
    "of the galaxy lies a small unregarded yellow sun."
)


def render_reference(
    text: str, *, pitch: int = 50, rate: int = 175, voice: str = "gmw/en-US"
) -> npt.NDArray[np.float32]:
    samples = espeak_binding.synthesize(text, espeak_binding.SynthParams(voice, rate=rate, pitch=pitch))
    return (samples.astype(np.float32) / 32768.0).astype(np.float32)


def median_f0(audio: npt.NDArray[np.float32]) -> float:
    stats = f0_statistics(track_pitch(audio, SR))
    assert stats is not None
    return stats[0]


def scalar(prompt: dict[str, npt.NDArray[np.generic]], key: str) -> float:
    return float(np.asarray(prompt[key]).reshape(-1)[0])


# -- contract ----------------------------------------------------------------------------------------


def test_engine_attributes(engine: EspeakEngine) -> None:
    assert isinstance(engine, Engine)
    assert engine.name == "espeak"
    assert engine.sample_rate == 22050
    assert 100 <= engine.max_chunk_chars <= 2000
    assert engine.version.startswith("espeak-ng ")
    assert engine.version.endswith("/" + ANALYSIS_VERSION)
    assert espeak_binding.library_version() in engine.version


def test_synthesize_sentence(engine: EspeakEngine) -> None:
    [wave] = engine.synthesize([SynthesisRequest(SENTENCE, {})])
    assert wave.dtype == np.float32
    assert wave.ndim == 1
    assert 1.0 < wave.size / SR < 5.0
    assert float(np.abs(wave).max()) <= 1.0
    assert float(np.sqrt(np.mean(wave**2))) > 0.01  # not silent
    assert espeak_binding.sample_rate() == engine.sample_rate


def test_batch_gives_one_waveform_per_request_in_order(engine: EspeakEngine) -> None:
    short = SynthesisRequest("Hello there.", {})
    long = SynthesisRequest(SENTENCE + " " + SENTENCE, {})
    waves = engine.synthesize([short, long, short])
    assert len(waves) == 3
    assert waves[0].size < waves[1].size
    assert np.array_equal(waves[0], waves[2])
    assert np.array_equal(waves[1], engine.synthesize([long])[0])
    assert engine.synthesize([]) == []


def test_rendering_is_deterministic(engine: EspeakEngine) -> None:
    assert espeak_binding.is_deterministic()
    request = SynthesisRequest(SENTENCE, {"f0_median_hz": np.array([180.0], dtype=np.float32)})
    first = engine.synthesize([request])[0]
    # Renderings in between, with other voices, variants, pitches and rates, must not leak into it.
    engine.synthesize([SynthesisRequest("Zwei Bier, bitte!", {}, language="de")])
    engine.synthesize(
        [SynthesisRequest("Hi.", {"f0_median_hz": np.array([90.0])}, params={"rate_scale": 2.0})]
    )
    second = engine.synthesize([request])[0]
    assert np.array_equal(first, second)


def test_empty_text_gives_empty_waveform(engine: EspeakEngine) -> None:
    [wave] = engine.synthesize([SynthesisRequest("   \n", {})])
    assert wave.dtype == np.float32
    assert wave.size == 0


@pytest.mark.parametrize("language", ["en", "en-us", "en-GB", "en_gb", "de", "de-AT", "fr", "es", "pt-br"])
def test_known_languages(engine: EspeakEngine, language: str) -> None:
    [wave] = engine.synthesize([SynthesisRequest("Hello, one two three.", {}, language=language)])
    assert wave.size > SR // 2


def test_language_voice_mapping(engine: EspeakEngine) -> None:
    assert engine.voice_for_language("en") == "gmw/en-US"
    assert engine.voice_for_language("en-GB") == "gmw/en"
    assert engine.voice_for_language("de") == "gmw/de"
    assert engine.voice_for_language("fr") == "roa/fr"


@pytest.mark.parametrize("language", ["xx", "klingon", "", "en+f3", "../en", "en us"])
def test_unknown_language_raises(engine: EspeakEngine, language: str) -> None:
    with pytest.raises(EngineError, match="no voice"):
        engine.synthesize([SynthesisRequest(SENTENCE, {}, language=language)])


def test_unknown_language_fails_the_batch_before_rendering(engine: EspeakEngine) -> None:
    with pytest.raises(EngineError):
        engine.synthesize([SynthesisRequest(SENTENCE, {}), SynthesisRequest(SENTENCE, {}, language="zz")])


# -- speaker prompts ---------------------------------------------------------------------------------


def test_prompt_layout(engine: EspeakEngine) -> None:
    prompt = engine.encode_speaker(render_reference(REFERENCE_TEXT), SR, REFERENCE_TEXT)
    assert set(prompt) == {
        "f0_median_hz",
        "f0_range_st",
        "words_per_minute",
        "voiced_seconds",
        "speech_seconds",
    }
    for value in prompt.values():
        assert value.dtype == np.float32
        assert value.shape == (1,)
        assert np.all(np.isfinite(value))
    # espeak's default voice at default settings comes out at the calibrated defaults.
    assert scalar(prompt, "f0_median_hz") == pytest.approx(DEFAULT_F0_MEDIAN_HZ, rel=0.05)
    assert scalar(prompt, "words_per_minute") == pytest.approx(DEFAULT_WORDS_PER_MINUTE, rel=0.1)
    assert scalar(prompt, "voiced_seconds") > 1.0


def test_prompt_pitch_ordering_and_rendering(engine: EspeakEngine) -> None:
    low = engine.encode_speaker(render_reference(REFERENCE_TEXT, pitch=20), SR, REFERENCE_TEXT)
    high = engine.encode_speaker(render_reference(REFERENCE_TEXT, pitch=85), SR, REFERENCE_TEXT)
    assert scalar(low, "f0_median_hz") * 1.4 < scalar(high, "f0_median_hz")
    # Rendering another text with each prompt reproduces the ordering (and roughly the figures).
    low_wave, high_wave = engine.synthesize(
        [SynthesisRequest(OTHER_TEXT, low), SynthesisRequest(OTHER_TEXT, high)]
    )
    low_f0, high_f0 = median_f0(low_wave), median_f0(high_wave)
    assert low_f0 * 1.4 < high_f0
    assert low_f0 == pytest.approx(scalar(low, "f0_median_hz"), rel=0.1)
    assert high_f0 == pytest.approx(scalar(high, "f0_median_hz"), rel=0.1)


def test_prompt_rate_ordering_and_rendering(engine: EspeakEngine) -> None:
    slow = engine.encode_speaker(render_reference(REFERENCE_TEXT, rate=110), SR, REFERENCE_TEXT)
    fast = engine.encode_speaker(render_reference(REFERENCE_TEXT, rate=300), SR, REFERENCE_TEXT)
    assert scalar(slow, "words_per_minute") * 2 < scalar(fast, "words_per_minute")
    slow_wave, fast_wave = engine.synthesize(
        [SynthesisRequest(OTHER_TEXT, slow), SynthesisRequest(OTHER_TEXT, fast)]
    )
    assert speech_seconds(slow_wave, SR) > 2 * speech_seconds(fast_wave, SR)
    assert slow_wave.size > 2 * fast_wave.size


def test_female_reference_selects_female_variant(engine: EspeakEngine) -> None:
    reference = render_reference(REFERENCE_TEXT, voice="gmw/en-US+f3")
    prompt = engine.encode_speaker(reference, SR, REFERENCE_TEXT)
    assert scalar(prompt, "f0_median_hz") > 180
    assert settings_for_prompt(prompt).variant == FEMALE_VARIANT
    [wave] = engine.synthesize([SynthesisRequest(OTHER_TEXT, prompt)])
    assert median_f0(wave) == pytest.approx(scalar(prompt, "f0_median_hz"), rel=0.1)


def test_silence_gives_defaults(engine: EspeakEngine) -> None:
    prompt = engine.encode_speaker(np.zeros(SR, dtype=np.float32), SR, "some words here")
    assert scalar(prompt, "f0_median_hz") == pytest.approx(DEFAULT_F0_MEDIAN_HZ)
    assert scalar(prompt, "f0_range_st") == pytest.approx(DEFAULT_F0_RANGE_ST)
    assert scalar(prompt, "words_per_minute") == pytest.approx(DEFAULT_WORDS_PER_MINUTE)
    assert scalar(prompt, "voiced_seconds") == 0.0
    assert all(np.all(np.isfinite(v)) for v in prompt.values())
    assert settings_for_prompt(prompt) == VoiceSettings(variant=None, pitch=50, pitch_range=50, rate=175)


def test_noise_and_odd_input_do_not_give_nan(engine: EspeakEngine) -> None:
    noise = np.random.default_rng(1).normal(0, 0.2, SR * 2).astype(np.float32)
    noise[100] = np.nan
    prompt = engine.encode_speaker(noise, 16000, "")
    assert all(np.all(np.isfinite(v)) for v in prompt.values())
    stereo = np.stack([render_reference(SENTENCE)] * 2, axis=1)  # (frames, channels)
    assert scalar(engine.encode_speaker(stereo, SR, SENTENCE), "voiced_seconds") > 0.5


def test_empty_transcript_gives_default_rate(engine: EspeakEngine) -> None:
    prompt = engine.encode_speaker(render_reference(REFERENCE_TEXT, rate=300), SR, "")
    assert scalar(prompt, "words_per_minute") == pytest.approx(DEFAULT_WORDS_PER_MINUTE)
    assert scalar(prompt, "f0_median_hz") > 50


def test_reference_at_another_sample_rate(engine: EspeakEngine) -> None:
    reference = render_reference(REFERENCE_TEXT, pitch=70)
    upsampled = np.repeat(reference, 2)  # 44100 Hz, crude but pitch-preserving
    a = engine.encode_speaker(reference, SR, REFERENCE_TEXT)
    b = engine.encode_speaker(upsampled, 2 * SR, REFERENCE_TEXT)
    assert scalar(b, "f0_median_hz") == pytest.approx(scalar(a, "f0_median_hz"), rel=0.03)
    assert scalar(b, "words_per_minute") == pytest.approx(scalar(a, "words_per_minute"), rel=0.03)


def test_too_short_reference_raises(engine: EspeakEngine) -> None:
    with pytest.raises(EngineError, match="too short"):
        engine.encode_speaker(np.zeros(int(0.4 * SR), dtype=np.float32), SR, "hi")
    with pytest.raises(EngineError):
        engine.encode_speaker(np.zeros(SR, dtype=np.float32), 0, "hi")
    with pytest.raises(EngineError):
        engine.encode_speaker(np.zeros((2, 2, SR), dtype=np.float32), SR, "hi")


# -- prompt -> settings --------------------------------------------------------------------------------


def test_settings_defaults_for_empty_or_broken_prompts() -> None:
    default = VoiceSettings(variant=None, pitch=50, pitch_range=50, rate=175)
    assert settings_for_prompt({}) == default
    nan = np.array([np.nan], dtype=np.float32)
    assert settings_for_prompt({"f0_median_hz": nan, "words_per_minute": np.array([-3.0])}) == default
    assert settings_for_prompt({"f0_median_hz": np.zeros(0)}) == default


def test_settings_follow_the_calibration() -> None:
    # Table nodes map back to their own settings.
    f0, span = PITCH_TABLE_DEFAULT[8][3]  # pitch 80, range 75
    settings = settings_for_prompt({"f0_median_hz": np.array([f0]), "f0_range_st": np.array([span])})
    assert (settings.variant, settings.pitch, settings.pitch_range) == (None, 80, 75)
    f0, span = PITCH_TABLE_F3[3][1]  # pitch 30, range 25
    settings = settings_for_prompt({"f0_median_hz": np.array([f0]), "f0_range_st": np.array([span])})
    assert (settings.variant, settings.pitch, settings.pitch_range) == (FEMALE_VARIANT, 30, 25)
    for rate, wpm in RATE_TABLE:
        assert settings_for_prompt({"words_per_minute": np.array([wpm])}).rate == rate
    # Out of reach: clamped.
    assert settings_for_prompt({"f0_median_hz": np.array([30.0])}).pitch == 0
    assert settings_for_prompt({"f0_median_hz": np.array([900.0])}).pitch == 100
    assert settings_for_prompt({"words_per_minute": np.array([10.0])}).rate == espeak_binding.RATE_MIN
    assert settings_for_prompt({"words_per_minute": np.array([5000.0])}).rate == espeak_binding.RATE_MAX


def test_rate_scale(engine: EspeakEngine) -> None:
    assert settings_for_prompt({}, rate_scale=1.5).rate > 175 * 1.3
    normal, fast = engine.synthesize(
        [SynthesisRequest(OTHER_TEXT, {}), SynthesisRequest(OTHER_TEXT, {}, params={"rate_scale": 1.5})]
    )
    assert fast.size < normal.size * 0.8
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(EngineError, match="rate_scale"):
            engine.synthesize([SynthesisRequest(SENTENCE, {}, params={"rate_scale": bad})])


@pytest.mark.parametrize(
    ("voice", "pitch", "pitch_range", "expected"),
    [
        ("gmw/en-US", 50, 50, PITCH_TABLE_DEFAULT[5][2]),
        ("gmw/en-US", 0, 0, PITCH_TABLE_DEFAULT[0][0]),
        ("gmw/en-US", 100, 100, PITCH_TABLE_DEFAULT[10][4]),
        ("gmw/en-US+f3", 50, 50, PITCH_TABLE_F3[5][2]),
    ],
)
def test_calibration_tables_still_match_the_library(
    voice: str, pitch: int, pitch_range: int, expected: tuple[float, float]
) -> None:
    measured = measure_rendering(voice=voice, pitch=pitch, pitch_range=pitch_range)
    assert measured["f0_median_hz"] == pytest.approx(expected[0], rel=0.01)
    assert measured["f0_range_st"] == pytest.approx(expected[1], abs=0.1)


def test_rate_table_still_matches_the_library() -> None:
    for rate, wpm in (RATE_TABLE[1], RATE_TABLE[4], RATE_TABLE[-1]):
        assert measure_rendering(rate=rate)["words_per_minute"] == pytest.approx(wpm, rel=0.01)


# -- processes and threads -----------------------------------------------------------------------------


def test_concurrent_synthesis_is_serialised(engine: EspeakEngine) -> None:
    requests = [
        SynthesisRequest(SENTENCE, {}),
        SynthesisRequest(
            "Guten Morgen, wie geht es Ihnen?", {"f0_median_hz": np.array([200.0])}, language="de"
        ),
        SynthesisRequest(OTHER_TEXT, {"words_per_minute": np.array([300.0])}),
        SynthesisRequest("Bonjour tout le monde.", {}, language="fr"),
    ]
    expected = engine.synthesize(requests)
    results: dict[tuple[int, int], npt.NDArray[np.float32]] = {}
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for call in range(3):
                results[worker, call] = engine.synthesize([requests[(worker + call) % len(requests)]])[0]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert len(results) == 12
    for (worker, call), wave in results.items():
        assert np.array_equal(wave, expected[(worker + call) % len(requests)])


def _render_in_child(text: str) -> tuple[int, bytes]:
    import os

    from worker.engines import get_engine

    [wave] = get_engine("espeak").synthesize([SynthesisRequest(text, {})])
    return os.getpid(), wave.tobytes()


def test_forked_child_reinitialises_and_renders_identically() -> None:
    from worker.engines import get_engine

    parent = get_engine("espeak").synthesize([SynthesisRequest(SENTENCE, {})])[0]  # initialised here
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        child_pid, raw = pool.apply_async(_render_in_child, (SENTENCE,)).get(timeout=120)
    assert child_pid != multiprocessing.current_process().pid
    assert np.array_equal(np.frombuffer(raw, dtype=np.float32), parent)


def test_fork_while_lock_is_held_does_not_deadlock_the_child() -> None:
    context = multiprocessing.get_context("fork")
    espeak_binding.sample_rate()  # initialise in the parent
    espeak_binding._lock.acquire()
    try:
        pool = context.Pool(1)  # the worker process is forked now, with the lock held
    finally:
        espeak_binding._lock.release()
    with pool:
        _pid, raw = pool.apply_async(_render_in_child, ("Hello.",)).get(timeout=120)
    assert len(raw) > 0


def test_import_does_not_load_the_library() -> None:
    code = (
        "import sys\n"
        "import worker.engines, worker.engines.registry, worker.engines.espeak\n"
        "from worker.engines import espeak_binding\n"
        "maps = open('/proc/self/maps').read()\n"
        "assert 'libespeak-ng' not in maps, 'library mapped at import'\n"
        "assert espeak_binding._state.pid == 0\n"
        "worker.engines.get_engine('espeak')\n"
        "assert espeak_binding._state.pid == 0, 'engine construction must not initialise'\n"
        "assert 'flask' not in sys.modules and 'celery' not in sys.modules\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, timeout=120, cwd=Path(__file__).resolve().parents[3]
    )

"""The fault-injecting engine (bench/faults.py), and the whole chunk QA catching each of its faults on
real espeak audio while clean chunks pass."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bench.faults import (
    FaultKind,
    FaultyEngine,
    double_phrase,
    drop_sentence,
    fixed_plan,
    insert_noise,
    random_plan,
    truncate,
)
from worker.engines import Engine, SynthesisRequest
from worker.engines.espeak import DEFAULT_F0_MEDIAN_HZ, DEFAULT_WORDS_PER_MINUTE, EspeakEngine
from worker.qa import PocketsphinxRecogniser, SpeakingRate, assess_chunk

SR = EspeakEngine.sample_rate
TEXT = (
    "The old keeper walked slowly towards the harbour. Rain drummed against the windows. "
    "The doctor carefully opened a wooden box."
)
OTHER = {
    "f0_median_hz": np.asarray([200.0], dtype=np.float32),
    "f0_range_st": np.asarray([4.0], dtype=np.float32),
    "words_per_minute": np.asarray([150.0], dtype=np.float32),
}


@pytest.fixture(scope="module")
def espeak() -> EspeakEngine:
    return EspeakEngine()


def test_text_faults() -> None:
    text, dropped = drop_sentence(TEXT, random.Random(0))
    assert dropped in TEXT
    assert dropped not in text
    assert len(text) < len(TEXT)
    one, clause = drop_sentence("At dawn, the keeper walked to the harbour.", random.Random(0))
    assert clause == "the keeper walked to the harbour."
    assert one == "At dawn,"
    words, third = drop_sentence("one two three four five six", random.Random(0))
    assert words == "one two five six"
    assert third == "three four"
    doubled, phrase = double_phrase("The keeper walked to the harbour.", random.Random(2))
    assert f"{phrase} {phrase}" in doubled.rstrip(".")
    assert doubled.endswith(".")
    assert doubled.count(".") == 1


def test_audio_faults(espeak: EspeakEngine) -> None:
    wave = espeak.synthesize([SynthesisRequest(TEXT, {})])[0]
    cut, detail = truncate(wave, SR, random.Random(1))
    assert cut.size < wave.size - 0.4 * SR
    assert np.array_equal(cut, wave[: cut.size])
    assert detail.startswith("cut ")
    noisy, detail = insert_noise(wave, SR, random.Random(1))
    assert noisy.size > wave.size + 0.3 * SR
    assert noisy.dtype == np.float32
    assert "noise" in detail
    assert float(np.max(np.abs(noisy))) <= 0.99


def test_the_wrapper_injects_once_then_renders_clean(espeak: EspeakEngine) -> None:
    plan = fixed_plan({TEXT: FaultKind.TRUNCATE})
    faulty = FaultyEngine(espeak, plan)
    assert isinstance(faulty, Engine)
    assert (faulty.name, faulty.sample_rate, faulty.max_chunk_chars) == ("espeak", SR, espeak.max_chunk_chars)
    assert faulty.version.endswith("/faulty")
    assert faulty.version != espeak.version
    request = SynthesisRequest(TEXT, {})
    clean = espeak.synthesize([request])[0]
    first, again = faulty.synthesize([request])[0], faulty.synthesize([request])[0]
    assert first.size < clean.size
    assert np.array_equal(again, clean)
    assert [(entry.attempt, entry.kind) for entry in faulty.log] == [(0, FaultKind.TRUNCATE), (1, None)]
    assert faulty.attempts(TEXT) == 2
    other = SynthesisRequest("Rain drummed against the windows.", {})
    assert np.array_equal(faulty.synthesize([other])[0], espeak.synthesize([other])[0])


def test_faults_are_reproducible_and_other_voice_needs_prompts(espeak: EspeakEngine) -> None:
    request = SynthesisRequest(TEXT, {})
    one = FaultyEngine(espeak, fixed_plan({TEXT: FaultKind.NOISE}), seed=3).synthesize([request])[0]
    two = FaultyEngine(espeak, fixed_plan({TEXT: FaultKind.NOISE}), seed=3).synthesize([request])[0]
    assert np.array_equal(one, two)
    with pytest.raises(ValueError, match="other_prompts"):
        FaultyEngine(espeak, fixed_plan({TEXT: FaultKind.OTHER_VOICE})).synthesize([request])


def test_random_plan() -> None:
    plan = random_plan(0.3, seed=1)
    texts = [f"Sentence number {n}." for n in range(1000)]
    kinds = [plan(SynthesisRequest(t, {})) for t in texts]
    assert kinds == [plan(SynthesisRequest(t, {})) for t in texts]  # by text, not by call order
    share = sum(k is not None for k in kinds) / len(kinds)
    assert 0.25 < share < 0.35
    assert {k for k in kinds if k is not None} == set(FaultKind)
    with pytest.raises(ValueError, match="share between 0 and 1"):
        random_plan(1.5)


@pytest.mark.parametrize("kind", list(FaultKind))
def test_each_fault_is_caught_and_the_rerender_passes(espeak: EspeakEngine, kind: FaultKind) -> None:
    # Seed 6 draws faults of middling size (a 1.1 s cut, 0.6 s of noise): bench/qa.py measures the rates
    # over all sizes, this shows each kind caught and repaired.
    faulty = FaultyEngine(espeak, fixed_plan({TEXT: kind}), other_prompts=[OTHER], seed=6)
    recogniser = PocketsphinxRecogniser()
    request = SynthesisRequest(TEXT, {})

    def assess() -> list[str]:
        wave = faulty.synthesize([request])[0]
        result = assess_chunk(
            wave,
            SR,
            TEXT,
            rate=SpeakingRate.from_words_per_minute(DEFAULT_WORDS_PER_MINUTE),
            expected_f0_hz=DEFAULT_F0_MEDIAN_HZ,
            recogniser=recogniser,
        )
        return [check.name for check in result.failed]

    caught = assess()
    assert caught, f"{kind.value} ({faulty.log[-1].detail}) was not caught"
    assert assess() == []  # the second attempt is clean, and passes

"""A phrase said twice, heard in the audio (worker.qa.repeat and the ``repeat`` check), on real espeak."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from worker.engines import SynthesisRequest
from worker.engines.espeak import EspeakEngine
from worker.qa.checks import NEURAL_POLICY, QaPolicy, check_audio
from worker.qa.repeat import self_repeat, text_repeats

SR = EspeakEngine.sample_rate
TEXT = (
    "The old keeper walked slowly towards the harbour. Rain drummed against the windows, "
    "and the doctor carefully opened a wooden box."
)
# the same text with a phrase said twice, as a looping decoder says it
DOUBLED = (
    "The old keeper walked slowly towards the harbour. Rain drummed against the windows, "
    "and the doctor carefully opened the doctor carefully opened a wooden box."
)


@pytest.fixture(scope="module")
def engine() -> EspeakEngine:
    return EspeakEngine()


def render(engine: EspeakEngine, text: str) -> npt.NDArray[np.float32]:
    return engine.synthesize([SynthesisRequest(text, {})])[0]


def test_a_doubled_phrase_fails_the_repeat_check_and_the_clean_text_passes(engine: EspeakEngine) -> None:
    clean = check_audio(render(engine, TEXT), SR, TEXT)
    doubled = check_audio(render(engine, DOUBLED), SR, TEXT)
    clean_check = clean.check("repeat")
    doubled_check = doubled.check("repeat")
    assert clean_check is not None
    assert clean_check.passed, clean_check
    assert doubled_check is not None
    assert not doubled_check.passed, doubled_check
    assert "said twice" in doubled_check.reason


def test_the_repeat_is_found_where_it_is(engine: EspeakEngine) -> None:
    wave = render(engine, DOUBLED)
    found = self_repeat(wave, SR)
    phrase = render(engine, "the doctor carefully opened")
    # the lag is about the phrase's own length, the matching run most of it
    phrase_s = np.count_nonzero(np.abs(phrase) > 0.01 * np.max(np.abs(phrase))) / SR
    assert found.run_s >= QaPolicy().max_repeat_s
    assert 0.5 * phrase_s <= found.lag_s <= 1.6 * phrase_s, (found, phrase_s)


def test_a_text_that_repeats_itself_is_not_judged(engine: EspeakEngine) -> None:
    text = "A thick fog rolled in from the sea. A thick fog rolled in from the sea, and nobody spoke."
    result = check_audio(render(engine, text), SR, text)
    assert text_repeats(text)
    assert result.check("repeat") is None
    assert self_repeat(render(engine, text), SR).run_s > QaPolicy().max_repeat_s  # it does sound twice


def test_what_counts_as_the_text_repeating_itself() -> None:
    assert text_repeats("It was very, very cold.")
    assert text_repeats("said the doctor. The doctor hurried")
    assert not text_repeats("The man and the dog walked to the harbour.")
    assert not text_repeats(TEXT)


def test_the_neural_profile_leaves_it_off(engine: EspeakEngine) -> None:
    result = check_audio(render(engine, DOUBLED), SR, TEXT, policy=NEURAL_POLICY)
    assert result.check("repeat") is None


def test_silence_and_tiny_audio_do_not_crash_it() -> None:
    assert self_repeat(np.zeros(0, dtype=np.float32), SR).run_s == 0.0
    assert self_repeat(np.zeros(SR, dtype=np.float32), SR).run_s == 0.0
    assert self_repeat(np.zeros(100, dtype=np.float32), SR).run_s == 0.0

"""worker.script.language_id: the language a script is written in, from a bounded sample."""

from __future__ import annotations

import time

import pytest

from worker.script.language_id import SAMPLE_CHARS, SAMPLES, identify, language_warning, sample

GERMAN = (
    "Der alte Leuchtturmwärter stieg jeden Abend die Treppe hinauf und zählte jede Stufe. Er sah die "
    "Schiffe langsam hinter der Hafenmauer vorbeiziehen. Im Winter kam der Nebel früh."
)
ENGLISH = (
    "The old lighthouse keeper climbed the stairs every evening, counting each step, and watched the "
    "ships pass slowly beyond the harbour wall. In winter the fog came early."
)
FRENCH = (
    "Le vieux gardien du phare montait l'escalier chaque soir en comptant les marches, et regardait "
    "passer lentement les navires au-delà du mur du port."
)


@pytest.mark.parametrize(("text", "code"), [(GERMAN, "de"), (ENGLISH, "en"), (FRENCH, "fr")])
def test_prose_is_identified(text: str, code: str) -> None:
    found = identify([text])
    assert found is not None
    assert found[0] == code
    assert found[1] > 0.99


def test_too_little_text_says_nothing() -> None:
    assert identify(["Chapter One", "Yes."]) is None
    assert language_warning(["Kapitel Eins.", "Ja."], "en") is None


def test_the_warning_names_both_languages_and_what_to_set() -> None:
    warning = language_warning([GERMAN], "en-GB")
    assert warning is not None
    assert "German (de)" in warning
    assert "English (en)" in warning
    assert '"language": "de"' in warning
    assert language_warning([GERMAN], "de") is None
    assert language_warning([ENGLISH], "en-us") is None


def test_the_sample_is_bounded_and_comes_from_start_middle_and_end() -> None:
    texts = [f"{n:06d} " + "x" * 93 for n in range(100_000)]  # 10 MB of text in 100,000 paragraphs
    picked = sample(texts)
    assert len(picked) <= SAMPLES * (SAMPLE_CHARS + 1)
    assert "000000" in picked
    assert "050000" in picked or "049999" in picked
    assert "099999" in picked
    short = sample(["a b", "c"])
    assert short == "a b c"


def test_a_long_script_costs_a_sample_not_its_length() -> None:
    language_warning([GERMAN], "en")  # the model is loaded once per process; not what is measured
    started = time.process_time()
    assert language_warning([GERMAN] * 50_000, "en") is not None
    assert time.process_time() - started < 0.5

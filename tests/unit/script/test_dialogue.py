"""Quotations found in a paragraph: every kind of mark, apostrophes told apart, dashes where languages use
them, nesting, unclosed speech (worker.script.dialogue)."""

from __future__ import annotations

import pytest

from worker.script.dialogue import find_quotes


def said(text: str, language: str = "en") -> list[str]:
    return [quote.inner(text) for quote in find_quotes(text, language)]


@pytest.mark.parametrize(
    ("text", "language", "quotations"),
    [
        ("“Hello,” she said, “how are you?”", "en", ["Hello,", "how are you?"]),
        ('"Hello," she said. "Sit down."', "en", ["Hello,", "Sit down."]),
        ("‘Hello,’ she said.", "en", ["Hello,"]),
        ("'Hello,' she said.", "en", ["Hello,"]),
        ("„Komm her“, sagte sie.", "de", ["Komm her"]),
        ("„Chodź tu”, powiedziała.", "pl", ["Chodź tu"]),
        ("»Komm her«, sagte sie.", "de", ["Komm her"]),
        ("« Bonjour », dit-il. « Ça va ? »", "fr", ["Bonjour", "Ça va ?"]),
        ("‹Oui›, dit-elle.", "fr", ["Oui"]),
    ],
)
def test_every_kind_of_quotation_mark(text: str, language: str, quotations: list[str]) -> None:
    assert said(text, language) == quotations


def test_apostrophes_are_not_quotation_marks() -> None:
    text = (
        "‘Take the dogs’ bone away, and don’t argue,’ he said. ‘’Tis late, and it was late in the ’90s too.’"
    )
    assert said(text) == [
        "Take the dogs’ bone away, and don’t argue,",
        "’Tis late, and it was late in the ’90s too.",
    ]
    assert said("She won't go; 'tis the dogs' bone, from the '90s.") == []


def test_nested_quotations_stay_inside_the_outer_one() -> None:
    text = "“He said ‘never’ to me,” Anna said. ‘She wrote “soon” on it,’ Tom said."
    assert said(text) == ["He said ‘never’ to me,", "She wrote “soon” on it,"]


def test_a_speech_left_open_runs_to_the_paragraphs_end() -> None:
    [quote] = find_quotes("“It goes on, as speeches do")
    assert not quote.closed
    assert quote.inner("“It goes on, as speeches do") == "It goes on, as speeches do"


@pytest.mark.parametrize(
    ("text", "language", "speech"),
    [
        ("—¿Vienes? —preguntó Juan—. Te espero.", "es", ["¿Vienes?", "Te espero."]),
        ("— Привет, — сказал он. — Как дела?", "ru", ["Привет,", "Как дела?"]),
        ("—Sí —dijo ella.", "es", ["Sí"]),
    ],
)
def test_dash_dialogue_in_the_languages_that_use_it(text: str, language: str, speech: list[str]) -> None:
    assert said(text, language) == speech
    assert all(quote.dash for quote in find_quotes(text, language))


def test_a_dash_is_no_dialogue_in_english() -> None:
    assert said("— and then the rain came.", "en") == []


def test_empty_quotations_are_left_out() -> None:
    assert said('"" “” ‘’ "a"') == ["a"]

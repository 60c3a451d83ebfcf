"""split_sentences: pysbd segmentation that never loses text."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.script import sentences as sentences_module
from worker.script import split_sentences
from worker.script.sentences import cut_at_segments, language_code, segmenter_for


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Dr. Smith met Mr. Jones at 5 p.m. today. They talked.",
            ["Dr. Smith met Mr. Jones at 5 p.m. today.", "They talked."],
        ),
        (
            "Some fruit, e.g. apples, is sweet. Others, i.e. lemons, are not.",
            ["Some fruit, e.g. apples, is sweet.", "Others, i.e. lemons, are not."],
        ),
        ("Pi is roughly 3.14159. It never ends.", ["Pi is roughly 3.14159.", "It never ends."]),
        ("It cost $4.50 in 2023. Cheap.", ["It cost $4.50 in 2023.", "Cheap."]),
        ('She said, "Stop!" Then she left.', ['She said, "Stop!"', "Then she left."]),
        ("“Are you sure?” he asked. “Yes.”", ["“Are you sure?” he asked.", "“Yes.”"]),
        ("Really?! I had no idea. Wow!", ["Really?!", "I had no idea.", "Wow!"]),
        ("Wait... What happened? Nothing.", ["Wait...", "What happened?", "Nothing."]),
        ("I wonder... maybe not. Fine.", ["I wonder... maybe not.", "Fine."]),
        (
            "J. R. R. Tolkien wrote books. He died in 1973.",
            ["J. R. R. Tolkien wrote books.", "He died in 1973."],
        ),
        ("no final punctuation at all", ["no final punctuation at all"]),
    ],
)
def test_english_rules(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_whitespace_is_normalised_and_sentences_stripped() -> None:
    assert split_sentences("  One   two.\n\tThree\n four.  ") == ["One two.", "Three four."]


@pytest.mark.parametrize("text", ["", "   ", "\n\t \u3000"])
def test_empty_text_has_no_sentences(text: str) -> None:
    assert split_sentences(text) == []


def test_other_language_rules() -> None:
    assert split_sentences("Er kam am 3. Oktober. Dann ging er.", "de") == [
        "Er kam am 3. Oktober.",
        "Dann ging er.",
    ]


@pytest.mark.parametrize(
    ("language", "code"),
    [("en", "en"), ("de-AT", "de"), ("pt_BR", "en"), ("FR", "fr"), ("xx", "en"), ("", "en")],
)
def test_language_fallback(language: str, code: str) -> None:
    assert language_code(language) == code


def test_unsupported_language_uses_english_rules() -> None:
    assert split_sentences("Dr. Who is here. Hello.", "tlh") == ["Dr. Who is here.", "Hello."]


def test_segmenter_is_cached_per_language() -> None:
    assert segmenter_for("en") is segmenter_for("en")
    split_sentences("One. Two.", "en-GB")
    before = segmenter_for.cache_info().misses
    split_sentences("Three. Four.", "en")
    split_sentences("Five. Six.", "en-US")
    assert segmenter_for.cache_info().misses == before


def test_cut_keeps_text_pysbd_dropped_and_never_cuts_mid_word() -> None:
    text = "Alpha beta. Gamma?delta epsilon. Zeta."
    # pysbd lost "Gamma?delta epsilon." and split inside a word: both are absorbed, nothing is lost.
    assert cut_at_segments(text, ["Alpha beta. ", "Gamma?", "Zeta."]) == [
        "Alpha beta.",
        "Gamma?delta epsilon. Zeta.",
    ]
    assert cut_at_segments(text, []) == [text]
    assert cut_at_segments(text, ["not in the text"]) == [text]


@settings(deadline=None, max_examples=300)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=300))
def test_no_text_lost_on_arbitrary_input(text: str) -> None:
    sentences = split_sentences(text)
    assert " ".join(sentences) == " ".join(text.split())
    assert all(sentence and sentence == sentence.strip() for sentence in sentences)


_ABBREVIATIONS = ("Dr.", "Mr.", "e.g.", "i.e.", "3.14", "U.S.A.", "(ok.)", "'yes'")
_OTHER_WORDS = ("word", "Hello", "he", "said", '"Hi!"', "why?!", "so...", "end.")
_WORDS = st.sampled_from(_ABBREVIATIONS + _OTHER_WORDS)


@settings(deadline=None)
@given(st.lists(_WORDS, min_size=1, max_size=40))
def test_no_text_lost_on_tricky_words(words: list[str]) -> None:
    text = " ".join(words)
    assert " ".join(split_sentences(text)) == text


def test_long_text_goes_through_a_sliding_window(monkeypatch: pytest.MonkeyPatch) -> None:
    sentences = [f"Dr. Smith paid ${index}.50 for item {index}, e.g. a book." for index in range(300)]
    # Longer than half the window (so carried over into the next one) but no longer than the window.
    for index in (0, 150, 151, 299):
        sentences[index] = (
            f"Sentence {index} is longer than half the window, " + "and it goes on " * 4 + "to here."
        )
    monkeypatch.setattr("worker.script.sentences._WINDOW", 120)
    assert split_sentences(" ".join(sentences)) == sentences


def test_sentence_longer_than_the_window_is_cut_at_its_last_space(monkeypatch: pytest.MonkeyPatch) -> None:
    sentences = [f"Dr. Smith paid ${index}.50 for item {index}, e.g. a book." for index in range(300)]
    sentences[150] = "This sentence is longer than the window, " + "and it goes on " * 20 + "until here."
    monkeypatch.setattr("worker.script.sentences._WINDOW", 120)
    result = split_sentences(" ".join(sentences))
    assert result[:150] == sentences[:150]
    assert result[-149:] == sentences[151:]
    pieces = result[150:-149]
    assert " ".join(pieces) == sentences[150]
    assert len(pieces) == 3
    assert all(60 <= len(piece) <= 120 for piece in pieces)


def test_sentence_longer_than_the_window_is_cut_after_terminal_punctuation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_on = "Dr. Mr. St. e.g. i.e. 3.5 U.S.A. and so on and so on " * 10  # pysbd ends no sentence in it
    monkeypatch.setattr("worker.script.sentences._WINDOW", 120)
    result = split_sentences(f"Before it. {run_on}After it.")
    assert result[0] == "Before it."
    assert result[-1].endswith("so on After it.")
    assert " ".join(result[1:]) == f"{run_on}After it."
    assert all(len(piece) <= 120 for piece in result)
    assert all(len(piece) >= 60 and piece.endswith(".") for piece in result[1:-1])


def test_word_longer_than_the_window_is_a_sentence_pysbd_never_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    given = _count_segmented(monkeypatch)
    monkeypatch.setattr("worker.script.sentences._WINDOW", 50)
    word = "![" * 60
    text = f"Some words before. {word} and after it. End."
    assert split_sentences(text) == ["Some words before.", word, "and after it.", "End."]
    assert split_sentences(word) == [word]
    assert max(given) <= 50


def _count_segmented(patch: pytest.MonkeyPatch, mode: str = "pysbd") -> list[int]:
    """Record the length of every text handed to pysbd. ``mode`` other than "pysbd" replaces pysbd with a
    hostile one: "none" ends no sentence, "first" ends only the first word (so windows barely move)."""
    given: list[int] = []
    real = sentences_module._segment

    def segment(segmenter: Any, text: str) -> list[str]:
        given.append(len(text))
        if mode == "none":
            return [text]
        if mode == "first":
            return text.split(" ", 1)
        return real(segmenter, text)

    patch.setattr("worker.script.sentences._segment", segment)
    return given


# Fragments of text that pysbd handles slowly or oddly: runs of abbreviations, "![", numbers, quotes,
# brackets, ellipses, CJK stops, long words.
_PATHOLOGICAL = st.lists(
    st.sampled_from(
        [
            *("![", "!", "?", ".", "...", "\u2026", "\u3002", "Dr.", "Mr.", "St.", "e.g.", "i.e.", "3.5"),
            *("U.S.A.", "1.", "(", ")", '"', "'", "\u201d", "a", "Word", "x" * 30, " ", " ", " ", "  ", "\n"),
        ]
    ),
    max_size=120,
).map("".join)


@settings(deadline=None, max_examples=300)
@given(
    _PATHOLOGICAL | st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=300),
    st.integers(min_value=1, max_value=80),
    st.sampled_from(["pysbd", "none", "first"]),
)
def test_no_text_lost_and_work_bounded_on_pathological_text(text: str, window: int, mode: str) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("worker.script.sentences._WINDOW", window)
        given = _count_segmented(patch, mode)
        sentences = split_sentences(text)
    normalised = " ".join(text.split())
    assert " ".join(sentences) == normalised
    assert all(sentence and sentence == sentence.strip() for sentence in sentences)
    assert max(given, default=0) <= window
    assert sum(given) <= 4 * len(normalised) + window


@settings(deadline=None)
@given(st.lists(_WORDS, min_size=1, max_size=60), st.integers(min_value=1, max_value=40))
def test_no_text_lost_with_any_window(words: list[str], window: int) -> None:
    text = " ".join(words)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("worker.script.sentences._WINDOW", window)
        assert " ".join(split_sentences(text)) == text

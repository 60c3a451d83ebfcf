"""Script features of issue 11 shared by every format: breaks, Markdown front matter and footnotes, the
script's language, markup-shaped pieces through sentence splitting, and the chunker's exact pauses."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.script import EmptyScript, ReadOptions, ScriptError, ScriptFormat, make_chunks, parse_document
from worker.script.document import Block, ChapterStart, Pause, Piece, SentenceEnd, Speech, Words
from worker.script.parse import Assembler, Sentence


@pytest.mark.parametrize("fmt", ["plain", "markdown"])
def test_a_break_line_is_an_exact_pause_that_replaces_the_paragraph_pause(fmt: ScriptFormat) -> None:
    parsed = parse_document("One.\n\n<!-- break: 1.5s -->\n\nTwo.\n<!-- BREAK : 250ms -->\nThree.", fmt)
    chunks = make_chunks(parsed.chapters, 100)
    assert [(c.text, c.pause_after, c.pause_seconds) for c in chunks] == [
        ("One.", "sentence", 1.5),
        ("Two.", "sentence", 0.25),
        ("Three.", "none", None),
    ]


@pytest.mark.parametrize("fmt", ["plain", "markdown"])
def test_an_inline_break_cuts_the_paragraph_where_it_stands(fmt: ScriptFormat) -> None:
    parsed = parse_document("He stopped. <!-- break: 2s --> Then, slowly, he turned.\n\nNext.", fmt)
    chunks = make_chunks(parsed.chapters, 100)
    assert [(c.text, c.pause_after, c.pause_seconds) for c in chunks] == [
        ("He stopped.", "sentence", 2.0),
        ("Then, slowly, he turned.", "paragraph", None),
        ("Next.", "none", None),
    ]


def test_breaks_in_a_row_add_up_and_a_break_before_any_words_is_a_warning() -> None:
    parsed = parse_document(
        "<!-- break: 1s -->\n\nA.\n\n<!-- break: 1s -->\n<!-- break: 500ms -->\n\nB.", "plain"
    )
    assert [c.pause_seconds for c in make_chunks(parsed.chapters, 100)] == [1.5, None]
    assert parsed.warnings == ("a break before the first words of the script is ignored",)


@pytest.mark.parametrize(
    ("script", "line", "column"),
    [
        ("A.\n<!-- break: long -->\n", 2, 1),
        ("A. <!-- break: 2 -->", 1, 4),
        ("A.\n\nB <!-- break: 0s -->", 3, 3),
        ("A.\n<!-- break: 10.5s -->", 2, 1),
        ("A.\n<!-- break: 2s", 2, 1),
    ],
)
def test_a_malformed_or_out_of_range_break_is_refused_where_it_stands(
    script: str, line: int, column: int
) -> None:
    for fmt in ("plain", "markdown"):
        with pytest.raises(ScriptError) as caught:
            parse_document(script, fmt)
        assert (caught.value.line, caught.value.column) == (line, column)


def test_breaks_adding_up_beyond_the_limit_are_refused() -> None:
    with pytest.raises(ScriptError, match="add up to more than 10 s"):
        parse_document("A.\n<!-- break: 6s -->\n<!-- break: 6s -->\nB.", "plain")


MARKDOWN_BOOK = """\
---
title: "The Long Road"
author:
  - Ann Smith
  - Bo Lee
language: fr
---
# Un

Il y a une note[^a] ici. Et une autre[^b].

# Deux

Encore[^a].

[^a]: Première note.
[^b]: Seconde
    note.
"""


def test_front_matter_is_metadata_never_speech() -> None:
    parsed = parse_document(MARKDOWN_BOOK, "markdown", language=None)
    assert parsed.info.title == "The Long Road"
    assert parsed.info.author == "Ann Smith, Bo Lee"
    assert parsed.language == "fr"  # the script's language picks the splitter when the job names none
    spoken = " ".join(s for c in parsed.chapters for p in c.paragraphs for s in p)
    assert "Long Road" not in spoken
    assert "Ann" not in spoken
    assert [c.title for c in parsed.chapters] == ["Un", "Deux"]


def test_footnote_markers_are_not_read_and_notes_are_left_out_by_default() -> None:
    parsed = parse_document(MARKDOWN_BOOK, "markdown")
    assert parsed.chapters[0].paragraphs == (("Un",), ("Il y a une note ici.", "Et une autre."))
    assert parsed.chapters[1].paragraphs == (("Deux",), ("Encore.",))


def test_footnotes_can_be_read_at_the_end_of_the_chapter_that_refers_to_them() -> None:
    parsed = parse_document(MARKDOWN_BOOK, "markdown", options=ReadOptions(footnotes="chapter_end"))
    assert parsed.chapters[0].paragraphs[-2:] == (("Note a.", "Première note."), ("Note b.", "Seconde note."))
    assert parsed.chapters[1].paragraphs[-1] == ("Note a.", "Première note.")


@pytest.mark.parametrize(
    "front",
    ["---\ntitle: [unclosed\n---\nText.\n", "---\n" + "a: b\n" * 5000 + "---\nText.\n"],
)
def test_bad_or_oversized_front_matter_is_refused(front: str) -> None:
    with pytest.raises(ScriptError, match="front matter"):
        parse_document(front, "markdown")


def test_yaml_aliases_in_front_matter_cost_nothing() -> None:
    bomb = "---\na: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    parsed = parse_document(bomb + "title: Bomb\n---\nText.\n", "markdown")
    assert parsed.info.title == "Bomb"


def test_the_language_selects_the_sentence_splitter() -> None:
    text = "Er kam am 3. Mai an. Dann ging er."
    german = parse_document(text, "plain", language="de").chapters[0].paragraphs
    assert german == (("Er kam am 3. Mai an.", "Dann ging er."),)


def _assemble(events: list[object], *, explicit: bool = False) -> list[object]:
    assembler = Assembler("en", explicit_chapters=explicit)
    for event in events:
        assembler.add(event)  # type: ignore[arg-type]
    return list(assembler.finish())


def test_explicit_chapters_speak_their_title_unless_the_text_starts_with_a_heading() -> None:
    chapters = _assemble(
        [
            ChapterStart("Chapter One"),
            Block(False, "It began."),
            ChapterStart("Two"),
            Block(True, "Chapter Two"),
            Block(False, "It went on."),
            Block(True, "A section heading inside it"),
            Block(False, "More."),
        ],
        explicit=True,
    )
    assert [(c.title, c.paragraphs) for c in chapters] == [  # type: ignore[attr-defined]
        ("Chapter One", (("Chapter One",), ("It began.",))),
        ("Two", (("Chapter Two",), ("It went on.",), ("A section heading inside it",), ("More.",))),
    ]
    assert chapters[1].headings == frozenset({0, 2})  # type: ignore[attr-defined]


def test_ssml_speech_splits_at_voice_and_rate_changes_and_keeps_shaped_pieces_whole() -> None:
    speech = Speech(
        (
            Words(
                (Piece("Visit the "), Piece("WWW", say="World Wide Web"), Piece(". It is big.")),
            ),
            Words((Piece(" Says Bob."),), voice="Bob", rate=1.25),
            Pause(0.5),
            Words((Piece("Back "),)),
            SentenceEnd(),
            Words(
                (
                    Piece(
                        "to me.",
                    ),
                )
            ),
        )
    )
    [chapter] = _assemble([speech])
    assert chapter.paragraphs == (  # type: ignore[attr-defined]
        ("Visit the WWW.", "It is big."),
        ("Says Bob.",),
        ("Back", "to me."),
    )
    assert chapter.voices == (None, "Bob", None)  # type: ignore[attr-defined]
    styles = chapter.styles  # type: ignore[attr-defined]
    assert [(s.rate, s.pause, s.joined) for s in styles] == [
        (None, None, True),
        (1.25, 0.5, True),
        (None, None, False),
    ]
    first = chapter.paragraphs[0][0]  # type: ignore[attr-defined]
    assert isinstance(first, Sentence)
    assert first.pieces == (Piece("Visit the "), Piece("WWW", say="World Wide Web"), Piece("."))
    chunks = make_chunks([chapter], 100)  # type: ignore[list-item]
    assert [(c.pause_after, c.pause_seconds, c.rate) for c in chunks] == [
        ("sentence", None, None),
        ("sentence", 0.5, 1.25),
        ("none", None, None),
    ]


def test_no_sentence_ends_inside_a_shaped_piece() -> None:
    speech = Speech(
        (Words((Piece("He said "), Piece("Mr. Smith. Jr.", say="Mister Smith Junior"), Piece(" left."))),)
    )
    [chapter] = _assemble([speech])
    assert chapter.paragraphs == (("He said Mr. Smith. Jr. left.",),)  # type: ignore[attr-defined]


WORD = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789éß", min_size=1, max_size=12
)
PUNCT = st.sampled_from(["", "", "", ".", ",", "!", "?", ";", ":", "...", ".\u201d", " -"])


@st.composite
def scripts(draw: st.DrawFn) -> str:
    paragraphs = []
    for _ in range(draw(st.integers(1, 8))):
        # The first word starts with a letter: "1." or "-" opening a Markdown paragraph is a list marker.
        first = draw(st.sampled_from("abcXYZ")) + draw(WORD)
        words = draw(st.lists(st.tuples(WORD, PUNCT), min_size=0, max_size=40))
        text = " ".join([first, *(w + p for w, p in words)])
        if draw(st.booleans()) and draw(st.booleans()):
            text = "# " + text
        paragraphs.append(text)
    return "\n\n".join(paragraphs)


@settings(max_examples=150, deadline=None)
@given(scripts(), st.sampled_from(["plain", "markdown"]), st.integers(14, 200))
def test_parsing_and_chunking_lose_duplicate_or_reorder_no_word(
    script: str, fmt: str, max_chars: int
) -> None:
    # max_chars is above the longest word: a longer word is cut into pieces by design.
    paragraphs = script.split("\n\n")
    if fmt == "markdown" and all(p.startswith("# ") for p in paragraphs):
        with pytest.raises(EmptyScript, match="only headings"):  # nothing to read under the headings
            parse_document(script, fmt)  # type: ignore[arg-type]
        return
    chunks = make_chunks(parse_document(script, fmt).chapters, max_chars)  # type: ignore[arg-type]
    written = " ".join(c.written for c in chunks)
    assert re.findall(r"\w+", written) == re.findall(r"\w+", script)

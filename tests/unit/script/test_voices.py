"""Voice directives: ``<!-- voice: NAME -->`` lines switch the voice of the paragraphs that follow."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.script import (
    Chapter,
    ChunkSpec,
    ScriptError,
    ScriptFormat,
    VoiceDirective,
    make_chunks,
    parse_document,
    parse_script,
)

DIALOGUE = """\
The door opened.

<!-- voice: Bob -->
"Who is there?" asked Bob.

<!--VOICE :  Old Mary   -->
"Only me."
She laughed.

<!-- voice: default -->
And that was that.
"""


@pytest.mark.parametrize("fmt", ["plain", "markdown"])
def test_directives_switch_the_voice_of_the_paragraphs_that_follow(fmt: ScriptFormat) -> None:
    parsed = parse_document(DIALOGUE, fmt)
    [chapter] = parsed.chapters
    assert chapter.voices == (None, "Bob", "Old Mary", None)
    assert parsed.directives == (
        VoiceDirective("Bob", 3, 1),
        VoiceDirective("Old Mary", 6, 1),
        VoiceDirective("default", 10, 1),
    )
    texts = [" ".join(paragraph) for paragraph in chapter.paragraphs]
    assert not any("<!--" in text or "voice" in text for text in texts)  # never spoken


@pytest.mark.parametrize("fmt", ["plain", "markdown"])
def test_a_directive_line_inside_a_paragraph_splits_it(fmt: ScriptFormat) -> None:
    [chapter] = parse_script("First line.\n  <!-- voice: Ann -->  \nSecond line.\n", fmt)
    assert chapter.paragraphs == (("First line.",), ("Second line.",))
    assert chapter.voices == (None, "Ann")


def test_markdown_headings_take_the_current_voice_and_voices_cross_chapters() -> None:
    source = "<!-- voice: Ann -->\n# One\n\nText.\n\n# Two\n\n<!-- voice: DEFAULT -->\nMore.\n"
    assert parse_script(source, "markdown") == [
        Chapter("One", (("One",), ("Text.",)), ("Ann", "Ann")),
        Chapter("Two", (("Two",), ("More.",)), ("Ann", None)),
    ]


def test_markdown_directives_in_quotes_lists_and_html_blocks() -> None:
    source = (
        "> <!-- voice: A -->\n> quoted\n\n- <!-- voice: B -->\n  item\n\n"
        "<div>\n<!-- voice: C -->\n</div>\n\nEnd."
    )
    parsed = parse_document(source, "markdown")
    assert parsed.chapters[0].voices == ("A", "B", "C")
    assert [(d.name, d.line, d.column) for d in parsed.directives] == [("A", 1, 3), ("B", 4, 3), ("C", 8, 1)]


def test_markdown_directives_in_code_and_other_comments_are_ignored() -> None:
    source = (
        "```\n<!-- voice: Code -->\n```\n\n    <!-- voice: Indented -->\n\n<!-- note: voice -->\n\nText.\n"
    )
    parsed = parse_document(source, "markdown")
    assert parsed.directives == ()
    assert parsed.chapters == [Chapter(None, (("Text.",),))]


def test_plain_other_comments_are_spoken_as_before() -> None:
    [chapter] = parse_script("<!-- a note --> Text.", "plain")
    assert chapter.paragraphs == (("<!-- a note --> Text.",),)
    assert chapter.voices == ()


def test_single_voice_chapters_equal_the_old_form() -> None:
    assert parse_script("One.\n\n<!-- voice: default -->\nTwo.", "plain") == [
        Chapter(None, (("One.",), ("Two.",)))
    ]
    assert Chapter(None, (("A.",),), (None,)) == Chapter(None, (("A.",),))


def test_chapter_voices_must_match_paragraphs() -> None:
    with pytest.raises(ValueError, match="2 voices for 1 paragraphs"):
        Chapter(None, (("A.",),), ("x", None))


def test_directive_alone_or_only_switching_is_no_speakable_text() -> None:
    with pytest.raises(ScriptError, match="nothing to read"):
        parse_script("<!-- voice: Bob -->\n", "plain")


@pytest.mark.parametrize("fmt", ["plain", "markdown"])
@pytest.mark.parametrize(
    ("source", "message", "position"),
    [
        ("Hi.\n\n<!-- voice: -->\n", "names no voice", (3, 1)),
        ("Hi.\n\n  <!--voice:   -->\n", "names no voice", (3, 3)),
        (f"Hi.\n<!-- voice: {'x' * 65} -->\n", "65 characters; the limit is 64", (2, 1)),
        ("Hi.\n\n<!-- voice: Bob --> and text\n", "line of its own", (3, 1)),
        ("Hi.\n\n<!-- voice: Bob\n-->\n", "line of its own", (3, 1)),
        ("Hi.\n\n<!-- voice: A --> <!-- voice: B -->\n", "line of its own", (3, 1)),
        ("Hello <!-- voice: Bob --> there.\n", "line of its own", (1, 7)),
    ],
)
def test_malformed_directives_name_line_and_column(
    fmt: ScriptFormat, source: str, message: str, position: tuple[int, int]
) -> None:
    with pytest.raises(ScriptError, match=message) as caught:
        parse_script(source, fmt)
    assert (caught.value.line, caught.value.column) == position


def test_a_64_character_name_is_fine() -> None:
    name = "N" * 64
    assert parse_document(f"<!-- voice: {name} -->\nHi.", "plain").directives[0].name == name


def test_markdown_misplaced_directive_inside_a_later_paragraph_line() -> None:
    with pytest.raises(ScriptError) as caught:
        parse_script("# Title\n\nOne line\nthen <!-- voice: X --> inline.\n", "markdown")
    assert (caught.value.line, caught.value.column) == (4, 6)


def test_crlf_line_numbers() -> None:
    parsed = parse_document("One.\r\n\r\n<!-- voice: Bob -->\r\nTwo.\r", "markdown")
    assert parsed.directives == (VoiceDirective("Bob", 3, 1),)
    assert parse_document("One.\r\n\r\n<!-- voice: Bob -->\r\nTwo.\r", "plain") == parsed


def test_chunks_carry_the_voice_and_never_span_a_change() -> None:
    source = "One. Two.\n<!-- voice: Bob -->\nThree. Four.\n<!-- voice: Ann -->\nFive."
    [chapter] = parse_script(source, "plain")
    assert make_chunks([chapter], 200) == [
        ChunkSpec(0, 0, "One. Two.", "paragraph", None),
        ChunkSpec(1, 0, "Three. Four.", "paragraph", "Bob"),
        ChunkSpec(2, 0, "Five.", "none", "Ann"),
    ]


def test_long_paragraph_chunks_all_keep_its_voice() -> None:
    sentences = " ".join(f"Sentence number {i} is here." for i in range(20))
    [chapter] = parse_script(f"<!-- voice: Bob -->\n{sentences}\n\n<!-- voice: default -->\nEnd.", "plain")
    chunks = make_chunks([chapter], 60)
    assert len(chunks) > 3
    assert [c.voice for c in chunks] == ["Bob"] * (len(chunks) - 1) + [None]
    assert chunks[-2].pause_after == "paragraph"


_NAME = st.sampled_from([None, "Ann", "Bob", "default"])
_WORDS = st.lists(st.from_regex(r"[a-z]{1,8}\.?", fullmatch=True), min_size=1, max_size=12).map(" ".join)


@settings(deadline=None, max_examples=150)
@given(st.lists(st.tuples(_NAME, _WORDS), min_size=1, max_size=8), st.sampled_from(["plain", "markdown"]))
def test_every_paragraph_gets_the_last_directive_before_it(
    parts: list[tuple[str | None, str]], fmt: ScriptFormat
) -> None:
    blocks: list[str] = []
    expected: list[str | None] = []
    voice: str | None = None
    for name, words in parts:
        if name is not None:
            voice = None if name == "default" else name
        blocks.append(words if name is None else f"<!-- voice: {name} -->\n{words}")
        expected.append(voice)
    [chapter] = parse_script("\n\n".join(blocks), fmt)
    assert [chapter.voice_of(i) for i in range(len(chapter.paragraphs))] == expected
    chunks = make_chunks([chapter], 40)
    for chunk, following in itertools.pairwise(chunks):
        if chunk.voice != following.voice:
            assert chunk.pause_after == "paragraph"

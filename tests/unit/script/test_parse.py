"""parse_script: plain and Markdown scripts to chapters, and the errors it raises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.script import Chapter, EmptyScript, ScriptError, ScriptFormat, parse_script
from worker.script.markdown import TOO_DEEP

MARKDOWN_SCRIPT = """\
A short *preamble* before the first heading. It has two sentences.

# Chapter **One**: The Start

Dr. Smith read the [manual](https://example.com/manual "Manual") &amp; paid $3.14 for `print()`.
He left.

- First item
- Second *item*

```python
this_is_code = "never spoken"
```

Chapter Two
===========

> A quoted line
> that continues.

---

## Chapter Three

Line one\\
line two with ![a diagram](diagram.png) an image and <b>raw</b> HTML.
"""


def test_markdown_chapters() -> None:
    chapters = parse_script(MARKDOWN_SCRIPT, "markdown")
    assert chapters == [
        Chapter(None, (("A short preamble before the first heading.", "It has two sentences."),)),
        Chapter(
            "Chapter One: The Start",
            (
                ("Chapter One: The Start",),
                ("Dr. Smith read the manual & paid $3.14 for print().", "He left."),
                ("First item",),
                ("Second item",),
            ),
        ),
        Chapter("Chapter Two", (("Chapter Two",), ("A quoted line that continues.",))),
        Chapter("Chapter Three", (("Chapter Three",), ("Line one line two with an image and raw HTML.",))),
    ]


def test_markdown_without_preamble_and_heading_only_chapter() -> None:
    chapters = parse_script("# One\n\n# Two\n\nText.\n", "markdown")
    assert chapters == [
        Chapter("One", (("One",),)),
        Chapter("Two", (("Two",), ("Text.",))),
    ]


def test_markdown_without_headings_is_one_untitled_chapter() -> None:
    assert parse_script("Hello *there*.\n\nSecond.", "markdown") == [
        Chapter(None, (("Hello there.",), ("Second.",)))
    ]


def test_markdown_inline_details() -> None:
    source = (
        "Entities &copy; &#233; &eacute;, escapes \\*x\\*, <http://auto.example> autolink,"
        " ~~struck~~, line<br>break, <!-- note --> comment.\n"
    )
    [chapter] = parse_script(source, "markdown")
    assert chapter.paragraphs == (
        ("Entities © é é, escapes *x*, http://auto.example autolink, struck, line break, comment.",),
    )


def test_markdown_skips_code_rules_html_blocks_and_empty_headings() -> None:
    source = "#\n\nText.\n\n    indented code\n\n***\n\n<div>\nhtml block\n</div>\n\n<!-- hidden -->\n"
    assert parse_script(source, "markdown") == [Chapter(None, (("Text.",),))]


def test_markdown_table_cells_are_paragraphs() -> None:
    source = "| Name | Role |\n|------|------|\n| Ann | *Lead* |\n"
    [chapter] = parse_script(source, "markdown")
    assert chapter.paragraphs == (("Name",), ("Role",), ("Ann",), ("Lead",))


def test_markdown_nested_list_and_loose_items() -> None:
    source = "1. One\n\n   More of one.\n2. Two\n   - Nested\n"
    [chapter] = parse_script(source, "markdown")
    assert chapter.paragraphs == (("One",), ("More of one.",), ("Two",), ("Nested",))


def _nested_list(depth: int) -> str:
    return "".join("  " * level + f"- Level {level}.\n" for level in range(depth))


@pytest.mark.parametrize(
    ("source", "deepest"),
    [
        pytest.param(">" * 19 + " Level 18.\n", "Level 18.", id="19 blockquotes"),
        pytest.param(_nested_list(9), "Level 8.", id="9 lists"),
        pytest.param("> " * 9 + "- Level 9.\n", "Level 9.", id="9 blockquotes, a list"),
        pytest.param("1. " * 9 + "Level 8.\n", "Level 8.", id="9 lists on a line"),
    ],
)
def test_markdown_nested_as_deep_as_allowed_is_read_whole(source: str, deepest: str) -> None:
    [chapter] = parse_script(f"Intro.\n\n{source}\nOutro.\n", "markdown")
    assert chapter.paragraphs[0] == ("Intro.",)
    assert chapter.paragraphs[-2:] == ((deepest,), ("Outro.",))


@pytest.mark.parametrize(
    ("source", "line"),
    [
        pytest.param(">" * 20 + " Lost.\n", 3, id="20 blockquotes"),
        pytest.param(_nested_list(10), 12, id="10 lists"),  # markdown-it would drop "Outro." too
        pytest.param("1. " * 10 + "Lost.\n", 3, id="10 lists on a line"),
        pytest.param("> " * 19 + "- Lost.\n", 3, id="19 blockquotes, a list"),
    ],
)
def test_markdown_nested_deeper_is_refused_not_read_with_text_missing(source: str, line: int) -> None:
    with pytest.raises(ScriptError) as caught:
        parse_script(f"Intro.\n\n{source}\nOutro.\n", "markdown")
    assert caught.value.message == TOO_DEEP
    assert (caught.value.line, caught.value.column) == (line, None)


def test_plain_paragraphs() -> None:
    source = (
        "  First line\nsame   paragraph.  Second sentence.\n\n \t \n\n\nNext\tparagraph.\n\n* * *\n\nLast."
    )
    assert parse_script(source, "plain") == [
        Chapter(
            None,
            (
                ("First line same paragraph.", "Second sentence."),
                ("Next paragraph.",),
                ("Last.",),
            ),
        )
    ]


def test_plain_keeps_markdown_syntax_and_handles_crlf() -> None:
    source = "\ufeff# Not a heading\r\n*kept*\r\n\r\nTwo\rlines."
    assert parse_script(source, "plain") == [Chapter(None, (("# Not a heading *kept*",), ("Two lines.",)))]


def test_language_is_passed_to_the_segmenter() -> None:
    [chapter] = parse_script("Es kostet 3 Euro. Das ist gut.", "plain", language="de")
    assert chapter.paragraphs == (("Es kostet 3 Euro.", "Das ist gut."),)


@pytest.mark.parametrize(
    ("source", "fmt", "expected"),
    [
        ("abc\x00def", "plain", ("U+0000", 1, 4)),
        ("first\nsecond\n  \x07 bell", "plain", ("U+0007", 3, 3)),
        ("one\r\ntwo\r\nthr\x1bee", "markdown", ("U+001B", 3, 4)),
        ("old\rmac\x7f", "plain", ("U+007F", 2, 4)),
        ("\x85", "markdown", ("U+0085", 1, 1)),
        ("ok\n\n\tx\x0c", "plain", ("U+000C", 3, 3)),
    ],
)
def test_control_characters_are_rejected_with_position(
    source: str, fmt: ScriptFormat, expected: tuple[str, int, int]
) -> None:
    codepoint, line, column = expected
    with pytest.raises(ScriptError) as caught:
        parse_script(source, fmt)
    assert codepoint in caught.value.message
    assert (caught.value.line, caught.value.column) == (line, column)
    assert str(caught.value) == f"line {line}, column {column}: {caught.value.message}"


NO_LETTERS = "it holds no letters or digits, only spaces and punctuation"
MARKUP = "everything in it is markup that is not read (comments, code blocks, tags or metadata)"
HEADINGS = "with no text under them; headings are read as chapter titles before their text"
WHY = {
    "": NO_LETTERS,
    " \n\t\r\n  ": NO_LETTERS,
    "...\n\n* * *": NO_LETTERS,
    "```\ncode only\n```\n": MARKUP,
    "---\n\n***\n": NO_LETTERS,
    "<!-- only a comment -->\n": MARKUP,
    "![only an image](x.png)": MARKUP,
    "# One\n\n## Two\n\n* * *\n": HEADINGS,
}


@pytest.mark.parametrize(
    ("source", "fmt"),
    [
        ("", "plain"),
        (" \n\t\r\n  ", "plain"),
        ("...\n\n* * *", "plain"),
        ("", "markdown"),
        ("```\ncode only\n```\n", "markdown"),
        ("---\n\n***\n", "markdown"),
        ("<!-- only a comment -->\n", "markdown"),
        ("![only an image](x.png)", "markdown"),
        ("# One\n\n## Two\n\n* * *\n", "markdown"),
    ],
)
def test_no_speakable_text(source: str, fmt: ScriptFormat) -> None:
    with pytest.raises(EmptyScript) as caught:
        parse_script(source, fmt)
    assert caught.value.message.startswith("the script has nothing to read: "), caught.value.message
    assert caught.value.message.endswith(WHY[source]), caught.value.message
    assert (caught.value.line, caught.value.column) == (None, None)
    assert isinstance(caught.value, ValueError)


def test_unknown_format() -> None:
    with pytest.raises(ScriptError, match="unknown script format"):
        parse_script("text", "html")  # type: ignore[arg-type]


_WORD = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCZ0123456789.,;:!?'\"-", min_size=1, max_size=12
).filter(lambda word: any(character.isalnum() for character in word))
_SPACE = st.sampled_from([" ", "  ", "\t", "\n", " \n "])
_BREAK = st.sampled_from(["\n\n", "\n \n", "\r\n\r\n", "\n\n\n\t\n"])


@st.composite
def plain_scripts(draw: st.DrawFn) -> tuple[str, list[list[str]]]:
    paragraphs = draw(st.lists(st.lists(_WORD, min_size=1, max_size=25), min_size=1, max_size=6))
    text = draw(_BREAK).join("".join(word + draw(_SPACE) for word in words) for words in paragraphs)
    return text, paragraphs


@settings(deadline=None)
@given(plain_scripts())
def test_plain_parse_keeps_every_word_in_its_paragraph(script: tuple[str, list[list[str]]]) -> None:
    text, paragraphs = script
    [chapter] = parse_script(text, "plain")
    assert chapter.title is None
    assert [" ".join(paragraph).split() for paragraph in chapter.paragraphs] == paragraphs
    assert all(sentence and sentence == sentence.strip() for p in chapter.paragraphs for sentence in p)


@settings(deadline=None)
@given(st.lists(st.lists(st.from_regex(r"[a-z]{1,8}", fullmatch=True), min_size=1, max_size=12), min_size=1))
def test_simple_markdown_matches_plain(paragraphs: list[list[str]]) -> None:
    text = "\n\n".join(" ".join(words) for words in paragraphs)
    assert parse_script(text, "markdown") == parse_script(text, "plain")


@settings(deadline=None, max_examples=200)
@given(st.text(alphabet="ab Z9.!#*_`[]()<>&;|-=>~\\\n\t", max_size=200))
def test_any_markdown_parses_or_raises_script_error(text: str) -> None:
    message: str | None = None
    try:
        chapters = parse_script(text, "markdown")
    except ScriptError as error:
        chapters, message = [], error.message
    if not chapters:
        assert message is not None
        assert message.startswith("the script has nothing to read: "), message
        return
    for index, chapter in enumerate(chapters):
        assert chapter.paragraphs
        assert chapter.title is not None or index == 0
        if chapter.title is not None:
            assert chapter.paragraphs[0] == (chapter.title,)
        for paragraph in chapter.paragraphs:
            assert paragraph
            assert all(sentence and " ".join(sentence.split()) == sentence for sentence in paragraph)

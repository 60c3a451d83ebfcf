"""Scripts (plain text or Markdown) to chapters of paragraphs of sentences."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from .errors import ScriptError
from .markdown import Block, markdown_blocks
from .sentences import split_sentences

ScriptFormat = Literal["plain", "markdown"]

# Unicode category Cc minus the three ordinary whitespace controls.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_BLANK_LINES = re.compile(r"\n\s*\n")


@dataclass(frozen=True)
class Chapter:
    """A chapter: its title (None before the first heading and in plain scripts) and its paragraphs.

    Each paragraph is a tuple of sentences. A titled chapter's first paragraph is the title itself, as a
    single sentence, because headings are spoken.
    """

    title: str | None
    paragraphs: tuple[tuple[str, ...], ...]


def parse_script(text: str, fmt: ScriptFormat, *, language: str = "en") -> list[Chapter]:
    """Parse a script into chapters, ready for :func:`make_chunks`.

    Whitespace is normalised to single spaces and paragraphs without a letter or digit (scene breaks like
    ``* * *``) are dropped. Raises :class:`ScriptError` for control characters other than tab, CR and LF
    (with their line and column) and for scripts with no speakable text.
    """
    check_characters(text)
    text = text.removeprefix("\ufeff")
    if fmt == "plain":
        blocks: Iterable[Block] = plain_blocks(text)
    elif fmt == "markdown":
        blocks = markdown_blocks(text)
    else:
        raise ScriptError(f"unknown script format {fmt!r}")
    chapters = _assemble(blocks, language)
    if not chapters:
        raise ScriptError("script has no speakable text")
    return chapters


def check_characters(text: str) -> None:
    """Raise :class:`ScriptError` at the first control character other than ``\\t``, ``\\r``, ``\\n``."""
    match = _CONTROL.search(text)
    if match is None:
        return
    index = match.start()
    before = text[:index]
    line = before.count("\n") + before.count("\r") - before.count("\r\n") + 1
    column = index - max(before.rfind("\n"), before.rfind("\r"))
    raise ScriptError(f"control character U+{ord(text[index]):04X} is not allowed", line, column)


def plain_blocks(text: str) -> Iterator[Block]:
    """Paragraphs of a plain script: separated by one or more blank (or whitespace-only) lines."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    for paragraph in _BLANK_LINES.split(text):
        yield Block(False, paragraph)


def _speakable(text: str) -> bool:
    return any(character.isalnum() for character in text)


def _assemble(blocks: Iterable[Block], language: str) -> list[Chapter]:
    """Group blocks into chapters: each heading opens one; unspeakable blocks are skipped."""
    chapters: list[Chapter] = []
    title: str | None = None
    paragraphs: list[tuple[str, ...]] = []
    for block in blocks:
        text = " ".join(block.text.split())
        if not _speakable(text):
            continue
        if block.heading:
            if paragraphs:
                chapters.append(Chapter(title, tuple(paragraphs)))
            title, paragraphs = text, [(text,)]
        else:
            paragraphs.append(tuple(split_sentences(text, language)))
    if paragraphs:
        chapters.append(Chapter(title, tuple(paragraphs)))
    return chapters

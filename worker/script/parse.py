"""Scripts (plain text or Markdown) to chapters of paragraphs of sentences."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from .errors import ScriptError
from .markdown import Block, markdown_blocks
from .sentences import split_sentences
from .voices import VoiceDirective, directive_in_line

ScriptFormat = Literal["plain", "markdown"]

# Unicode category Cc minus the three ordinary whitespace controls.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Chapter:
    """A chapter: its title (None before the first heading and in plain scripts) and its paragraphs.

    Each paragraph is a tuple of sentences. A titled chapter's first paragraph is the title itself, as a
    single sentence, because headings are spoken. ``voices`` runs parallel to ``paragraphs``: the voice
    name a directive chose for each one, None for the job's own voice. It is empty when every paragraph
    is read by the job's voice (so single-voice chapters compare equal however they were built).
    """

    title: str | None
    paragraphs: tuple[tuple[str, ...], ...]
    voices: tuple[str | None, ...] = ()

    def __post_init__(self) -> None:
        if self.voices and len(self.voices) != len(self.paragraphs):
            raise ValueError(f"{len(self.voices)} voices for {len(self.paragraphs)} paragraphs")
        if all(voice is None for voice in self.voices):
            object.__setattr__(self, "voices", ())

    def voice_of(self, paragraph: int) -> str | None:
        """The voice name of paragraph number ``paragraph``; None for the job's own voice."""
        return self.voices[paragraph] if self.voices else None


@dataclass(frozen=True)
class ParsedScript:
    """A parsed script: its chapters and every voice directive in it, used or not (all must resolve)."""

    chapters: list[Chapter]
    directives: tuple[VoiceDirective, ...] = field(default=())


def parse_script(text: str, fmt: ScriptFormat, *, language: str = "en") -> list[Chapter]:
    """Parse a script into chapters, ready for :func:`make_chunks` (see :func:`parse_document`)."""
    return parse_document(text, fmt, language=language).chapters


def parse_document(text: str, fmt: ScriptFormat, *, language: str = "en") -> ParsedScript:
    """Parse a script into chapters and the voice directives that switch who reads them.

    Whitespace is normalised to single spaces and paragraphs without a letter or digit (scene breaks like
    ``* * *``) are dropped. Raises :class:`ScriptError` for control characters other than tab, CR and LF
    and for malformed voice directives (with their line and column), and for scripts with no speakable
    text.
    """
    check_characters(text)
    text = text.removeprefix("\ufeff")
    if fmt == "plain":
        blocks: Iterable[Block | VoiceDirective] = plain_blocks(text)
    elif fmt == "markdown":
        blocks = markdown_blocks(text)
    else:
        raise ScriptError(f"unknown script format {fmt!r}")
    chapters, directives = _assemble(blocks, language)
    if not chapters:
        raise ScriptError("script has no speakable text")
    return ParsedScript(chapters, tuple(directives))


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


def plain_blocks(text: str) -> Iterator[Block | VoiceDirective]:
    """Paragraphs of a plain script, separated by one or more blank (or whitespace-only) lines, and the
    voice directive lines between them. A directive line is never spoken and always ends a paragraph."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    paragraph: list[str] = []
    for number, line in enumerate(text.split("\n"), start=1):
        directive = directive_in_line(line, number)
        if directive is None and line.strip():
            paragraph.append(line)
            continue
        if paragraph:
            yield Block(False, "\n".join(paragraph))
            paragraph = []
        if directive is not None:
            yield directive
    if paragraph:
        yield Block(False, "\n".join(paragraph))


def _speakable(text: str) -> bool:
    return any(character.isalnum() for character in text)


def _assemble(
    blocks: Iterable[Block | VoiceDirective], language: str
) -> tuple[list[Chapter], list[VoiceDirective]]:
    """Group blocks into chapters (each heading opens one; unspeakable blocks are skipped), each paragraph
    tagged with the voice of the last directive before it; also return every directive, in order."""
    chapters: list[Chapter] = []
    directives: list[VoiceDirective] = []
    title: str | None = None
    paragraphs: list[tuple[str, ...]] = []
    voices: list[str | None] = []
    voice: str | None = None
    for block in blocks:
        if isinstance(block, VoiceDirective):
            directives.append(block)
            voice = block.voice
            continue
        text = " ".join(block.text.split())
        if not _speakable(text):
            continue
        if block.heading:
            if paragraphs:
                chapters.append(Chapter(title, tuple(paragraphs), tuple(voices)))
            title, paragraphs, voices = text, [(text,)], [voice]
        else:
            paragraphs.append(tuple(split_sentences(text, language)))
            voices.append(voice)
    if paragraphs:
        chapters.append(Chapter(title, tuple(paragraphs), tuple(voices)))
    return chapters, directives

"""A cast applied to a script: each line of dialogue read by its character's voice, the rest (dialogue
tags included) by the narrator (pure).

A job's ``cast`` maps characters (by canonical name or any alias, case-insensitive) to voices, gives a
``default`` voice for the characters it does not map, and corrects single lines by their index
(``lines``). Applying it cuts each paragraph with dialogue into its narration and its quotations, each a
paragraph of its own that continues the one before (a sentence pause between them, never a paragraph
pause), so that a chunk always holds one speaker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .attribution import NARRATOR, Cast, Line
from .parse import Chapter, Sentence, Style
from .sentences import split_sentences

# Bounds on what a job's cast may hold (a request is refused past them, naming the field).
MAX_CAST_VOICES = 200
MAX_CAST_LINES = 10_000


class CastError(ValueError):
    """A cast that does not fit the script: ``field`` names where (``cast.voices``, ``cast.lines``)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class CastRequest:
    """What a job asks of its cast: voice references by character, the default voice reference for the
    characters left out (None: the narrator's), and speakers by line index."""

    voices: Mapping[str, str] = field(default_factory=dict)
    default: str | None = None
    lines: Mapping[int, str] = field(default_factory=dict)
    llm: bool = False  # ask the operator's attribution model about the lines the rules are unsure of


@dataclass(frozen=True)
class Casting:
    """The cast applied: the chapters cut at speakers, and for each line its speaker after corrections."""

    chapters: list[Chapter]
    speakers: dict[int, str]  # line index -> speaker (a canonical name, or "narrator")
    line_paragraphs: dict[tuple[int, int], int]  # (chapter, paragraph in the cut chapter) -> line index


def names(cast: Cast) -> dict[str, str]:
    """Every form of every character's name, lowercased, to the canonical name; and each word of a name
    that no other character's name has (Anna for Anna Price)."""
    found: dict[str, str] = {NARRATOR: NARRATOR}
    words: dict[str, set[str]] = {}
    for member in cast.characters:
        for form in (member.name, *member.aliases):
            found.setdefault(form.lower(), member.name)
            for word in form.lower().replace(".", " ").split():
                words.setdefault(word, set()).add(member.name)
    for word, owners in words.items():
        if len(owners) == 1:
            found.setdefault(word, next(iter(owners)))
    return found


def check(cast: Cast, request: CastRequest, line_count: int) -> dict[str, str]:
    """The speaker each name of ``request`` means (canonical), or :class:`CastError` naming the first
    names that mean nobody. A name in ``lines`` that is no character's is a character the rules missed:
    it needs a voice (in ``voices``, or a ``default``)."""
    known = names(cast)
    resolved: dict[str, str] = {}
    unknown_lines = sorted(str(i) for i in request.lines if not 0 <= i < line_count)
    if unknown_lines:
        raise CastError(
            f"the script has {line_count} lines of dialogue; no line {', '.join(unknown_lines[:10])}",
            "cast.lines",
        )
    voiced = {name.lower() for name in request.voices}
    for name in request.lines.values():
        key = name.strip().lower()
        if key in known:
            resolved[name] = known[key]
        elif key in voiced or request.default is not None:
            resolved[name] = name.strip()
        else:
            raise CastError(
                f"cast.lines names {name!r}, who is no character of the script and has no voice in "
                "cast.voices (and there is no cast.default)",
                "cast.lines",
            )
    new = {name.strip().lower() for name in request.lines.values()}
    missing = [name for name in request.voices if name.lower() not in known and name.lower() not in new]
    if missing:
        listed = ", ".join(repr(name) for name in missing[:10])
        raise CastError(
            f"cast.voices names {len(missing)} character(s) the script does not have: {listed} "
            "(use a name or alias from the preview's cast)",
            "cast.voices",
        )
    for name in request.voices:
        resolved.setdefault(name, known.get(name.lower(), name))
    return resolved


def apply(chapters: Sequence[Chapter], language: str, cast: Cast, request: CastRequest) -> Casting:
    """Cut ``chapters`` at their lines, each quotation with its speaker's voice reference; raises
    :class:`CastError` for names that mean nobody (see :func:`check`)."""
    resolved = check(cast, request, len(cast.lines))
    voices = {resolved[name].lower(): ref for name, ref in request.voices.items()}
    speakers = {line.index: line.speaker for line in cast.lines}
    for index, name in request.lines.items():
        speakers[index] = resolved[name]
    by_paragraph: dict[tuple[int, int], list[Line]] = {}
    for line in cast.lines:
        by_paragraph.setdefault((line.chapter, line.paragraph), []).append(line)
    cut: list[Chapter] = []
    line_paragraphs: dict[tuple[int, int], int] = {}
    for number, chapter in enumerate(chapters):
        builder = _Builder()
        for paragraph, sentences in enumerate(chapter.paragraphs):
            lines = by_paragraph.get((number, paragraph), [])
            voice, style = chapter.voice_of(paragraph), chapter.style_of(paragraph)
            heading = paragraph in chapter.headings
            if not lines or heading or any(isinstance(s, Sentence) and s.pieces for s in sentences):
                builder.add(sentences, voice, None, style, heading)
                continue
            text = " ".join(sentences)
            for start, end, said in _segments(text, lines):
                piece = text[start:end].strip()
                if not any(character.isalnum() for character in piece):
                    continue
                speaker: str | None = speakers[said.index] if said is not None else None
                if speaker == NARRATOR:
                    speaker = None
                ref = voice if speaker is None else voices.get(speaker.lower(), request.default or voice)
                if said is not None:
                    line_paragraphs[(number, len(builder.paragraphs))] = said.index
                builder.add(
                    tuple(split_sentences(piece, language)),
                    ref,
                    speaker,
                    Style(style.rate, None, True),
                    False,
                )
            builder.end_paragraph(style)
        cut.append(builder.chapter(chapter.title))
    return Casting(cut, speakers, line_paragraphs)


def _segments(text: str, lines: list[Line]) -> list[tuple[int, int, Line | None]]:
    """``text`` cut into narration (None) and the quotations of ``lines``, in order."""
    spans = sorted((start, end, line) for line in lines for start, end in line.spans)
    segments: list[tuple[int, int, Line | None]] = []
    position = 0
    for start, end, line in spans:
        if start > position:
            segments.append((position, start, None))
        segments.append((start, end, line))
        position = end
    if position < len(text):
        segments.append((position, len(text), None))
    return segments


@dataclass
class _Builder:
    paragraphs: list[tuple[str, ...]] = field(default_factory=list)
    voices: list[str | None] = field(default_factory=list)
    speakers: list[str | None] = field(default_factory=list)
    styles: list[Style] = field(default_factory=list)
    headings: set[int] = field(default_factory=set)

    def add(
        self, sentences: tuple[str, ...], voice: str | None, speaker: str | None, style: Style, heading: bool
    ) -> None:
        if heading:
            self.headings.add(len(self.paragraphs))
        self.paragraphs.append(tuple(sentences))
        self.voices.append(voice)
        self.speakers.append(speaker)
        self.styles.append(style)

    def end_paragraph(self, style: Style) -> None:
        """The last piece of a cut paragraph ends it as the paragraph ended (its pause, its break)."""
        if self.styles:
            self.styles[-1] = style

    def chapter(self, title: str | None) -> Chapter:
        return Chapter(
            title,
            tuple(self.paragraphs),
            tuple(self.voices),
            tuple(self.styles),
            frozenset(self.headings),
            tuple(self.speakers),
        )

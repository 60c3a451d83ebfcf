"""Chapters to synthesis chunks of bounded length, each tagged with the pause that follows it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from .parse import Chapter

PauseAfter = Literal["none", "sentence", "paragraph", "chapter"]

# Clause boundaries for splitting an over-long sentence, strongest first: a space after a word ending in
# one of these characters (closing quotes and brackets ignored). The last level (None) is any space.
_CLAUSE_LEVELS: tuple[frozenset[str] | None, ...] = (
    frozenset(";"),
    frozenset(":"),
    frozenset("\u2014\u2013"),  # em and en dash, as in "clause — clause"
    frozenset(","),
    None,
)
_CLOSERS = "\"')]}\u00bb\u2019\u201d"


@dataclass(frozen=True)
class ChunkSpec:
    """One piece of text to synthesise: global position, chapter index, text, the pause after it, and the
    voice name that reads it (None: the job's own voice)."""

    seq: int
    chapter: int
    text: str
    pause_after: PauseAfter
    voice: str | None = None


def make_chunks(chapters: Sequence[Chapter], max_chars: int) -> list[ChunkSpec]:
    """Pack each paragraph's sentences into chunks of at most ``max_chars`` characters.

    Sentences are joined by one space; a chunk never spans two paragraphs and never splits a sentence
    unless that sentence alone is longer than ``max_chars`` (see :func:`split_clauses`). ``chapter`` is
    the index into ``chapters``. Raises ValueError if ``max_chars < 1``.

    Each chunk carries its paragraph's voice. Voices only change between paragraphs, so a chunk never
    spans a voice change and the pause at a change is the paragraph pause (the chapter pause at a chapter
    end). That is deliberate: a change of speaker is a turn in a dialogue, which audiobooks set as a new
    paragraph; a sentence pause would run two speakers together and anything longer would make dialogue
    drag. The caller's ``pauses.paragraph`` setting therefore also tunes the gap between speakers.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    pieces: list[tuple[int, int, str, str | None]] = []  # (chapter index, paragraph number, text, voice)
    paragraph_number = 0
    for chapter_index, chapter in enumerate(chapters):
        for index, paragraph in enumerate(chapter.paragraphs):
            voice = chapter.voice_of(index)
            for text in _pack(paragraph, max_chars, lambda long: split_clauses(long, max_chars)):
                pieces.append((chapter_index, paragraph_number, text, voice))
            paragraph_number += 1
    chunks: list[ChunkSpec] = []
    for seq, (chapter_index, number, text, voice) in enumerate(pieces):
        pause: PauseAfter = "none"
        if seq + 1 < len(pieces):
            next_chapter, next_paragraph, _, _ = pieces[seq + 1]
            if next_chapter != chapter_index:
                pause = "chapter"
            elif next_paragraph != number:
                pause = "paragraph"
            else:
                pause = "sentence"
        chunks.append(ChunkSpec(seq, chapter_index, text, pause, voice))
    return chunks


def split_clauses(text: str, max_chars: int) -> list[str]:
    """Split ``text`` into pieces of at most ``max_chars``, preferring the strongest clause boundaries.

    Boundaries, in order: ``;``, ``:``, an em or en dash, ``,``, then any space. Pieces are cut only
    at spaces, except that a single word longer than ``max_chars`` is hard-split. Joining the pieces with
    single spaces gives back the (whitespace-normalised) text.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    return _split(" ".join(text.split()), max_chars, 0)


def _split(text: str, max_chars: int, level: int) -> list[str]:
    if len(text) <= max_chars:
        return [text] if text else []
    if level == len(_CLAUSE_LEVELS):
        return [text[start : start + max_chars] for start in range(0, len(text), max_chars)]
    parts = _split_after(text, _CLAUSE_LEVELS[level])
    if len(parts) == 1:
        return _split(text, max_chars, level + 1)
    return _pack(parts, max_chars, lambda long: _split(long, max_chars, level + 1))


def _split_after(text: str, marks: frozenset[str] | None) -> list[str]:
    """Split single-spaced ``text`` at the spaces after words ending in one of ``marks`` (None: all)."""
    parts: list[str] = []
    words: list[str] = []
    for word in text.split(" "):
        words.append(word)
        if marks is None or word.rstrip(_CLOSERS)[-1:] in marks:
            parts.append(" ".join(words))
            words = []
    if words:
        parts.append(" ".join(words))
    return parts


def _pack(units: Iterable[str], max_chars: int, split_long: Callable[[str], list[str]]) -> list[str]:
    """Greedily join consecutive units with spaces up to ``max_chars``; over-long units are split alone."""
    packed: list[str] = []
    current = ""
    for raw in units:
        unit = " ".join(raw.split())
        if not unit:
            continue
        if len(unit) > max_chars:
            if current:
                packed.append(current)
                current = ""
            packed.extend(split_long(unit))
        elif not current:
            current = unit
        elif len(current) + 1 + len(unit) <= max_chars:
            current = f"{current} {unit}"
        else:
            packed.append(current)
            current = unit
    if current:
        packed.append(current)
    return packed

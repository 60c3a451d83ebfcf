"""Chapters to synthesis chunks of bounded length, each tagged with the pause that follows it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .parse import Chapter, Style

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
    """One piece of text to synthesise: global position, chapter index, what the engine reads, the pause
    after it, and the voice name that reads it (None: the job's own voice).

    ``source`` is the text as written when it differs from ``text`` (normalised, lexicons applied);
    ``rate`` a speaking-rate multiplier (None: 1); ``pause_seconds`` an exact pause (a break) that
    replaces the ``pause_after`` kind; ``fired`` what changed the written text into ``text``.
    """

    seq: int
    chapter: int
    text: str
    pause_after: PauseAfter
    voice: str | None = None
    source: str | None = None
    rate: float | None = None
    pause_seconds: float | None = None
    fired: tuple[object, ...] = field(default=(), compare=False)
    mid_sentence: bool = field(default=False, compare=False)  # a sentence too long for one chunk goes on
    speaker: str | None = None  # the character who says it (a cast's line); None: the narrator
    paragraph: int = field(default=0, compare=False)  # the paragraph of its chapter it reads

    @property
    def written(self) -> str:
        return self.text if self.source is None else self.source


@dataclass(frozen=True)
class Said:
    """A sentence as the engine will read it, and what changed it (normalisation rules, lexicon entries)."""

    text: str
    fired: tuple[object, ...] = ()


# Turns a sentence of a chapter's paragraph into what the engine reads: (chapter, paragraph number in it,
# sentence) -> Said. The default reads the written text as it is.
Say = Callable[[Chapter, int, str], Said]


def _as_written(chapter: Chapter, paragraph: int, sentence: str) -> Said:
    return Said(sentence)


@dataclass(frozen=True)
class _Unit:
    written: str
    said: str
    fired: tuple[object, ...]
    cut: bool = False  # ends mid-sentence


@dataclass(frozen=True)
class _Piece:
    chapter: int
    paragraph: int  # global paragraph number
    written: str
    said: str
    fired: tuple[object, ...]
    voice: str | None
    style: Style
    last: bool  # the last piece of its paragraph
    cut: bool
    speaker: str | None
    index: int  # the paragraph's number in its chapter


def make_chunks(chapters: Sequence[Chapter], max_chars: int, say: Say = _as_written) -> list[ChunkSpec]:
    """Pack each paragraph's sentences into chunks of at most ``max_chars`` characters (as read).

    Sentences are joined by one space; a chunk never spans two paragraphs and never splits a sentence
    unless that sentence alone is longer than ``max_chars`` (see :func:`split_clauses`). ``chapter`` is
    the index into ``chapters``. ``say`` gives each sentence's spoken form (normalised, lexicons applied);
    lengths are counted in it. Raises ValueError if ``max_chars < 1``.

    Each chunk carries its paragraph's voice and rate. Voices only change between paragraphs, so a chunk
    never spans a voice change and the pause at a change is the paragraph pause (the chapter pause at a
    chapter end). That is deliberate: a change of speaker is a turn in a dialogue, which audiobooks set as
    a new paragraph; a sentence pause would run two speakers together and anything longer would make
    dialogue drag. The caller's ``pauses.paragraph`` setting therefore also tunes the gap between
    speakers. A paragraph cut mid-way (by a break, or an SSML voice or rate change) is followed by a
    sentence pause; a break's exact length replaces whatever pause would fall after it.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    pieces: list[_Piece] = []
    paragraph_number = 0
    for chapter_index, chapter in enumerate(chapters):
        for index, paragraph in enumerate(chapter.paragraphs):
            units = [_unit(sentence, say(chapter, index, sentence)) for sentence in paragraph]
            packed = _pack_units(units, max_chars)
            for number, unit in enumerate(packed):
                pieces.append(
                    _Piece(
                        chapter_index,
                        paragraph_number,
                        unit.written,
                        unit.said,
                        unit.fired,
                        chapter.voice_of(index),
                        chapter.style_of(index),
                        number == len(packed) - 1,
                        unit.cut,
                        chapter.speaker_of(index),
                        index,
                    )
                )
            paragraph_number += 1
    return [
        _spec(seq, piece, pieces[seq + 1] if seq + 1 < len(pieces) else None)
        for seq, piece in enumerate(pieces)
    ]


def _unit(sentence: str, said: Said) -> _Unit:
    return _Unit(" ".join(sentence.split()), " ".join(said.text.split()), said.fired)


def _spec(seq: int, piece: _Piece, following: _Piece | None) -> ChunkSpec:
    pause: PauseAfter = "none"
    if following is not None:
        if following.chapter != piece.chapter:
            pause = "chapter"
        elif following.paragraph != piece.paragraph:
            pause = "sentence" if piece.style.joined else "paragraph"
        else:
            pause = "sentence"
    return ChunkSpec(
        seq,
        piece.chapter,
        piece.said,
        pause,
        piece.voice,
        source=None if piece.written == piece.said else piece.written,
        rate=piece.style.rate,
        pause_seconds=piece.style.pause if piece.last else None,
        fired=piece.fired,
        mid_sentence=piece.cut,
        speaker=piece.speaker,
        paragraph=piece.index,
    )


def _pack_units(units: Sequence[_Unit], max_chars: int) -> list[_Unit]:
    """Greedily join consecutive sentences up to ``max_chars`` (as read); an over-long one is split at
    clause boundaries alone. Where its written and read forms differ, the written sentence stays whole
    with the first of its pieces (normalisation changes word counts, so the two cannot be cut alike)."""
    packed: list[_Unit] = []
    current: list[_Unit] = []
    size = 0

    def flush() -> None:
        nonlocal size
        if current:
            packed.append(_join(current))
            current.clear()
        size = 0

    for unit in units:
        if not unit.said:
            continue
        if len(unit.said) > max_chars:
            flush()
            packed.extend(_split_unit(unit, max_chars))
        elif current and size + 1 + len(unit.said) > max_chars:
            flush()
            current.append(unit)
            size = len(unit.said)
        else:
            size += (1 if current else 0) + len(unit.said)
            current.append(unit)
    flush()
    return packed


def _join(units: Sequence[_Unit]) -> _Unit:
    return _Unit(
        " ".join(u.written for u in units if u.written),
        " ".join(u.said for u in units),
        tuple(f for u in units for f in u.fired),
    )


def _split_unit(unit: _Unit, max_chars: int) -> list[_Unit]:
    said = split_clauses(unit.said, max_chars)
    last = len(said) - 1
    same = unit.written == unit.said
    return [
        _Unit(
            part if same else (unit.written if i == 0 else ""),
            part,
            unit.fired if i == 0 else (),
            cut=i < last,
        )
        for i, part in enumerate(said)
    ]


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

"""The timeline of a stitched output: pauses, and where each chapter starts, known before encoding (pure).

:func:`plan_chapters` needs only each piece's length in samples, its pause and its chapter, so chapter
marks can be handed to ffmpeg (and written into the file's header) before the first sample is encoded.
``stitch`` uses the same function and checks that the audio it streams has the planned lengths.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from worker.audio.tags import clean_title

PAUSE_KINDS = ("none", "sentence", "paragraph", "chapter")


@dataclass(frozen=True)
class Pauses:
    """Seconds of silence inserted after a chunk, by the chunk's ``pause_after`` kind."""

    sentence: float = 0.35
    paragraph: float = 0.8
    chapter: float = 2.0

    def __post_init__(self) -> None:
        for kind in PAUSE_KINDS[1:]:
            value = getattr(self, kind)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(f"pause {kind!r} must be a finite number of seconds >= 0, got {value!r}")

    def seconds(self, kind: str | float) -> float:
        """Length of the pause of ``kind``; ``"none"`` is 0; a number is an exact length in seconds (a
        script's break). Unknown kinds and negative or non-finite numbers raise ``ValueError``."""
        if isinstance(kind, int | float) and not isinstance(kind, bool):
            if not math.isfinite(kind) or kind < 0:
                raise ValueError(f"a pause must be a finite number of seconds >= 0, got {kind!r}")
            return float(kind)
        if kind == "none":
            return 0.0
        if kind in PAUSE_KINDS:
            return float(getattr(self, kind))
        raise ValueError(f"unknown pause kind {kind!r}; expected one of {', '.join(PAUSE_KINDS)}")

    def samples(self, kind: str | float, sample_rate: int) -> int:
        """Length of the pause of ``kind`` in samples at ``sample_rate`` (rounded to the nearest)."""
        return round(self.seconds(kind) * sample_rate)


DEFAULT_PAUSES = Pauses()


@dataclass(frozen=True)
class PieceLength:
    """What the timeline needs of one chunk: its length in samples, the pause after it (a kind, or exact
    seconds), its chapter."""

    samples: int
    pause_after: str | float
    chapter: int


@dataclass(frozen=True)
class ChapterMark:
    """One chapter of the output: the script's chapter ``index``, its title as written into the file,
    and where it starts and ends, in samples and in seconds (``start == start_sample / sample_rate``).
    A chapter ends where the next one starts (the last one at the end of the output), so the pause
    after a chapter's last chunk belongs to it."""

    index: int
    start: float
    end: float
    start_sample: int
    end_sample: int
    title: str


@dataclass(frozen=True)
class ChapterPlan:
    """The chapters of an output in order, and its total length in samples (pauses included)."""

    chapters: tuple[ChapterMark, ...]
    total_samples: int
    sample_rate: int

    @property
    def duration(self) -> float:
        return self.total_samples / self.sample_rate


def default_chapter_title(position: int) -> str:
    """The title of a chapter the script gave none, by its 1-based position in the output."""
    return f"Chapter {position}"


def chapter_title(given: object, position: int) -> str:
    """The title written for a chapter: ``given`` cleaned and cut to length, or "Chapter N" (N its
    1-based position) when it is missing or blank."""
    title = clean_title(given) if isinstance(given, str) else ""
    return title if title.strip() else default_chapter_title(position)


def plan_chapters(
    pieces: Iterable[PieceLength],
    sample_rate: int,
    pauses: Pauses = DEFAULT_PAUSES,
    titles: Mapping[int, str | None] | None = None,
) -> ChapterPlan:
    """Where every chapter starts and ends when ``pieces`` are stitched in order, each followed by its pause.

    ``titles`` maps a chapter index to its title; a missing or blank one becomes "Chapter N" (N its
    position), a long one is cut to :data:`~worker.audio.tags.MAX_CHAPTER_TITLE_CHARS`. Raises
    ``ValueError`` for a non-positive ``sample_rate``, a negative length, an unknown pause kind, no
    pieces, or a chapter whose pieces are not contiguous.
    """
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be a positive integer, got {sample_rate!r}")
    starts: list[tuple[int, int]] = []
    seen: set[int] = set()
    position = 0
    for piece in pieces:
        if isinstance(piece.samples, bool) or not isinstance(piece.samples, int) or piece.samples < 0:
            raise ValueError(f"a piece's length must be a number of samples >= 0, got {piece.samples!r}")
        pause = pauses.samples(piece.pause_after, sample_rate)
        if not starts or starts[-1][0] != piece.chapter:
            if piece.chapter in seen:
                raise ValueError(f"the pieces of chapter {piece.chapter} are not contiguous")
            seen.add(piece.chapter)
            starts.append((piece.chapter, position))
        position += piece.samples + pause
    if not starts:
        raise ValueError("nothing to stitch: no pieces")
    names = titles or {}
    marks = []
    for n, (index, start) in enumerate(starts):
        end = starts[n + 1][1] if n + 1 < len(starts) else position
        marks.append(
            ChapterMark(
                index=index,
                start=start / sample_rate,
                end=end / sample_rate,
                start_sample=start,
                end_sample=end,
                title=chapter_title(names.get(index), n + 1),
            )
        )
    return ChapterPlan(chapters=tuple(marks), total_samples=position, sample_rate=sample_rate)


def samples_to_ms(samples: int, sample_rate: int) -> int:
    """``samples`` in milliseconds, rounded to the nearest (halves up), as ffmpeg rescales to ID3 CHAP."""
    return (2 * samples * 1000 + sample_rate) // (2 * sample_rate)

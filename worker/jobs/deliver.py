"""A finished job's files: the book, and beside it what the job's delivery asks for (pure of Celery and
the database: the stitch task hands it rows and paths).

- the book: every chunk in order with its pauses, mastered (per-chunk gain from the loudness measured
  at render time, true-peak limited), with chapters, tags and cover inside;
- subtitles (SRT, WebVTT) and a JSON manifest, timed from the samples actually stitched;
- with ``split = "chapter"``: one file per chapter (a part per ``max_part_seconds``, cut between chunks),
  each with its own title, album and track number, and a ZIP of them (stored, not recompressed: audio
  does not shrink; written from the files a block at a time);
- with the ACX preset: a report on every chapter file, measured on the encoded file decoded back.
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from worker.audio import BookTags, Cover, Pauses, StitchPiece, StitchResult, stitch
from worker.audio.acx import AcxReport, check_file
from worker.audio.formats import FORMATS
from worker.audio.loudness import Levels
from worker.audio.master import chunk_gain_db, predicted_rms_db
from worker.audio.presets import MAX_RMS_FIT_DB, Delivery
from worker.audio.roomtone import RoomTone, room_tone_level
from worker.audio.stitch import read_lengths
from worker.audio.timings import (
    ChapterTiming,
    ChunkTiming,
    manifest,
    sentence_times,
    subtitle_cues,
    to_srt,
    to_webvtt,
)
from worker.script.sentences import split_sentences
from worker.storage.atomic import atomic_file

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChunkRow:
    """What delivering needs of one rendered chunk."""

    seq: int
    chapter: int
    path: str
    pause: str | float  # a kind of pause, or exact seconds (a break)
    levels: Levels | None
    written: str  # as in the script (subtitles)
    spoken: str  # what the engine read
    voice: str


@dataclass(frozen=True)
class Artefact:
    """One file of a finished job beside the book, as ``GET /v1/jobs/{id}/files`` lists it."""

    name: str
    kind: str  # chapter | bundle | subtitles | manifest | report
    format: str
    path: str
    bytes: int
    chapter: int | None = None
    part: int | None = None
    title: str | None = None
    duration: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "format": self.format,
            "path": self.path,
            "bytes": self.bytes,
            "chapter": self.chapter,
            "part": self.part,
            "title": self.title,
            "duration": None if self.duration is None else round(self.duration, 3),
        }


@dataclass(frozen=True)
class Deliverables:
    book: StitchResult
    files: list[Artefact]


@dataclass(frozen=True)
class BookInfo:
    """The book's side of a delivery: its tags, chapter titles, cover, language and a seed for room tone."""

    tags: BookTags
    titles: Mapping[int, str | None]
    cover: Cover | None
    language: str
    seed: int


def build(
    rows: Sequence[ChunkRow],
    delivery: Delivery,
    book_path: Path,
    file_path: Callable[[str], Path],
    *,
    sample_rate: int,
    pauses: Pauses,
    info: BookInfo,
) -> Deliverables:
    """Write the book to ``book_path`` and every other file under ``file_path(name)``."""
    pieces = read_lengths(
        [StitchPiece(r.path, r.pause, r.chapter, None, _gain(r, delivery)) for r in rows], sample_rate
    )
    tone = _tone_level(rows, delivery)
    book = _stitch(pieces, book_path, delivery, sample_rate, pauses, info, info.tags, tone)
    files = _timings(rows, pieces, book, file_path, info)
    if delivery.split == "chapter":
        levels_of = {r.path: r.levels for r in rows}
        chapter_files = _split(pieces, levels_of, delivery, file_path, sample_rate, pauses, info, tone)
        files += chapter_files
        files.append(_bundle(chapter_files, file_path("chapters.zip")))
        if delivery.report:
            files.append(_report(chapter_files, file_path("acx-report.json"), delivery))
    return Deliverables(book, files)


def _gain(row: ChunkRow, delivery: Delivery) -> float:
    if delivery.mastering is None or row.levels is None:
        return 0.0
    return chunk_gain_db(row.levels, delivery.mastering)


def _tone_level(rows: Sequence[ChunkRow], delivery: Delivery) -> float | None:
    """The room tone's level: the chunks' own floor, as mastered (floor plus the chunk's gain)."""
    if not delivery.room_tone:
        return None
    return room_tone_level(
        r.levels.floor_db + _gain(r, delivery) if r.levels and r.levels.floor_db is not None else None
        for r in rows
    )


def _stitch(
    pieces: Sequence[StitchPiece],
    out: Path,
    delivery: Delivery,
    sample_rate: int,
    pauses: Pauses,
    info: BookInfo,
    tags: BookTags,
    tone: float | None,
) -> StitchResult:
    return stitch(
        pieces,
        out,
        delivery.format,
        sample_rate,
        pauses,
        delivery.bitrate_kbps,
        tags=tags,
        chapter_titles=info.titles,
        cover=info.cover,
        mastering=delivery.mastering,
        room_tone=None if tone is None else RoomTone(tone, sample_rate, info.seed),
        head_seconds=delivery.head_seconds,
        tail_seconds=delivery.tail_seconds,
        output_rate=delivery.sample_rate,
    )


def _timings(
    rows: Sequence[ChunkRow],
    pieces: Sequence[StitchPiece],
    book: StitchResult,
    file_path: Callable[[str], Path],
    info: BookInfo,
) -> list[Artefact]:
    """Subtitles and the manifest of the book: every chunk where it was stitched (exact, from the
    samples written), its sentences spread over it in proportion to their length (an estimate)."""
    rate = book.sample_rate
    chunks = []
    for row, piece, start_sample in zip(rows, pieces, book.starts, strict=True):
        start = start_sample / rate
        end = (start_sample + (piece.samples or 0)) / rate
        written = split_sentences(row.written or row.spoken, info.language) or [row.written or row.spoken]
        chunks.append(
            ChunkTiming(
                seq=row.seq,
                chapter=row.chapter,
                voice=row.voice,
                start=start,
                end=end,
                written=row.written,
                spoken=row.spoken,
                sentences=sentence_times(written, [len(s) for s in written], start, end),
            )
        )
    chapters = [ChapterTiming(m.index, m.title, m.start, m.end) for m in book.chapters]
    cues = subtitle_cues(chunks)
    out = [
        _text_file(file_path("book.srt"), to_srt(cues), "subtitles", "srt"),
        _text_file(file_path("book.vtt"), to_webvtt(cues), "subtitles", "vtt"),
        _text_file(
            file_path("manifest.json"),
            json.dumps(manifest(chapters, chunks), ensure_ascii=False, indent=1),
            "manifest",
            "json",
        ),
    ]
    return out


def _text_file(path: Path, text: str, kind: str, fmt: str) -> Artefact:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
    return Artefact(path.name, kind, fmt, str(path), len(data))


def _split(
    pieces: Sequence[StitchPiece],
    levels_of: Mapping[str, Levels | None],
    delivery: Delivery,
    file_path: Callable[[str], Path],
    sample_rate: int,
    pauses: Pauses,
    info: BookInfo,
    tone: float | None,
) -> list[Artefact]:
    """One file per chapter, or per part of a chapter longer than ``max_part_seconds``."""
    # every file also gets its head and a tail of up to tail_seconds: the parts leave room for both
    room = delivery.head_seconds + delivery.tail_seconds
    parts = chapter_parts(pieces, pauses, sample_rate, max(1.0, delivery.max_part_seconds - room))
    ext = FORMATS[delivery.format].extension
    out: list[Artefact] = []
    for track, (position, part, count, chunk) in enumerate(parts, start=1):
        index = chunk[0].chapter
        title = info.titles.get(index) or f"Chapter {position}"
        if count > 1:
            title = f"{title} (part {part} of {count})"
        name = f"chapter-{position:03d}{f'-part-{part}' if count > 1 else ''}{ext}"
        tags = replace(
            info.tags, title=title[:200], album=info.tags.title, track=track, track_total=len(parts)
        )
        path = file_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        fitted = (
            chunk
            if delivery.rms_target_db is None
            else _fit_rms(chunk, levels_of, delivery, pauses, sample_rate, tone)
        )
        result = _stitch(fitted, path, delivery, sample_rate, pauses, info, tags, tone)
        out.append(
            Artefact(
                name,
                "chapter",
                delivery.format,
                str(path),
                result.bytes,
                chapter=index,
                part=part if count > 1 else None,
                title=title,
                duration=result.duration,
            )
        )
    log.info("%d chapter files", len(out))
    return out


def _fit_rms(
    pieces: Sequence[StitchPiece],
    levels_of: Mapping[str, Levels | None],
    delivery: Delivery,
    pauses: Pauses,
    sample_rate: int,
    tone: float | None,
) -> list[StitchPiece]:
    """``pieces`` with one more gain each, the same for all, so that the file they make has the RMS the
    delivery asks for (pauses, head and tail included), predicted from the levels stored at render
    time (worker.audio.master.predicted_rms_db); at most MAX_RMS_FIT_DB either way."""
    assert delivery.rms_target_db is not None
    measured = [(levels_of.get(p.path), p.gain_db) for p in pieces]
    known = [(lv, gain) for lv, gain in measured if lv is not None]
    silence = sum(pauses.samples(p.pause_after, sample_rate) for p in pieces[:-1])
    silence += max(
        pauses.samples(pieces[-1].pause_after, sample_rate), round(delivery.tail_seconds * sample_rate)
    )
    silence += round(delivery.head_seconds * sample_rate)
    floor = 0.0 if tone is None else 10.0 ** (tone / 20.0)
    predicted = predicted_rms_db(known, silence, floor) if known else None
    if predicted is None:
        return list(pieces)
    offset = max(-MAX_RMS_FIT_DB, min(MAX_RMS_FIT_DB, delivery.rms_target_db - predicted))
    return [replace(p, gain_db=p.gain_db + offset) for p in pieces]


def chapter_parts(
    pieces: Sequence[StitchPiece], pauses: Pauses, sample_rate: int, max_seconds: float
) -> list[tuple[int, int, int, list[StitchPiece]]]:
    """``pieces`` cut into files: by chapter, and inside a chapter into parts of at most ``max_seconds``
    (cut between chunks, so at a pause; a single chunk longer than that is a part of its own). Each as
    (chapter position from 1, part from 1, parts in that chapter, pieces)."""
    limit = max_seconds * sample_rate
    chapters: list[list[StitchPiece]] = []
    for piece in pieces:
        if not chapters or chapters[-1][-1].chapter != piece.chapter:
            chapters.append([])
        chapters[-1].append(piece)
    out: list[tuple[int, int, int, list[StitchPiece]]] = []
    for position, chapter in enumerate(chapters, start=1):
        parts: list[list[StitchPiece]] = [[]]
        length = 0
        for piece in chapter:
            size = (piece.samples or 0) + pauses.samples(piece.pause_after, sample_rate)
            if parts[-1] and length + size > limit:
                parts.append([])
                length = 0
            parts[-1].append(piece)
            length += size
        out += [(position, n, len(parts), part) for n, part in enumerate(parts, start=1)]
    return out


def _bundle(files: Sequence[Artefact], path: Path) -> Artefact:
    """A ZIP of the chapter files, stored (audio does not compress), copied a block at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with (
        atomic_file(path) as tmp,
        zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive,
    ):
        for f in files:
            archive.write(f.path, arcname=f.name)
    return Artefact(path.name, "bundle", "zip", str(path), os.path.getsize(path))


def _report(files: Sequence[Artefact], path: Path, delivery: Delivery) -> Artefact:
    """The ACX report of the chapter files, each measured on the file itself, decoded back."""
    report = AcxReport(
        files=[check_file(f.path, expected_bitrate_kbps=delivery.bitrate_kbps, name=f.name) for f in files]
    )
    artefact = _text_file(path, json.dumps(report.to_json(), indent=1), "report", "json")
    log.info("ACX report: %s", "passed" if report.passed else "failed")
    return artefact

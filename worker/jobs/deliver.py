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

import contextlib
import json
import logging
import os
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from worker.audio import BookTags, Cover, Pauses, StitchPiece, StitchResult, stitch
from worker.audio.acx import check_file
from worker.audio.chapters import chapter_title
from worker.audio.ffmetadata import embedded_chapters
from worker.audio.formats import FORMATS
from worker.audio.join import JoinChapter, join, joinable, joined_seconds, lead_seconds
from worker.audio.loudness import Levels
from worker.audio.master import chunk_gain_db, predicted_rms_db
from worker.audio.presets import MAX_RMS_FIT_DB, Delivery
from worker.audio.roomtone import RoomTone, room_tone_level
from worker.audio.stitch import ON_DISK, ChunkFiles, read_lengths
from worker.audio.timings import (
    ChapterTiming,
    ChunkTiming,
    manifest,
    subtitle_cues,
    timed_sentences,
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
    words: Sequence[Sequence[float]] = ()  # [start s, end s, text start, text end] in the chunk, if reported
    speaker: str | None = None  # a job with a cast: the character, or "narrator"


@dataclass(frozen=True)
class Artefact:
    """One file of a finished job beside the book, as ``GET /v1/jobs/{id}/files`` lists it."""

    name: str
    kind: str  # chapter | bundle | subtitles | manifest | report | readalong
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
    files: ChunkFiles = ON_DISK  # where the chunk and chapter files are read from (worker.jobs.files)


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
    """Write the book to ``book_path`` in one pass over the chunks, and every other file under
    ``file_path(name)`` (for jobs whose chapters were not built one by one, and Ogg books)."""
    pieces = _pieces(rows, delivery, sample_rate, info.files)
    tone = _tone_level(rows, delivery)
    book = _stitch(pieces, book_path, delivery, sample_rate, pauses, info, info.tags, tone)
    chapters = [ChapterTiming(m.index, m.title, m.start, m.end) for m in book.chapters]
    files = _timings(rows, _spans(pieces, book.starts, book.sample_rate), chapters, file_path, info)
    if delivery.split == "chapter":
        groups = _by_chapter(rows)
        builds = [
            build_chapter(
                group,
                delivery,
                file_path,
                position=n,
                chapters_total=len(groups),
                sample_rate=sample_rate,
                pauses=pauses,
                info=info,
            )
            for n, group in enumerate(groups, start=1)
        ]
        files += _chapter_files(builds, file_path, delivery, info.files)
    return Deliverables(book, files)


def build_from_chapters(
    builds: Sequence[ChapterBuild],
    rows: Sequence[ChunkRow],
    delivery: Delivery,
    book_path: Path,
    file_path: Callable[[str], Path],
    *,
    sample_rate: int,
    pauses: Pauses,
    info: BookInfo,
) -> Deliverables:
    """The book joined from the chapters' files without encoding again (worker.audio.join; for a format
    that cannot be joined, encoded from the chunks as :func:`build` does), its subtitles and manifest
    timed from where each chunk lies inside its chapter's file, and the chapter files, ZIP and report
    when the delivery splits. ``builds`` in book order, every chapter of ``rows`` once."""
    if not joinable(delivery.format):
        book_only = replace(delivery, split="none")
        done = build(rows, book_only, book_path, file_path, sample_rate=sample_rate, pauses=pauses, info=info)
        extra = _chapter_files(builds, file_path, delivery, info.files) if delivery.split == "chapter" else []
        return Deliverables(done.book, done.files + extra)
    rate = delivery.sample_rate or sample_rate
    paths: list[str] = []
    contents: list[float] = []
    lengths: list[float] | None = []
    chapters: list[JoinChapter] = []
    where: dict[int, tuple[int, float, float]] = {}
    for b in builds:
        chapters.append(JoinChapter(b.chapter, b.title, len(paths)))
        for seq, index, start, end in b.placements:
            where[int(seq)] = (len(paths) + int(index), start, end)
        paths += [f.path for f in b.files]
        contents += b.contents
        lengths = None if lengths is None or b.lengths is None else lengths + b.lengths
    with contextlib.ExitStack() as held:  # ffmpeg's concat reads every chapter file: local copies
        local = [held.enter_context(info.files.local(p)) for p in paths]
        joined = join(
            local,
            contents,
            book_path,
            delivery.format,
            rate,
            tags=info.tags,
            chapters=chapters,
            cover=info.cover,
            lengths=lengths,
        )
    lead = lead_seconds(delivery.format, rate)
    spans = []
    for row in rows:
        index, start, end = where[row.seq]
        spans.append((joined.offsets[index] + lead + start, joined.offsets[index] + lead + end))
    book = StitchResult(
        duration=joined.duration,
        bytes=joined.bytes,
        chapters=joined.chapters,
        embedded_chapters=len(embedded_chapters(delivery.format, joined.chapters)),
        starts=[round(start * sample_rate) for start, _ in spans],
        sample_rate=sample_rate,
    )
    timed = [ChapterTiming(m.index, m.title, m.start, m.end) for m in joined.chapters]
    files = _timings(rows, spans, timed, file_path, info)
    if delivery.split == "chapter":
        files += _chapter_files(builds, file_path, delivery, info.files)
    return Deliverables(book, files)


@dataclass(frozen=True)
class ChapterBuild:
    """A chapter stitched on its own as soon as its chunks were done: its files in order (one, or with
    ``split = "chapter"`` a part per ``max_part_seconds``), the seconds of PCM written into each, where
    each of its chunks lies inside them ([seq, file, start s, end s]) and, with the ACX preset, each
    file's report (measured on the file decoded back)."""

    chapter: int
    position: int
    title: str
    files: list[Artefact]
    contents: list[float]
    placements: list[tuple[int, int, float, float]]
    reports: list[dict[str, Any]]
    lengths: list[float] | None = None  # each file's worker.audio.join.joined_seconds, if joinable

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    @property
    def duration(self) -> float:
        return sum(f.duration or 0.0 for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "chapter": self.chapter,
            "position": self.position,
            "title": self.title,
            "files": [f.to_json() for f in self.files],
            "contents": self.contents,
            "placements": [list(p) for p in self.placements],
            "reports": self.reports,
            "lengths": self.lengths,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChapterBuild:
        return cls(
            chapter=int(data["chapter"]),
            position=int(data["position"]),
            title=str(data["title"]),
            files=[Artefact(**f) for f in data["files"]],
            contents=[float(c) for c in data["contents"]],
            placements=[(int(a), int(b), float(c), float(d)) for a, b, c, d in data["placements"]],
            reports=list(data.get("reports", [])),
            lengths=None if data.get("lengths") is None else [float(x) for x in data["lengths"]],
        )


def build_chapter(
    rows: Sequence[ChunkRow],
    delivery: Delivery,
    file_path: Callable[[str], Path],
    *,
    position: int,
    chapters_total: int,
    sample_rate: int,
    pauses: Pauses,
    info: BookInfo,
) -> ChapterBuild:
    """Stitch and master one chapter (``rows``: its chunks in order) into its file(s), named
    ``chapter-NNN`` (its position) and tagged with its title, the book as album and its position as
    track. Split deliveries get the preset's head and tail in every file and parts under
    ``max_part_seconds``; otherwise the file is the chapter's stretch of the book (the head in the
    first chapter, the tail in the last), ready to be joined."""
    pieces = _pieces(rows, delivery, sample_rate, info.files)
    tone = _tone_level(rows, delivery)
    title = chapter_title(info.titles.get(rows[0].chapter), position)
    split = delivery.split == "chapter"
    if split:
        # every file gets its head and a tail of up to tail_seconds: the parts leave room for both
        room = delivery.head_seconds + delivery.tail_seconds
        parts = chapter_parts(pieces, pauses, sample_rate, max(1.0, delivery.max_part_seconds - room))
        head, tail = delivery.head_seconds, delivery.tail_seconds
    else:
        parts = [(position, 1, 1, list(pieces))]
        head = delivery.head_seconds if position == 1 else 0.0
        tail = delivery.tail_seconds if position == chapters_total else 0.0
    ext = FORMATS[delivery.format].extension
    levels_of = {r.path: r.levels for r in rows}
    seqs = iter(r.seq for r in rows)
    files, contents, placements, reports, lengths = [], [], [], [], []
    rate = delivery.sample_rate or sample_rate
    for index, (_, part, count, chunk) in enumerate(parts):
        named = f"{title} (part {part} of {count})" if count > 1 else title
        name = f"chapter-{position:03d}{f'-part-{part}' if count > 1 else ''}{ext}"
        tags = replace(
            info.tags, title=named[:200], album=info.tags.title, track=position, track_total=chapters_total
        )
        path = file_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        fitted = (
            _fit_rms(chunk, levels_of, delivery, pauses, sample_rate, tone)
            if split and delivery.rms_target_db is not None
            else chunk
        )
        result = _stitch(fitted, path, delivery, sample_rate, pauses, info, tags, tone, head, tail)
        for piece, (start, end) in zip(fitted, _spans(fitted, result.starts, sample_rate), strict=True):
            del piece
            placements.append((next(seqs), index, start, end))
        file = Artefact(
            name,
            "chapter",
            delivery.format,
            str(path),
            result.bytes,
            chapter=rows[0].chapter,
            part=part if count > 1 else None,
            title=named,
            duration=result.duration,
        )
        files.append(file)
        contents.append(result.duration)
        if joinable(delivery.format):  # measured now, while later chapters render, not at the join
            lengths.append(joined_seconds(path, delivery.format, rate))
        if split and delivery.report:
            reports.append(check_file(path, expected_bitrate_kbps=delivery.bitrate_kbps, name=name).to_json())
    return ChapterBuild(
        rows[0].chapter, position, title, files, contents, placements, reports, lengths or None
    )


def _by_chapter(rows: Sequence[ChunkRow]) -> list[list[ChunkRow]]:
    """``rows`` (in order) grouped by chapter."""
    groups: list[list[ChunkRow]] = []
    for row in rows:
        if not groups or groups[-1][-1].chapter != row.chapter:
            groups.append([])
        groups[-1].append(row)
    return groups


def _chapter_files(
    builds: Sequence[ChapterBuild],
    file_path: Callable[[str], Path],
    delivery: Delivery,
    stored: ChunkFiles = ON_DISK,
) -> list[Artefact]:
    """The chapter files of a split delivery, their ZIP and (ACX) the report on them."""
    files = [f for b in builds for f in b.files]
    out = [*files, _bundle(files, file_path("chapters.zip"), stored)]
    if delivery.report:
        entries = [r for b in builds for r in b.reports]
        report = {"passed": all(bool(r.get("passed")) for r in entries), "files": entries}
        out.append(_text_file(file_path("acx-report.json"), json.dumps(report, indent=1), "report", "json"))
        log.info("ACX report: %s", "passed" if report["passed"] else "failed")
    return out


def _pieces(
    rows: Sequence[ChunkRow], delivery: Delivery, sample_rate: int, files: ChunkFiles = ON_DISK
) -> list[StitchPiece]:
    """The rows as stitch pieces with their mastering gains and lengths (read from the WAV headers)."""
    return read_lengths(
        [StitchPiece(r.path, r.pause, r.chapter, None, _gain(r, delivery)) for r in rows], sample_rate, files
    )


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
    head: float | None = None,
    tail: float | None = None,
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
        head_seconds=delivery.head_seconds if head is None else head,
        tail_seconds=delivery.tail_seconds if tail is None else tail,
        output_rate=delivery.sample_rate,
        files=info.files,
    )


def _timings(
    rows: Sequence[ChunkRow],
    spans: Sequence[tuple[float, float]],
    chapters: Sequence[ChapterTiming],
    file_path: Callable[[str], Path],
    info: BookInfo,
) -> list[Artefact]:
    """Subtitles and the manifest of the book: every chunk where it was stitched (``spans``: start and
    end in seconds, exact, from the samples written), its sentences spread over it in proportion to
    their length (an estimate)."""
    chunks = []
    for row, (start, end) in zip(rows, spans, strict=True):
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
                sentences=timed_sentences(written, row.spoken, row.words, start, end, info.language),
                speaker=row.speaker,
            )
        )
    cues = subtitle_cues(chunks)
    return [
        _text_file(file_path("book.srt"), to_srt(cues), "subtitles", "srt"),
        _text_file(file_path("book.vtt"), to_webvtt(cues), "subtitles", "vtt"),
        _text_file(
            file_path("manifest.json"),
            json.dumps(manifest(chapters, chunks), ensure_ascii=False, indent=1),
            "manifest",
            "json",
        ),
    ]


def _spans(pieces: Sequence[StitchPiece], starts: Sequence[int], rate: int) -> list[tuple[float, float]]:
    """Each piece's start and end in seconds, from where it was written (samples at ``rate``)."""
    return [(s / rate, (s + (p.samples or 0)) / rate) for p, s in zip(pieces, starts, strict=True)]


def _text_file(path: Path, text: str, kind: str, fmt: str) -> Artefact:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
    return Artefact(path.name, kind, fmt, str(path), len(data))


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


def _bundle(files: Sequence[Artefact], path: Path, stored: ChunkFiles = ON_DISK) -> Artefact:
    """A ZIP of the chapter files, stored (audio does not compress), copied a block at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with (
        atomic_file(path) as tmp,
        zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive,
    ):
        for f in files:
            with stored.local(f.path) as local:  # a chapter file another worker may have stored
                archive.write(local, arcname=f.name)
    return Artefact(path.name, "bundle", "zip", str(path), os.path.getsize(path))

"""Concatenating chunk WAVs, with pauses, into one encoded output, streaming with bounded memory."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import numpy.typing as npt
import soundfile as sf

from worker.audio.chapters import (
    DEFAULT_PAUSES,
    PAUSE_KINDS,
    ChapterMark,
    ChapterPlan,
    Pauses,
    PieceLength,
    plan_chapters,
)
from worker.audio.cover import Cover
from worker.audio.errors import StitchError
from worker.audio.ffmetadata import embedded_chapters
from worker.audio.ffmpeg import FfmpegEncoder
from worker.audio.formats import OutputFormat, check_format
from worker.audio.master import Mastering, apply
from worker.audio.roomtone import RoomTone
from worker.audio.tags import BookTags
from worker.audio.wavcues import add_cues
from worker.storage.atomic import atomic_file

__all__ = ["PAUSE_KINDS", "ChapterMark", "Pauses", "StitchPiece", "StitchResult", "read_lengths", "stitch"]

_READ_FRAMES = 1 << 16


class ChunkFiles(Protocol):
    """How the stitch reaches the chunk files it is given: on this disk (:data:`ON_DISK`), or through a
    storage backend that measures a chunk with a ranged read and downloads it only while it is sent."""

    def header(self, path: str) -> tuple[int, int]:
        """(frames, sample rate) of the chunk file at ``path``."""

    def local(self, path: str) -> AbstractContextManager[str]:
        """A local path holding the chunk while the block runs."""


class _OnDisk:
    def header(self, path: str) -> tuple[int, int]:
        return _header(path)

    @contextlib.contextmanager
    def _local(self, path: str) -> Iterator[str]:
        yield path

    def local(self, path: str) -> AbstractContextManager[str]:
        return self._local(path)


ON_DISK: ChunkFiles = _OnDisk()


@dataclass(frozen=True)
class StitchPiece:
    """One chunk of the output: its WAV (from ``write_wav_atomic``), the pause after it, its chapter,
    and optionally its length in samples (if the caller knows it; otherwise ``stitch`` reads it from the
    WAV header before encoding)."""

    path: str
    pause_after: str | float  # a kind of pause (see Pauses), or exact seconds (a script's break)
    chapter: int
    samples: int | None = None
    gain_db: float = 0.0  # mastering: this chunk's gain (see worker.audio.master.chunk_gain_db)


@dataclass(frozen=True)
class StitchResult:
    """What ``stitch`` produced: seconds of PCM encoded, file size, every chapter in order (with its
    start and end in samples and seconds, and its title), and how many of those marks the file carries
    (all of them, or the format's limit: see :data:`~worker.audio.formats.FORMATS`)."""

    duration: float
    bytes: int
    chapters: list[ChapterMark]
    embedded_chapters: int
    starts: list[int]  # where each piece starts in the output, in samples at the chunks' rate
    sample_rate: int


def read_lengths(
    pieces: Iterable[StitchPiece], sample_rate: int, files: ChunkFiles = ON_DISK
) -> list[StitchPiece]:
    """``pieces`` with every unknown length read from its WAV header (no audio is read).

    Raises :class:`StitchError` if a chunk is missing or unreadable and ``ValueError`` if one is not at
    ``sample_rate``.
    """
    out = []
    for piece in pieces:
        if piece.samples is not None:
            out.append(piece)
            continue
        frames, rate = files.header(piece.path)
        if rate != sample_rate:
            raise ValueError(f"chunk {piece.path} is at {rate} Hz, the output at {sample_rate} Hz")
        out.append(StitchPiece(piece.path, piece.pause_after, piece.chapter, frames, piece.gain_db))
    return out


def stitch(
    pieces: Iterable[StitchPiece],
    out_path: str | os.PathLike[str],
    fmt: OutputFormat,
    sample_rate: int,
    pauses: Pauses = DEFAULT_PAUSES,
    bitrate_kbps: int = 128,
    *,
    tags: BookTags | None = None,
    chapter_titles: Mapping[int, str | None] | None = None,
    cover: Cover | None = None,
    mastering: Mastering | None = None,
    room_tone: RoomTone | None = None,
    head_seconds: float = 0.0,
    tail_seconds: float = 0.0,
    output_rate: int | None = None,
    files: ChunkFiles = ON_DISK,
) -> StitchResult:
    """Encode ``pieces`` in order, each followed by its pause, into ``out_path``, with chapters and tags.

    The chapter marks are planned first (:func:`~worker.audio.chapters.plan_chapters`; lengths not
    given are read from the WAV headers) and written as far as ``fmt`` carries them, with
    ``chapter_titles``, ``tags`` and ``cover`` (every format but WAV). Chunks are streamed from ``files``
    to ffmpeg block by block, so memory does not grow with the output. ``mastering`` applies each
    piece's ``gain_db`` and the true-peak limiter; ``room_tone`` fills pauses and runs on under the
    chunks; ``head_seconds`` open the file, the last pause is at least ``tail_seconds``;
    ``output_rate`` resamples.

    Every chunk must be at ``sample_rate`` (channels are averaged to mono). The output goes to a temp
    file beside ``out_path``, fsynced and renamed onto it; on failure the temp files are removed.
    Raises :class:`StitchError` for a missing or unreadable chunk, one whose length differs from the
    plan, or an ffmpeg failure; ``ValueError`` for a chunk at another rate, an unknown pause kind, empty
    ``pieces``, non-contiguous chapters or other invalid arguments.
    """
    fmt = check_format(fmt)
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    if not 8 <= bitrate_kbps <= 320:
        raise ValueError(f"bitrate_kbps must be between 8 and 320, got {bitrate_kbps}")
    timeline = _with_tail(read_lengths(pieces, sample_rate, files), pauses, tail_seconds)
    head = round(max(0.0, head_seconds) * sample_rate)
    plan = _shifted(
        plan_chapters(
            (PieceLength(_known(p.samples), p.pause_after, p.chapter) for p in timeline),
            sample_rate,
            pauses,
            chapter_titles,
        ),
        head,
    )
    total = head
    starts: list[int] = []
    cued = True
    with (
        atomic_file(out_path) as tmp,
        FfmpegEncoder(
            tmp,
            fmt,
            sample_rate,
            bitrate_kbps,
            tags=tags,
            chapters=plan.chapters,
            cover=cover,
            output_rate=output_rate,
        ) as encoder,
    ):
        _write_pause(encoder, head, room_tone)
        for piece in timeline:
            starts.append(total)
            with files.local(piece.path) as local:
                sent = _send_chunk(encoder, replace(piece, path=local), sample_rate, mastering, room_tone)
            if sent != piece.samples:
                raise StitchError(f"chunk {piece.path} has {sent} samples; {piece.samples} were planned")
            pause = pauses.samples(piece.pause_after, sample_rate)
            _write_pause(encoder, pause, room_tone)
            total += sent + pause
        if fmt == "wav":  # ffmpeg's WAV muxer writes no chapters: cue points, before the file is published
            encoder.close()
            cued = add_cues(tmp, _wav_cues(plan, output_rate))
    assert total == plan.total_samples
    return StitchResult(
        duration=plan.duration,
        bytes=os.path.getsize(out_path),
        chapters=list(plan.chapters),
        embedded_chapters=len(embedded_chapters(fmt, plan.chapters)) if cued else 0,
        starts=starts,
        sample_rate=sample_rate,
    )


def _with_tail(timeline: list[StitchPiece], pauses: Pauses, tail_seconds: float) -> list[StitchPiece]:
    """``timeline`` with the pause after its last piece lengthened to ``tail_seconds`` if shorter."""
    if not timeline or tail_seconds <= 0:
        return timeline
    last = timeline[-1]
    if pauses.seconds(last.pause_after) >= tail_seconds:
        return timeline
    return [*timeline[:-1], replace(last, pause_after=float(tail_seconds))]


def _shifted(plan: ChapterPlan, head: int) -> ChapterPlan:
    """``plan`` with ``head`` samples of lead-in at the start: the first chapter takes them (it still
    starts at 0), every later mark moves by as much."""
    if head == 0:
        return plan
    rate = plan.sample_rate
    marks = []
    for n, mark in enumerate(plan.chapters):
        start = 0 if n == 0 else mark.start_sample + head
        end = mark.end_sample + head
        marks.append(replace(mark, start_sample=start, end_sample=end, start=start / rate, end=end / rate))
    return ChapterPlan(tuple(marks), plan.total_samples + head, rate)


def _wav_cues(plan: ChapterPlan, output_rate: int | None) -> list[tuple[int, str]]:
    """The chapter starts and titles of ``plan`` as WAV cue points, in sample frames at the file's rate
    (rescaled to ``output_rate`` and rounded to the nearest, as ffmpeg's resampler places them)."""
    rate, own = output_rate or plan.sample_rate, plan.sample_rate
    return [((2 * mark.start_sample * rate + own) // (2 * own), mark.title) for mark in plan.chapters]


def _write_pause(encoder: FfmpegEncoder, count: int, room_tone: RoomTone | None) -> None:
    """``count`` samples of pause: digital silence, or room tone taken a block at a time."""
    if room_tone is None:
        encoder.write_silence(count)
        return
    remaining = count
    while remaining > 0:
        n = min(remaining, _READ_FRAMES)
        encoder.write(room_tone.take(n))
        remaining -= n


def _known(samples: int | None) -> int:
    assert samples is not None
    return samples


def _header(path: str) -> tuple[int, int]:
    """(frames, sample rate) of a chunk file, from its header."""
    try:
        with open(path, "rb") as raw, sf.SoundFile(raw.fileno(), closefd=False) as f:
            return int(f.frames), int(f.samplerate)
    except FileNotFoundError as exc:
        raise StitchError(f"chunk file {path} is missing") from exc
    except (sf.SoundFileError, OSError, RuntimeError) as exc:
        raise StitchError(f"chunk file {path} could not be read: {exc}") from exc


def _send_chunk(
    encoder: FfmpegEncoder,
    piece: StitchPiece,
    sample_rate: int,
    mastering: Mastering | None,
    room_tone: RoomTone | None,
) -> int:
    """Pipe one chunk file to the encoder; returns its number of samples. Plain, block by block;
    mastered or over room tone, the whole chunk at once (the limiter looks ahead; a chunk is a sentence
    or a few). Room tone runs on under the chunk, so the gaps inside it are no digital silence either."""
    if mastering is not None or room_tone is not None:
        samples = _read_chunk(piece.path, sample_rate)
        out = samples if mastering is None else apply(samples, sample_rate, piece.gain_db, mastering)
        if room_tone is not None:
            out = np.clip(out + room_tone.take(out.shape[0]), -1.0, 1.0).astype(np.float32)
        encoder.write(out)
        return int(samples.shape[0])
    path = piece.path
    sent = 0
    try:
        with open(path, "rb") as raw, sf.SoundFile(raw.fileno(), closefd=False) as f:
            if f.samplerate != sample_rate:
                raise ValueError(f"chunk {path} is at {f.samplerate} Hz, the output at {sample_rate} Hz")
            while True:
                block = f.read(frames=_READ_FRAMES, dtype="int16", always_2d=True)
                if block.shape[0] == 0:
                    break
                mono = block[:, 0] if block.shape[1] == 1 else np.rint(block.mean(axis=1)).astype(np.int16)
                encoder.write(mono)
                sent += block.shape[0]
    except FileNotFoundError as exc:
        raise StitchError(f"chunk file {path} is missing") from exc
    except (sf.SoundFileError, OSError) as exc:
        raise StitchError(f"chunk file {path} could not be read: {exc}") from exc
    return sent


def _read_chunk(path: str, sample_rate: int) -> npt.NDArray[np.float32]:
    """One chunk file as mono float32 (chunks are a sentence or a few: seconds, not hours)."""
    try:
        with open(path, "rb") as raw, sf.SoundFile(raw.fileno(), closefd=False) as f:
            if f.samplerate != sample_rate:
                raise ValueError(f"chunk {path} is at {f.samplerate} Hz, the output at {sample_rate} Hz")
            data = f.read(dtype="float32", always_2d=True)
    except FileNotFoundError as exc:
        raise StitchError(f"chunk file {path} is missing") from exc
    except (sf.SoundFileError, OSError) as exc:
        raise StitchError(f"chunk file {path} could not be read: {exc}") from exc
    mono = data[:, 0] if data.shape[1] == 1 else data.mean(axis=1)
    return np.ascontiguousarray(mono, dtype=np.float32)

"""Concatenating chunk WAVs, with pauses, into one encoded output, streaming with bounded memory."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
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
from worker.audio.tags import BookTags
from worker.storage.atomic import atomic_file

__all__ = ["PAUSE_KINDS", "ChapterMark", "Pauses", "StitchPiece", "StitchResult", "read_lengths", "stitch"]

_READ_FRAMES = 1 << 16


@dataclass(frozen=True)
class StitchPiece:
    """One chunk of the output: its WAV (from ``write_wav_atomic``), the pause after it, its chapter,
    and optionally its length in samples (if the caller knows it; otherwise ``stitch`` reads it from the
    WAV header before encoding)."""

    path: str
    pause_after: str | float  # a kind of pause (see Pauses), or exact seconds (a script's break)
    chapter: int
    samples: int | None = None


@dataclass(frozen=True)
class StitchResult:
    """What ``stitch`` produced: seconds of PCM encoded, file size, every chapter in order (with its
    start and end in samples and seconds, and its title), and how many of those marks the file carries
    (all of them, or the format's limit: see :data:`~worker.audio.formats.FORMATS`)."""

    duration: float
    bytes: int
    chapters: list[ChapterMark]
    embedded_chapters: int


def read_lengths(pieces: Iterable[StitchPiece], sample_rate: int) -> list[StitchPiece]:
    """``pieces`` with every unknown length read from its WAV header (no audio is read).

    Raises :class:`StitchError` if a chunk is missing or unreadable and ``ValueError`` if one is not at
    ``sample_rate``.
    """
    out = []
    for piece in pieces:
        if piece.samples is not None:
            out.append(piece)
            continue
        frames, rate = _header(piece.path)
        if rate != sample_rate:
            raise ValueError(f"chunk {piece.path} is at {rate} Hz, the output at {sample_rate} Hz")
        out.append(StitchPiece(piece.path, piece.pause_after, piece.chapter, frames))
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
) -> StitchResult:
    """Encode ``pieces`` in order, each followed by its pause, into ``out_path``, with chapters and tags.

    The chapter marks are planned first (:func:`~worker.audio.chapters.plan_chapters`, from the pieces'
    lengths: those not given are read from the WAV headers), written into the file as far as ``fmt``
    carries them, with ``chapter_titles`` (chapter index -> title) and ``tags``; ``cover`` (from
    :func:`~worker.audio.cover.load_cover`) is embedded in every format but WAV. Then the chunks are read
    one block at a time and piped to ffmpeg, so memory does not grow with the length of the output (only
    the list of pieces is held, not their audio); a chunk whose length differs from the plan is a
    :class:`StitchError` (the marks would be wrong).

    Every chunk must be at ``sample_rate`` (``ValueError`` otherwise; multi-channel chunks are averaged
    to mono). The pause after the last piece is encoded too. The output is written to a temp file next
    to ``out_path``, fsynced and renamed onto it; on any failure the temp files are removed. Raises
    :class:`StitchError` if a chunk is missing or unreadable or ffmpeg fails, ``ValueError`` for invalid
    arguments, an unknown pause kind, an empty ``pieces`` or a chapter whose pieces are not contiguous.
    """
    fmt = check_format(fmt)
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    if not 8 <= bitrate_kbps <= 320:
        raise ValueError(f"bitrate_kbps must be between 8 and 320, got {bitrate_kbps}")
    timeline = read_lengths(pieces, sample_rate)
    plan: ChapterPlan = plan_chapters(
        (PieceLength(_known(p.samples), p.pause_after, p.chapter) for p in timeline),
        sample_rate,
        pauses,
        chapter_titles,
    )
    total = 0
    with (
        atomic_file(out_path) as tmp,
        FfmpegEncoder(
            tmp, fmt, sample_rate, bitrate_kbps, tags=tags, chapters=plan.chapters, cover=cover
        ) as encoder,
    ):
        for piece in timeline:
            sent = _send_chunk(encoder, piece.path, sample_rate)
            if sent != piece.samples:
                raise StitchError(f"chunk {piece.path} has {sent} samples; {piece.samples} were planned")
            pause = pauses.samples(piece.pause_after, sample_rate)
            encoder.write_silence(pause)
            total += sent + pause
    assert total == plan.total_samples
    return StitchResult(
        duration=plan.duration,
        bytes=os.path.getsize(out_path),
        chapters=list(plan.chapters),
        embedded_chapters=len(embedded_chapters(fmt, plan.chapters)),
    )


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


def _send_chunk(encoder: FfmpegEncoder, path: str, sample_rate: int) -> int:
    """Pipe one chunk file to the encoder block by block; returns its number of samples."""
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

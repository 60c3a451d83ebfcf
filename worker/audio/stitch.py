"""Concatenating chunk WAVs, with pauses, into one encoded output, streaming with bounded memory."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import soundfile as sf

from worker.audio.errors import StitchError
from worker.audio.ffmpeg import OUTPUT_FORMATS, FfmpegEncoder, OutputFormat
from worker.storage.atomic import atomic_file

PAUSE_KINDS = ("none", "sentence", "paragraph", "chapter")

_READ_FRAMES = 1 << 16


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

    def seconds(self, kind: str) -> float:
        """Length of the pause of ``kind``; ``"none"`` is 0. Unknown kinds raise ``ValueError``."""
        if kind == "none":
            return 0.0
        if kind in PAUSE_KINDS:
            return float(getattr(self, kind))
        raise ValueError(f"unknown pause kind {kind!r}; expected one of {', '.join(PAUSE_KINDS)}")


@dataclass(frozen=True)
class StitchPiece:
    """One chunk of the output: its WAV (from ``write_wav_atomic``), the pause after it, its chapter."""

    path: str
    pause_after: str
    chapter: int


@dataclass(frozen=True)
class ChapterMark:
    """Where a chapter starts in the output, in seconds."""

    index: int
    start: float


@dataclass(frozen=True)
class StitchResult:
    """What ``stitch`` produced: seconds of PCM encoded, file size, chapter starts in order."""

    duration: float
    bytes: int
    chapters: list[ChapterMark]


def stitch(
    pieces: Iterable[StitchPiece],
    out_path: str | os.PathLike[str],
    fmt: OutputFormat,
    sample_rate: int,
    pauses: Pauses = Pauses(),
    bitrate_kbps: int = 128,
) -> StitchResult:
    """Encode ``pieces`` in order, each followed by its pause, into ``out_path`` (wav, flac or mp3).

    Chunks are read one block at a time and piped to ffmpeg, so memory does not grow with the number of
    pieces or the length of the output. Every chunk must already be at ``sample_rate`` (``ValueError``
    otherwise; multi-channel chunks are averaged to mono). The pause after the last piece is encoded too.
    The output is written to a temp file next to ``out_path``, fsynced and renamed onto it; on any failure
    the temp file is removed. Raises :class:`StitchError` if a chunk is missing or unreadable or ffmpeg
    fails, ``ValueError`` for invalid arguments, an unknown pause kind, an empty ``pieces`` or a chapter
    whose pieces are not contiguous.
    """
    if fmt not in OUTPUT_FORMATS:
        raise ValueError(f"unknown output format {fmt!r}; expected one of {', '.join(OUTPUT_FORMATS)}")
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")

    total = 0
    chapters: list[ChapterMark] = []
    seen_chapters: set[int] = set()
    with atomic_file(out_path) as tmp, FfmpegEncoder(tmp, fmt, sample_rate, bitrate_kbps) as encoder:
        for piece in pieces:
            pause = round(pauses.seconds(piece.pause_after) * sample_rate)
            if not chapters or chapters[-1].index != piece.chapter:
                if piece.chapter in seen_chapters:
                    raise ValueError(f"the pieces of chapter {piece.chapter} are not contiguous")
                seen_chapters.add(piece.chapter)
                chapters.append(ChapterMark(index=piece.chapter, start=total / sample_rate))
            total += _send_chunk(encoder, piece.path, sample_rate)
            encoder.write_silence(pause)
            total += pause
        if not chapters:
            raise ValueError("nothing to stitch: no pieces")
    return StitchResult(duration=total / sample_rate, bytes=os.path.getsize(out_path), chapters=chapters)


def _send_chunk(encoder: FfmpegEncoder, path: str, sample_rate: int) -> int:
    """Pipe one chunk file to the encoder block by block; returns its number of samples."""
    sent = 0
    try:
        with open(path, "rb") as raw, sf.SoundFile(raw) as f:
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

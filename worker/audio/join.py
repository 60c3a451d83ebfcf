"""A book joined from encoded chapter files without encoding again (pure: ffmpeg stream copy).

Chapters are stitched and encoded as soon as their chunks are done (worker.jobs.chapters); the book is
then their files one after the other, packets copied: seconds of work for hours of audio, where an
encode of the whole book takes minutes. Where each chapter lands in the book is known exactly, because
every decoder plays the joined packets back to back: WAV and FLAC sample for sample; MP3 packets with
each file's encoder delay and padding; M4A/M4B as ADTS packets in one MP4, every chapter's samples
``AAC_PRIMING`` after the start of its packets. Ogg Opus cannot be joined this way (the muxer re-times
copied packets around each file's pre-skip, so chapters drift), so :func:`joinable` says no and the
book is encoded from the chunks.

See docs/api.md, "Chapters as soon as they are done" (where each chapter lands, format by format, and
the measurement that checks it).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from worker.audio import ffmetadata
from worker.audio.binary import ffmpeg_exe
from worker.audio.chapters import ChapterMark
from worker.audio.cover import Cover
from worker.audio.errors import StitchError
from worker.audio.ffmpeg import STDERR_TAIL_BYTES, mux_command, takes_cover_stream
from worker.audio.formats import OutputFormat
from worker.audio.tags import BookTags
from worker.audio.wavcues import add_cues
from worker.storage.atomic import atomic_file, discard, make_temp

AAC_PRIMING = 1024
"""Samples ffmpeg's AAC encoder puts before the audio (its ``initial_padding``)."""

_JOINABLE: frozenset[str] = frozenset({"wav", "flac", "mp3", "m4a", "m4b"})
_TIMEOUT = 600.0


def joinable(fmt: OutputFormat) -> bool:
    """Whether files of ``fmt`` can be joined into a book without encoding again."""
    return fmt in _JOINABLE


@dataclass(frozen=True)
class JoinChapter:
    """A chapter of the joined book: its index, title, and the first of the joined files it spans."""

    index: int
    title: str
    first_file: int


@dataclass(frozen=True)
class JoinResult:
    """``offsets[i]``: where the first sample written into file ``i`` plays in the book (seconds)."""

    offsets: list[float]
    duration: float
    bytes: int
    chapters: list[ChapterMark]


def lead_seconds(fmt: OutputFormat, sample_rate: int) -> float:
    """How long after a joined file's packets begin its first written sample plays."""
    return AAC_PRIMING / sample_rate if fmt in ("m4a", "m4b") else 0.0


def join(
    files: Sequence[str],
    contents: Sequence[float],
    out_path: str | os.PathLike[str],
    fmt: OutputFormat,
    sample_rate: int,
    *,
    tags: BookTags | None,
    chapters: Sequence[JoinChapter],
    cover: Cover | None,
    lengths: Sequence[float] | None = None,
) -> JoinResult:
    """Join ``files`` (each of ``fmt`` at ``sample_rate``, ``contents[i]`` seconds of PCM written into
    file ``i``) into ``out_path`` with ``tags``, ``chapters`` and ``cover``; atomic like every output.
    ``lengths`` are the files' :func:`joined_seconds` if the caller measured them when it wrote them
    (else they are measured here). Raises :class:`StitchError` if ffmpeg fails, ``ValueError`` for a
    format :func:`joinable` refuses."""
    if not joinable(fmt):
        raise ValueError(f"{fmt} files cannot be joined without encoding again")
    if not files or len(files) != len(contents) or (lengths is not None and len(lengths) != len(files)):
        raise ValueError("one content length (and joined length) per file, and at least one file")
    lead = lead_seconds(fmt, sample_rate)
    out = os.path.abspath(os.fspath(out_path))
    sidecars: list[str] = []
    try:
        audio_input = _audio_input(files, fmt, out, sidecars)
        played = (
            list(lengths) if lengths is not None else [joined_seconds(f, fmt, sample_rate) for f in files]
        )
        offsets = [sum(played[:n]) for n in range(len(played))]
        duration = offsets[-1] + lead + contents[-1]
        marks = _marks(chapters, offsets, duration, sample_rate)
        text = ffmetadata.render(fmt, sample_rate, tags, marks, cover)
        meta = _sidecar(out, text.encode("utf-8"), sidecars) if text is not None else None
        picture = cover if cover is not None and takes_cover_stream(fmt) else None
        picture_path = _sidecar(out, picture.data, sidecars) if picture is not None else None
        with atomic_file(out) as tmp:
            cmd = mux_command(tmp, fmt, audio_input, _copy_args(fmt), meta, picture, picture_path)
            _run(cmd)
            if fmt == "wav":
                add_cues(tmp, [(m.start_sample, m.title) for m in marks])
    finally:
        for path in sidecars:
            discard(path)
    return JoinResult(offsets, duration, os.path.getsize(out), marks)


def _marks(
    chapters: Sequence[JoinChapter], offsets: Sequence[float], duration: float, rate: int
) -> list[ChapterMark]:
    """The book's chapter marks: each starts where its first file's packets do (the first at 0)."""
    starts = [0 if n == 0 else round(offsets[c.first_file] * rate) for n, c in enumerate(chapters)]
    total = round(duration * rate)
    marks = []
    for n, chapter in enumerate(chapters):
        end = starts[n + 1] if n + 1 < len(starts) else total
        marks.append(ChapterMark(chapter.index, starts[n] / rate, end / rate, starts[n], end, chapter.title))
    return marks


def _sidecar(out: str, data: bytes, sidecars: list[str]) -> str:
    fd, path = make_temp(out)
    sidecars.append(path)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def _audio_input(files: Sequence[str], fmt: OutputFormat, out: str, sidecars: list[str]) -> list[str]:
    """ffmpeg's input for the joined packets: a concat list, or (AAC) one ADTS stream of them all."""
    if fmt not in ("m4a", "m4b"):
        listing = "ffconcat version 1.0\n" + "".join(f"file {_quoted(p)}\n" for p in files)
        return ["-f", "concat", "-safe", "0", "-i", _sidecar(out, listing.encode("utf-8"), sidecars)]
    fd, adts = make_temp(out)
    sidecars.append(adts)
    with os.fdopen(fd, "wb") as stream:
        for path in files:
            extract = ["-i", path, "-map", "0:a:0", "-c", "copy", "-f", "adts", "pipe:1"]
            _run([ffmpeg_exe(), "-hide_banner", "-loglevel", "error", *extract], stdout=stream)
    return ["-f", "aac", "-i", adts]


def _quoted(path: str) -> str:
    """A path as the concat demuxer reads it: single-quoted, a quote written as '\\''."""
    return "'" + os.path.abspath(path).replace("'", "'\\''") + "'"


def _copy_args(fmt: OutputFormat) -> list[str]:
    if fmt == "wav":
        return ["-c:a", "copy", "-rf64", "auto", "-f", "wav"]
    if fmt == "flac":
        return ["-c:a", "copy", "-f", "flac"]
    if fmt == "mp3":
        return ["-c:a", "copy", "-id3v2_version", "3", "-f", "mp3"]
    brand = ["-brand", "M4B "] if fmt == "m4b" else []
    return ["-c:a", "copy", "-movflags", "+faststart", *brand, "-f", "mp4"]


def joined_seconds(path: str | os.PathLike[str], fmt: OutputFormat, sample_rate: int) -> float:
    """How long the packets of ``path`` play in a joined book, encoder delay and padding included: their
    summed durations, or for AAC whole frames (MP4 shortens its last packet's duration to the audio's
    end, but the ADTS frames it is joined as play whole)."""
    seconds, count = _packets(path)
    return count * AAC_PRIMING / sample_rate if fmt in ("m4a", "m4b") else seconds


def packet_seconds(path: str | os.PathLike[str]) -> float:
    """The summed duration of the audio packets of ``path`` (read from the container, not decoded)."""
    return _packets(path)[0]


def _packets(path: str | os.PathLike[str]) -> tuple[float, int]:
    """The summed duration of the audio packets of ``path`` and how many there are."""
    cmd = [ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-i", os.fspath(path)]
    cmd += ["-map", "0:a:0", "-c", "copy", "-f", "framecrc", "pipe:1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stderr is not None
    base: tuple[int, int] | None = None
    ticks = count = 0
    for raw in proc.stdout:
        line = raw.decode("ascii", "replace")
        if line.startswith("#tb 0:"):
            num, den = line.split(":", 1)[1].strip().split("/")
            base = (int(num), int(den))
        elif line[:1].isdigit():
            ticks += int(line.split(",")[3])
            count += 1
    err = proc.stderr.read()[-STDERR_TAIL_BYTES:]
    if proc.wait() != 0 or base is None:
        raise StitchError(
            f"could not read the packets of {Path(path).name}: {err.decode('utf-8', 'replace')}"
        )
    return ticks * base[0] / base[1], count


def _run(cmd: list[str], stdout: int | IO[bytes] = subprocess.DEVNULL) -> None:
    try:
        proc = subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, timeout=_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise StitchError(f"ffmpeg did not finish joining within {_TIMEOUT:.0f} s") from exc
    if proc.returncode != 0:
        tail = proc.stderr[-STDERR_TAIL_BYTES:].decode("utf-8", "replace").strip()
        raise StitchError(f"ffmpeg failed joining the chapters: {tail}")

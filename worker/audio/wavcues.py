"""Chapter marks inside a WAV file: cue points with labels, appended in place (pure, stdlib only).

ffmpeg's WAV muxer writes no chapters, but RIFF/WAVE has a standard place for them: a ``cue `` chunk
with one cue point per mark and a ``LIST`` chunk of type ``adtl`` with a ``labl`` sub-chunk naming each
cue, which ffmpeg reads back as chapters. :func:`add_cues` appends both chunks to a finished file and
then raises the RIFF size in its header, so the audio is never read or moved, and a process that dies in
between leaves a file that still plays, without cues (which :func:`add_cues` then refuses). Labels
are counted UTF-8 bytes, never parsed (NULs removed, cut to :data:`MAX_LABEL_BYTES`), so no text can
change the file's structure.

See docs/api.md, "The files" (the specification, and what a reader sees after a crash).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Sequence
from typing import BinaryIO

from worker.audio.tags import clean_text

__all__ = ["MAX_LABEL_BYTES", "add_cues", "read_cues"]

logger = logging.getLogger(__name__)

MAX_LABEL_BYTES = 4_000
"""A label's UTF-8 bytes at most (NUL excluded): a chapter title of 1,000 characters always fits."""

_RIFF_MAX = 0xFFFF_FFFF
_FORMATS = (1, 3, 0xFFFE)  # WAVE_FORMAT_PCM, _IEEE_FLOAT, _EXTENSIBLE: a block is one sample frame
# dwName, dwPosition, fccChunk, dwChunkStart, dwBlockStart, dwSampleOffset
_CUE_POINT = struct.Struct("<II4sIII")

Chunk = tuple[bytes, int, int]  # (four-character id, offset of its body, size of its body)


def add_cues(path: str | os.PathLike[str], cues: Sequence[tuple[int, str]]) -> bool:
    """Give the WAV file at ``path`` one cue point per ``(sample offset, label)`` in ``cues``.

    Cue points are numbered 1 to n in the order given; an offset is in sample frames from the start of
    the data (at the file's own rate) and may be anywhere from 0 to the end of the data. Returns True
    once the file carries them. Returns False, leaving the file as it was and logging why, if it is not
    a well-formed RIFF/WAVE file of PCM or float samples (an RF64 file, for one), already has cue
    points or labels, ends with bytes past its RIFF chunk, would outgrow the 4 GiB of a RIFF size, or
    if ``cues`` is empty or an offset lies outside the data. I/O errors raise ``OSError``; after a
    failed write the file is first cut back to what it was.
    """
    name = os.fspath(path)
    with open(name, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        try:
            end, chunks = _walk(f, size)
            frames = _check(f, chunks, cues)
        except ValueError as exc:
            logger.warning("no chapter cues added to %s: %s", name, exc)
            return False
        start = end + (end & 1)  # the last chunk may be odd-sized without its pad byte
        if size > start:
            logger.warning("no chapter cues added to %s: %d bytes follow its RIFF chunk", name, size - start)
            return False
        new = b"\0" * (start - end) + _cue_chunk(cues) + _label_list(cues)
        if end + len(new) - 8 > _RIFF_MAX:
            logger.warning("no chapter cues added to %s: it would outgrow the 4 GiB of a RIFF file", name)
            return False
        fd = f.fileno()
        try:
            _write_all(fd, end, new)
            os.fsync(fd)
            _write_all(fd, 4, struct.pack("<I", end + len(new) - 8))
            os.fsync(fd)
        except OSError:
            _write_all(fd, 4, struct.pack("<I", end - 8))
            os.truncate(fd, size)
            raise
    logger.info("added %d chapter cues to %s (%d sample frames)", len(cues), name, frames)
    return True


def read_cues(path: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """The cue points of the WAV file at ``path`` as ``(sample offset, label)``, in the order stored; a
    cue without a label has ``""``. ``[]`` if there are none; ``ValueError`` if the file is not a
    well-formed RIFF/WAVE file or its cue chunk is cut short."""
    points: list[tuple[int, int]] = []
    labels: dict[int, str] = {}
    with open(os.fspath(path), "rb") as f:
        _, chunks = _walk(f, os.fstat(f.fileno()).st_size)
        for cid, body, size in chunks:
            if cid == b"cue ":
                data = _read(f, body, size)
                count = struct.unpack_from("<I", data)[0] if size >= 4 else -1
                if count < 0 or 4 + count * _CUE_POINT.size > size:
                    raise ValueError(f"the cue chunk of {size} bytes cannot hold its cue points")
                for n in range(count):
                    ident, _, _, _, _, offset = _CUE_POINT.unpack_from(data, 4 + n * _CUE_POINT.size)
                    points.append((ident, offset))
            elif cid == b"LIST" and size >= 4 and _read(f, body, 4) == b"adtl":
                labels.update(_labels(_read(f, body, size)))
    return [(offset, labels.get(ident, "")) for ident, offset in points]


def _walk(f: BinaryIO, file_size: int) -> tuple[int, list[Chunk]]:
    """The end of the RIFF chunk and the chunks inside it; ``ValueError`` unless it is RIFF/WAVE with
    chunks that fit it exactly (a trailing pad byte of the last chunk may be missing)."""
    f.seek(0)
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:] != b"WAVE":
        raise ValueError(f"not a RIFF/WAVE file (it starts {head[:4]!r}, {head[8:12]!r})")
    end = 8 + struct.unpack_from("<I", head, 4)[0]
    if end > file_size:
        raise ValueError(f"its RIFF size says {end} bytes, the file has {file_size} (unfinished?)")
    chunks = []
    pos = 12
    while pos + 8 <= end:
        cid, size = struct.unpack("<4sI", _read(f, pos, 8))
        if pos + 8 + size > end:
            raise ValueError(f"chunk {cid!r} at byte {pos} runs past the end of the RIFF chunk")
        chunks.append((cid, pos + 8, size))
        pos += 8 + size + (size & 1)
    if pos < end:
        raise ValueError(f"{end - pos} stray bytes end the RIFF chunk")
    return end, chunks


def _check(f: BinaryIO, chunks: list[Chunk], cues: Sequence[tuple[int, str]]) -> int:
    """The data's length in sample frames; ``ValueError`` if cues cannot be added to these chunks."""
    ids = [cid for cid, _, _ in chunks]
    if b"cue " in ids:
        raise ValueError("it already has a cue chunk")
    if any(cid == b"LIST" and size >= 4 and _read(f, body, 4) == b"adtl" for cid, body, size in chunks):
        raise ValueError("it already has a LIST/adtl chunk of labels")
    if ids.count(b"fmt ") != 1 or ids.count(b"data") != 1:
        raise ValueError("it needs exactly one fmt and one data chunk")
    _, fmt_body, fmt_size = chunks[ids.index(b"fmt ")]
    if fmt_size < 16:
        raise ValueError(f"its fmt chunk has {fmt_size} bytes")
    tag, _, _, _, block_align = struct.unpack("<HHIIH", _read(f, fmt_body, 14))
    if tag not in _FORMATS or block_align == 0:
        raise ValueError(f"its samples are not PCM or float (format tag {tag:#x}, block {block_align})")
    frames = chunks[ids.index(b"data")][2] // int(block_align)
    if not cues:
        raise ValueError("no cues were given")
    for offset, label in cues:
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= frames:
            raise ValueError(f"cue offset {offset!r} is outside the data (0 to {frames} sample frames)")
        if not isinstance(label, str):
            raise ValueError(f"a cue label must be text, got {type(label).__name__}")
    return frames


def _cue_chunk(cues: Sequence[tuple[int, str]]) -> bytes:
    points = b"".join(
        _CUE_POINT.pack(n, offset, b"data", 0, 0, offset) for n, (offset, _) in enumerate(cues, start=1)
    )
    return struct.pack("<4sII", b"cue ", 4 + len(points), len(cues)) + points


def _label_list(cues: Sequence[tuple[int, str]]) -> bytes:
    body = b"adtl"
    for n, (_, label) in enumerate(cues, start=1):
        text = _label_bytes(label)
        size = 4 + len(text) + 1
        body += struct.pack("<4sII", b"labl", size, n) + text + b"\0" + b"\0" * (size & 1)
    return struct.pack("<4sI", b"LIST", len(body)) + body


def _label_bytes(label: str) -> bytes:
    """``label`` as stored: UTF-8 without NULs (lone surrogates as U+FFFD), at most
    :data:`MAX_LABEL_BYTES`, cut before a character that would not fit whole."""
    raw = clean_text(label).encode("utf-8")
    if len(raw) <= MAX_LABEL_BYTES:
        return raw
    return raw[:MAX_LABEL_BYTES].decode("utf-8", "ignore").encode("utf-8")


def _labels(data: bytes) -> dict[int, str]:
    """The ``labl`` texts of a ``LIST``/``adtl`` body, by cue id."""
    found: dict[int, str] = {}
    pos = 4
    while pos + 8 <= len(data):
        sid, size = struct.unpack_from("<4sI", data, pos)
        text = data[pos + 8 : pos + 8 + size]
        if sid == b"labl" and len(text) >= 4:
            found[struct.unpack_from("<I", text)[0]] = text[4:].split(b"\0", 1)[0].decode("utf-8", "replace")
        pos += 8 + size + (size & 1)
    return found


def _write_all(fd: int, offset: int, data: bytes) -> None:
    """Write ``data`` at ``offset`` of ``fd``, unbuffered (so that a failed write leaves nothing behind)."""
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], offset + done)


def _read(f: BinaryIO, offset: int, size: int) -> bytes:
    f.seek(offset)
    data = f.read(size)
    if len(data) != size:
        raise ValueError(f"the file ends inside the {size} bytes at byte {offset}")
    return data

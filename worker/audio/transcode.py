"""References that libsndfile cannot read (MP4/M4A voice memos, WebM browser recordings), made into a
bounded WAV by the bundled ffmpeg.

The container is recognised from its first bytes, never from a file name: ``ftyp`` at offset 4 is ISO
base media (MP4, M4A, 3GP), ``1A 45 DF A3`` is EBML (WebM, Matroska). ffmpeg is then told which demuxer
to use (no probing: a file cannot pass itself off as a playlist or a concat list), which audio decoders
it may open, to read local files only, to take the first audio stream alone, and to stop after a given
number of seconds and bytes; the process is killed after a wall-clock limit. The command holds only constants,
numbers and two paths Tome made.

pydub (``AudioSegment.from_file``) was considered for this and not used: it needs ffprobe (absent here)
unless a decoder is forced, it buffers the whole decode in memory (several copies), its ``parameters``
land after the output name where ffmpeg ignores all but global options, and it has no time limit.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

from worker.audio.binary import ffmpeg_exe
from worker.audio.errors import AudioError

SNIFF_BYTES = 64
"""How much of a file is read to recognise its container."""


@dataclass(frozen=True)
class Container:
    """A container ffmpeg decodes for Tome: the name reported in ``DecodedAudio.format`` (and listed in
    ``AudioLimits.formats``), the ffmpeg demuxer forced on it, and the decoders it may use."""

    name: str
    demuxer: str
    decoders: tuple[str, ...]
    label: str  # for messages


MP4 = Container("MP4", "mov", ("aac", "alac"), "MP4/M4A")
"""AAC (voice memos, Safari's MediaRecorder) or Apple Lossless in ISO base media."""

WEBM = Container("WEBM", "matroska", ("opus", "vorbis", "pcm_f32le", "pcm_s16le"), "WebM/Matroska")
"""Opus or Vorbis (Chrome's and Firefox's MediaRecorder), or PCM (Chrome's ``codecs=pcm``) in EBML."""

CONTAINERS = (MP4, WEBM)

_EBML_MAGIC = b"\x1a\x45\xdf\xa3"
_LOG_PREFIX = re.compile(r"^(\[[^\]]*\]\s*)+")
_NOT_ALLOWED = re.compile(r"Codec \((\w+)\) not on whitelist")


def sniff_container(head: bytes) -> Container | None:
    """The container that ``head`` (a file's first bytes) starts, or None if it is none of
    :data:`CONTAINERS` (libsndfile's formats are left to libsndfile)."""
    if len(head) >= 8 and head[4:8] == b"ftyp":
        return MP4
    if head.startswith(_EBML_MAGIC):
        return WEBM
    return None


def sniff_file(path: str) -> Container | None:
    """:func:`sniff_container` on the first :data:`SNIFF_BYTES` of ``path``."""
    with open(path, "rb") as f:
        return sniff_container(f.read(SNIFF_BYTES))


def transcode_command(
    src: str, dst: str, container: Container, max_seconds: float, max_bytes: int
) -> list[str]:
    """The ffmpeg command that decodes the first audio stream of ``src`` (read as ``container``) into a
    16-bit PCM WAV at ``dst`` with the source's rate and channels, at most ``max_seconds`` long and about
    ``max_bytes`` big (ffmpeg stops writing at the first packet that crosses it)."""
    return [
        ffmpeg_exe(),
        "-hide_banner",
        "-nostdin",
        "-loglevel",
        "error",
        "-y",
        "-protocol_whitelist",
        "file",
        "-f",
        container.demuxer,
        "-codec_whitelist:a",  # for audio streams: a phone video's picture is probed, then dropped
        ",".join(container.decoders),
        "-i",
        os.path.abspath(src),
        "-map",
        "0:a:0",
        "-vn",
        "-sn",
        "-dn",
        "-map_metadata",
        "-1",
        "-t",
        f"{max_seconds:.3f}",
        "-fs",
        str(max_bytes),
        "-c:a",
        "pcm_s16le",
        "-f",
        "wav",
        os.path.abspath(dst),
    ]


def transcode_to_wav(
    src: str, dst: str, container: Container, max_seconds: float, max_bytes: int, timeout: float
) -> None:
    """Decode ``src`` into the WAV ``dst`` (see :func:`transcode_command`) within ``timeout`` seconds.

    Raises :class:`AudioError`: ``audio_empty`` if the file has no audio stream, ``audio_bad_format`` if
    its audio codec is not one the container allows here, ``audio_undecodable`` if ffmpeg fails, reports
    damage (a truncated or corrupted file, even one it could partly decode) or runs out of time.
    """
    cmd = transcode_command(src, dst, container, max_seconds, max_bytes)
    try:
        proc = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:  # subprocess.run has killed ffmpeg
        raise AudioError(
            "audio_undecodable", f"decoding the {container.label} file took longer than {timeout:g} seconds"
        ) from exc
    log = proc.stderr.decode("utf-8", "replace")
    if proc.returncode == 0 and not log.strip():
        return
    reason = _reason(log, src, dst)
    if "matches no streams" in log:
        raise AudioError("audio_empty", f"the {container.label} file holds no audio track")
    if (refused := _NOT_ALLOWED.search(log)) is not None:
        raise AudioError(
            "audio_bad_format",
            f"the {container.label} file's audio is {refused.group(1)}, which is not accepted "
            f"(accepted: {', '.join(container.decoders)})",
        )
    if proc.returncode == 0:
        raise AudioError(
            "audio_undecodable", f"the {container.label} file is damaged or truncated ({reason})"
        )
    raise AudioError("audio_undecodable", f"the {container.label} file could not be decoded ({reason})")


def _reason(log: str, src: str, dst: str) -> str:
    """ffmpeg's first error line, without its ``[component @ 0x...]`` prefixes and Tome's paths."""
    for raw in log.splitlines():
        line = _LOG_PREFIX.sub("", raw.strip())
        for path in (os.path.abspath(src), os.path.abspath(dst)):
            line = line.replace(path, "the file")
        line = line.rstrip(".").strip()
        if line and not line.startswith("Last message repeated"):
            return line[:200]
    return "ffmpeg reported no reason"

"""The output formats Tome encodes, what each file carries, and the ffmpeg arguments that make it (pure).

Every claim in :data:`FORMATS` is checked by ``tests/unit/audio/test_deliverables.py``, which reads the
files back with ffmpeg and with mutagen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

OutputFormat = Literal["wav", "mp3", "flac", "ogg", "m4a", "m4b"]
OUTPUT_FORMATS: tuple[OutputFormat, ...] = get_args(OutputFormat)

OPUS_SAMPLE_RATES = (8_000, 12_000, 16_000, 24_000, 48_000)
"""Rates libopus encodes natively; any other rate is resampled to 48 kHz."""

OPUS_MAX_KBPS = 256
"""libopus refuses more than 256 kb/s for one channel (ffmpeg fails at the end of the stream)."""

ID3_MAX_CHAPTERS = 255
"""An ID3 CTOC frame counts its entries in one byte; ffmpeg writes the count modulo 256 beyond it."""

VORBIS_MAX_CHAPTERS = 999
"""The Xiph chapter extension numbers its comments CHAPTER001 to CHAPTER999."""


@dataclass(frozen=True)
class FormatInfo:
    """What one output format is and what its files carry.

    ``max_chapters`` is how many chapter marks fit in the file (0: none, ``None``: no limit); ``tags``
    says whether the file carries text tags at all (WAV: a RIFF INFO list with title, author, date,
    genre, language, comment and track only); ``cover`` whether a cover image is embedded.
    """

    name: OutputFormat
    extension: str
    mime_type: str
    codec: str
    lossless: bool
    tags: bool
    max_chapters: int | None
    cover: bool


FORMATS: dict[OutputFormat, FormatInfo] = {
    "wav": FormatInfo("wav", ".wav", "audio/wav", "pcm_s16le", True, True, None, False),
    "mp3": FormatInfo("mp3", ".mp3", "audio/mpeg", "mp3", False, True, ID3_MAX_CHAPTERS, True),
    "flac": FormatInfo("flac", ".flac", "audio/flac", "flac", True, True, VORBIS_MAX_CHAPTERS, True),
    # RFC 7845 section 9: Ogg Opus files are audio/ogg and should be named .opus.
    "ogg": FormatInfo("ogg", ".opus", "audio/ogg", "opus", False, True, VORBIS_MAX_CHAPTERS, True),
    "m4a": FormatInfo("m4a", ".m4a", "audio/mp4", "aac", False, True, None, True),
    "m4b": FormatInfo("m4b", ".m4b", "audio/mp4", "aac", False, True, None, True),
}


def check_format(fmt: str) -> OutputFormat:
    """``fmt`` as an :data:`OutputFormat`; ``ValueError`` naming the accepted ones otherwise."""
    for name in OUTPUT_FORMATS:
        if fmt == name:
            return name
    raise ValueError(f"unknown output format {fmt!r}; expected one of {', '.join(OUTPUT_FORMATS)}")


def chapter_family(fmt: OutputFormat) -> Literal["ffmpeg", "vorbis", "cues"]:
    """How chapters get into a file: ffmpeg's muxer from chapter sections (ID3 CHAP/CTOC, MP4 chapter
    track and Nero ``chpl``), Vorbis comments written by Tome (ffmpeg's FLAC muxer writes none and its
    Ogg muxer writes wrong seconds for starts with 500 ms or more), or cue points with labels that Tome
    adds to the finished WAV (worker.audio.wavcues: ffmpeg's WAV muxer writes none)."""
    if fmt in ("mp3", "m4a", "m4b"):
        return "ffmpeg"
    if fmt in ("flac", "ogg"):
        return "vorbis"
    return "cues"


def codec_args(fmt: OutputFormat, sample_rate: int, bitrate_kbps: int) -> list[str]:
    """ffmpeg output arguments for the audio codec and the container of ``fmt``."""
    if fmt == "wav":
        # RF64 only if the output outgrows the 4 GiB limit of plain WAV.
        return ["-c:a", "pcm_s16le", "-rf64", "auto", "-f", "wav"]
    if fmt == "flac":
        return ["-c:a", "flac", "-f", "flac"]
    if fmt == "mp3":
        # CBR at the chosen rate (LAME caps it at 160 kb/s below 32 kHz, the MPEG-2 maximum); ID3v2.3 is
        # the version every player reads, CHAP/CTOC included.
        return ["-c:a", "libmp3lame", "-b:a", f"{bitrate_kbps}k", "-id3v2_version", "3", "-f", "mp3"]
    if fmt == "ogg":
        rate = [] if sample_rate in OPUS_SAMPLE_RATES else ["-ar", "48000"]
        kbps = min(bitrate_kbps, OPUS_MAX_KBPS)
        return ["-c:a", "libopus", "-b:a", f"{kbps}k", *rate, "-f", "ogg"]
    # m4a and m4b: AAC in MP4; the index (moov) is moved to the front once the stream ends, which needs
    # a seekable output (a file path is). m4b only differs by its brand, which players use to treat the
    # file as an audiobook (bookmarking, chapters, speed control).
    # ffmpeg's "fast" AAC coder: about 6x the speed of its default (twoloop) on speech (19 s -> 3.5 s
    # for 19 minutes, measured by make bench's stitch section), at a quality speech does not miss.
    brand = ["-brand", "M4B "] if fmt == "m4b" else []
    return [
        "-c:a",
        "aac",
        "-aac_coder",
        "fast",
        "-b:a",
        f"{bitrate_kbps}k",
        "-movflags",
        "+faststart",
        *brand,
        "-f",
        "mp4",
    ]

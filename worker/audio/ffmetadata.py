"""The tags and chapters of an output, as the ffmetadata file ffmpeg reads before it encodes (pure).

Which keys each container gets is decided here, per format, so that ffmpeg's muxers write the frames
and atoms players read (see :func:`format_tags`). Values are escaped as ffmpeg's metadata format asks
(a backslash before ``=``, ``;``, ``#``, ``\\`` and newline) and before carriage return as well, which
ffmpeg's reader also takes as a line end (unescaped, ``title=a\\r[CHAPTER]`` would start a chapter).
Its reader has one more flaw: it decides whether a line end is escaped by the byte before it only, so
after a value ending in an escaped backslash it would join the next line to the value. Such a line ends
with a NUL byte first, which ends the line (and the value) for the reader as it is and as it would be
fixed. Together this makes every value, whatever characters it holds, read back as exactly one value of
the key it was written under (the tests feed it arbitrary text).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from worker.audio.chapters import ChapterMark, samples_to_ms
from worker.audio.cover import Cover
from worker.audio.formats import FORMATS, OutputFormat, chapter_family
from worker.audio.tags import BookTags, clean_text

HEADER = ";FFMETADATA1\n"
_SPECIAL = re.compile(r"[=;#\\\n\r]")

MP4_MEDIA_TYPE_AUDIOBOOK = "2"
"""iTunes ``stik`` value of an audiobook."""


def escape(value: str) -> str:
    """``value`` cleaned (:func:`~worker.audio.tags.clean_text`) and escaped for an ffmetadata file."""
    return _SPECIAL.sub(lambda m: "\\" + m.group(0), clean_text(value))


def tag_line(key: str, value: str) -> str:
    """One ``key=value`` line, value escaped; see the module docstring for the NUL after a backslash."""
    escaped = escape(value)
    return f"{key}={escaped}\0\n" if escaped.endswith("\\") else f"{key}={escaped}\n"


def format_tags(fmt: OutputFormat, tags: BookTags) -> list[tuple[str, str]]:
    """The ffmpeg metadata keys and values that carry ``tags`` in ``fmt``.

    - mp3 (ID3v2.3): TIT2 title, TALB album (the title), TPE1 artist and TPE2 album artist (the author),
      TCOM composer (the narrator, the usual place players and Audible-style taggers look),
      TXXX:narrator, TPUB publisher, TYER year, TLAN language, TCON genre, TRCK track, and the
      description as TXXX:comment (ffmpeg's ID3 writer has no COMM frame).
    - m4a/m4b (iTunes atoms): ©nam, ©alb, ©ART, aART, ©wrt (narrator), ©day, ©cmt, desc and ldes
      (description), ©gen, trkn, and for m4b stik = 2 (audiobook). MP4 has no publisher or language atom.
    - flac/ogg (Vorbis comments): TITLE, ALBUM, ARTIST, ALBUMARTIST, COMPOSER and NARRATOR, PUBLISHER,
      DATE, LANGUAGE, DESCRIPTION, GENRE, TRACKNUMBER, TRACKTOTAL.
    - wav (RIFF INFO): INAM, IPRD, IART, ICMT, ICRD, IGNR, ILNG, IPRT (no narrator or publisher field).
    """
    year = str(tags.year) if tags.year is not None else None
    if fmt == "mp3":
        pairs = [
            ("title", tags.title),
            ("album", tags.album or tags.title),
            ("artist", tags.author),
            ("album_artist", tags.author),
            ("composer", tags.narrator),
            ("narrator", tags.narrator),
            ("publisher", tags.publisher),
            ("date", year),
            ("language", tags.language),
            ("genre", tags.genre),
            ("track", tags.track_text),
            ("comment", tags.description),
        ]
    elif fmt in ("m4a", "m4b"):
        pairs = [
            ("title", tags.title),
            ("album", tags.album or tags.title),
            ("artist", tags.author),
            ("album_artist", tags.author),
            ("composer", tags.narrator),
            ("date", year),
            ("genre", tags.genre),
            ("track", tags.track_text),
            ("comment", tags.description),
            ("description", tags.description),
            ("synopsis", tags.description),
            ("media_type", MP4_MEDIA_TYPE_AUDIOBOOK if fmt == "m4b" else None),
        ]
    elif fmt in ("flac", "ogg"):
        pairs = [
            ("TITLE", tags.title),
            ("ALBUM", tags.album or tags.title),
            ("ARTIST", tags.author),
            ("ALBUMARTIST", tags.author),
            ("COMPOSER", tags.narrator),
            ("NARRATOR", tags.narrator),
            ("PUBLISHER", tags.publisher),
            ("DATE", year),
            ("LANGUAGE", tags.language),
            ("GENRE", tags.genre),
            ("TRACKNUMBER", str(tags.track) if tags.track is not None else None),
            ("TRACKTOTAL", str(tags.track_total) if tags.track_total is not None else None),
            ("DESCRIPTION", tags.description),
        ]
    else:
        pairs = [
            ("title", tags.title),
            ("album", tags.album or tags.title),
            ("artist", tags.author),
            ("date", year),
            ("genre", tags.genre),
            ("language", tags.language),
            ("track", tags.track_text),
            ("comment", tags.description),
        ]
    return [(key, value) for key, value in pairs if value]


def vorbis_time(ms: int) -> str:
    """``HH:MM:SS.mmm`` as the Xiph chapter extension writes a start time."""
    seconds, millis = divmod(ms, 1000)
    minutes, secs = divmod(seconds, 60)
    hours, mins = divmod(minutes, 60)
    return f"{hours:02d}:{mins:02d}:{secs:02d}.{millis:03d}"


def embedded_chapters(fmt: OutputFormat, chapters: Sequence[ChapterMark]) -> Sequence[ChapterMark]:
    """The chapters ``fmt`` can carry: all (MP4, WAV cue points), the first 255 (MP3) or 999 (FLAC, Ogg)."""
    limit = FORMATS[fmt].max_chapters
    return chapters if limit is None else chapters[:limit]


def render(
    fmt: OutputFormat,
    sample_rate: int,
    tags: BookTags | None,
    chapters: Sequence[ChapterMark],
    cover: Cover | None = None,
) -> str | None:
    """The ffmetadata text for an output, or None if it would carry nothing (then ffmpeg gets none).

    Chapters go in ``[CHAPTER]`` sections with the output's sample rate as time base (exact) for the
    formats whose muxer writes them (:func:`~worker.audio.formats.chapter_family`), as
    CHAPTERnnn/CHAPTERnnnNAME comments (from 001, milliseconds rounded to the nearest) for FLAC and Ogg.
    A cover is part of the metadata only for Ogg (a METADATA_BLOCK_PICTURE comment); the other formats
    take it as an image input.
    """
    family = chapter_family(fmt)
    marks = embedded_chapters(fmt, chapters)
    pairs = format_tags(fmt, tags) if tags is not None else []
    if family == "vorbis":
        for n, mark in enumerate(marks, start=1):
            pairs.append((f"CHAPTER{n:03d}", vorbis_time(samples_to_ms(mark.start_sample, sample_rate))))
            pairs.append((f"CHAPTER{n:03d}NAME", mark.title))
    if cover is not None and fmt == "ogg":
        pairs.append(("METADATA_BLOCK_PICTURE", cover.picture_comment()))
    sections = []
    if family == "ffmpeg":
        for mark in marks:
            sections.append(
                f"[CHAPTER]\nTIMEBASE=1/{sample_rate}\nSTART={mark.start_sample}\nEND={mark.end_sample}\n"
                + tag_line("title", mark.title)
            )
    if not pairs and not sections:
        return None
    return HEADER + "".join(tag_line(key, value) for key, value in pairs) + "".join(sections)

"""BookTags and the ffmetadata file: user text stays text, whatever it holds, when ffmpeg reads it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.audio.test_deliverables import parse_ffmetadata
from worker.audio import (
    MAX_DESCRIPTION_CHARS,
    MAX_TAG_CHARS,
    BookTags,
    ChapterMark,
    PieceLength,
    ffmpeg_exe,
    plan_chapters,
)
from worker.audio.ffmetadata import escape, format_tags, render, tag_line, vorbis_time
from worker.audio.formats import OUTPUT_FORMATS, OutputFormat
from worker.audio.tags import clean_text

SR = 22_050


def ffmpeg_reads(text: str, folder: Path) -> tuple[dict[str, str], list[dict[str, str]]]:
    """What ffmpeg's ffmetadata reader makes of ``text``, dumped again by ffmpeg and parsed independently."""
    path = folder / "meta.txt"
    path.write_bytes(text.encode("utf-8"))
    cmd = [ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-f", "ffmetadata", "-i", str(path)]
    out = subprocess.run([*cmd, "-f", "ffmetadata", "-"], capture_output=True, check=True)
    tags, chapters = parse_ffmetadata(out.stdout.decode("utf-8"))
    tags.pop("encoder", None)
    return tags, chapters


def marks(*titles: str) -> tuple[ChapterMark, ...]:
    pieces = [PieceLength(1_000, "sentence", i) for i in range(len(titles))]
    return plan_chapters(pieces, SR, titles=dict(enumerate(titles))).chapters


# --- BookTags ----------------------------------------------------------------------------------------


def test_defaults_and_cleaning() -> None:
    assert BookTags() == BookTags(genre="Audiobook")
    tags = BookTags(title="a\0b", author="", narrator="\ud800x", description="\n")
    assert tags.title == "ab"
    assert tags.author is None
    assert tags.narrator == "\ufffdx"
    assert tags.description == "\n"  # kept: only empty means unset
    assert BookTags(track=3, track_total=12).track_text == "3/12"
    assert BookTags(track=3).track_text == "3"
    assert BookTags().track_text is None


def test_limits_are_inclusive() -> None:
    BookTags(title="t" * MAX_TAG_CHARS, description="d" * MAX_DESCRIPTION_CHARS)
    assert BookTags(title="t" * MAX_TAG_CHARS + "\0" * 10).title == "t" * MAX_TAG_CHARS  # NULs do not count


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"title": "t" * (MAX_TAG_CHARS + 1)}, r"'title' is 1001 characters long; at most 1000"),
        ({"publisher": "p" * 5_000}, "'publisher'"),
        ({"description": "d" * (MAX_DESCRIPTION_CHARS + 1)}, "at most 4000"),
        ({"author": 5}, "'author' must be a string"),
        ({"year": 0}, "'year' must be between 1 and 9999"),
        ({"year": "2024"}, "'year' must be an integer"),
        ({"year": True}, "'year' must be an integer"),
        ({"language": "english language"}, "'language'"),
        ({"language": "e"}, "'language'"),
        ({"language": "en\nTITLE=x"}, "'language'"),
        ({"track": 0}, "'track'"),
        ({"track": 4, "track_total": 3}, "'track'"),
        ({"track_total": 3}, "needs a 'track'"),
        ({"track": 1, "track_total": 0}, "'track_total'"),
    ],
)
def test_invalid_tags_name_the_field(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BookTags(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("language", ["en", "eng", "en-GB", "zh-Hant-TW", "de-CH-1901"])
def test_language_tags(language: str) -> None:
    assert BookTags(language=language).language == language


# --- escaping ----------------------------------------------------------------------------------------


def test_escape_and_line_ends() -> None:
    assert escape("a=b;c#d\\e\nf\rg") == "a\\=b\\;c\\#d\\\\e\\\nf\\\rg"
    assert escape("nul\0") == "nul"
    assert tag_line("title", "x") == "title=x\n"
    # ffmpeg's reader would take the newline after an escaped backslash as escaped: a NUL ends the line.
    assert tag_line("title", "x\\") == "title=x\\\\\0\n"


@pytest.mark.parametrize(
    "value",
    [
        "x\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=0\nEND=1\ntitle=evil",
        "x\r[CHAPTER]\rTIMEBASE=1/1000\rSTART=0\rEND=1\rtitle=evil",
        "a=b;c#d\\e",
        "-i /etc/passwd",
        "\n;FFMETADATA1\n[STREAM]\ntitle=s",
        "ends with a backslash\\",
        "ends with two\\\\",
        "\\",
        "\\\n\\\r\\=",
        "#comment",
        ";comment",
        "=",
        "   spaced   ",
        "日本語 ünïcødé \u2028 \t tab",
    ],
)
def test_ffmpeg_reads_every_value_back_literally(tmp_path: Path, value: str) -> None:
    text = render("mp3", SR, BookTags(title=value, author="after", publisher=value), marks(value, "two"))
    assert text is not None
    tags, chapters = ffmpeg_reads(text, tmp_path)
    assert tags["title"] == tags["publisher"] == value
    assert tags["artist"] == "after"  # the line after the value is still its own tag
    assert [c["title"] for c in chapters] == [value, "two"]
    assert [c["START"] for c in chapters] == ["0", str(1_000 + round(0.35 * SR))]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=st.lists(
        st.text(st.one_of(st.sampled_from("=;#\\\n\r[]\0 aA-"), st.characters()), max_size=30),
        min_size=3,
        max_size=3,
    )
)
def test_any_text_reads_back_as_itself_and_nothing_more(tmp_path: Path, values: list[str]) -> None:
    title, author, chapter = values
    tags = BookTags(title=title, author=author, narrator="n")
    chapter_marks = marks(chapter, "second")
    text = render("mp3", SR, tags, chapter_marks)
    assert text is not None
    read, chapters = ffmpeg_reads(text, tmp_path)
    expected = dict(format_tags("mp3", tags))
    assert read == expected  # every tag, each once, none more
    assert read.get("title") == (clean_text(title) or None)
    assert read.get("artist") == (clean_text(author) or None)
    assert [c["title"] for c in chapters] == [m.title for m in chapter_marks]


# --- what each format gets --------------------------------------------------------------------------


FULL = BookTags(
    title="T",
    author="A",
    narrator="N",
    publisher="P",
    year=1999,
    language="en",
    description="D",
    track=2,
    track_total=5,
)


def test_format_tags_per_container() -> None:
    assert dict(format_tags("mp3", FULL)) == {
        "title": "T",
        "album": "T",
        "artist": "A",
        "album_artist": "A",
        "composer": "N",
        "narrator": "N",
        "publisher": "P",
        "date": "1999",
        "language": "en",
        "genre": "Audiobook",
        "track": "2/5",
        "comment": "D",
    }
    assert dict(format_tags("flac", FULL)) == dict(format_tags("ogg", FULL))
    vorbis = dict(format_tags("flac", FULL))
    assert (vorbis["ALBUMARTIST"], vorbis["NARRATOR"], vorbis["TRACKNUMBER"], vorbis["TRACKTOTAL"]) == (
        "A",
        "N",
        "2",
        "5",
    )
    m4b = dict(format_tags("m4b", FULL))
    assert m4b["media_type"] == "2"
    assert "media_type" not in dict(format_tags("m4a", FULL))
    assert "publisher" not in m4b  # no MP4 atom for it: ffmpeg would drop it anyway
    wav = dict(format_tags("wav", FULL))
    assert set(wav) == {"title", "album", "artist", "date", "genre", "language", "track", "comment"}
    assert dict(format_tags("mp3", BookTags(genre=None))) == {}


@pytest.mark.parametrize("fmt", OUTPUT_FORMATS)
def test_render_puts_chapters_where_the_format_reads_them(fmt: OutputFormat) -> None:
    text = render(fmt, SR, FULL, marks("one", "two"))
    assert text is not None
    assert text.startswith(";FFMETADATA1\n")
    sections = text.count("[CHAPTER]\n")
    comments = text.count("CHAPTER001NAME=one")
    assert (sections, comments) == {
        "mp3": (2, 0),
        "m4a": (2, 0),
        "m4b": (2, 0),
        "flac": (0, 1),
        "ogg": (0, 1),
        "wav": (0, 0),
    }[fmt]
    if sections:
        assert f"TIMEBASE=1/{SR}\nSTART=0\nEND=8717\ntitle=one\n" in text
    if comments:
        assert "CHAPTER002=00:00:00.395\n" in text


def test_render_without_anything_is_none() -> None:
    assert render("wav", SR, None, marks("one")) is None
    assert render("mp3", SR, None, ()) is None
    assert render("mp3", SR, BookTags(genre=None), ()) is None


@pytest.mark.parametrize(
    ("ms", "text"),
    [(0, "00:00:00.000"), (1_500, "00:00:01.500"), (3_599_999, "00:59:59.999"), (36_000_000, "10:00:00.000")],
)
def test_vorbis_time(ms: int, text: str) -> None:
    assert vorbis_time(ms) == text

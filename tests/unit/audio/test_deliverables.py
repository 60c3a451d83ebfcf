"""Every output format, end to end: stitched with tags, chapters and a cover, then read back.

Read back independently of the code that wrote the files: by decoding them with the bundled ffmpeg, by
ffmpeg's own metadata dump (``ffmpeg -i FILE -f ffmetadata -``, parsed here), and by mutagen (ID3
CHAP/CTOC and APIC, MP4 atoms and Nero chapters, Vorbis comments and FLAC pictures) where installed.
"""

from __future__ import annotations

import base64
import math
import os
import subprocess
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from worker.audio import (
    FORMATS,
    OUTPUT_FORMATS,
    BookTags,
    Cover,
    OutputFormat,
    Pauses,
    StitchError,
    StitchPiece,
    StitchResult,
    apply_fades,
    decode_to_pcm,
    ffmpeg_exe,
    load_cover,
    stitch,
    write_wav_atomic,
)

SR = 22_050  # the espeak engine's rate: not an Opus rate, and MPEG-2 for MP3
PAUSES = Pauses(sentence=0.3, paragraph=0.6, chapter=1.25)
TONES = (300.0, 450.0, 600.0, 750.0, 900.0)
LENGTHS = (12_345, 11_111, 9_999, 13_001, 10_007)  # odd lengths: chapter starts fall between frames
KINDS = ("sentence", "paragraph", "chapter", "sentence", "chapter")
CHAPTERS = (0, 0, 1, 2, 2)
TITLES = {0: "Opening", 1: "The Middle", 2: "Épilogue — 終わり"}

Books = dict[str, tuple[Path, StitchResult]]

EVIL_TITLE = "x\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=0\nEND=1\ntitle=evil"
TAGS = BookTags(
    title=EVIL_TITLE,
    author="a=b;c#d\\e",
    narrator="-i /etc/passwd",
    publisher="Back\\slash ends\\",
    year=2024,
    language="eng",
    description="line one\r\n;FFMETADATA1\n#not a comment\r[CHAPTER]",
)


# --- reading files back ---------------------------------------------------------------------------


def parse_ffmetadata(text: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Global tags and chapters (with their TIMEBASE/START/END/title) of ffmpeg's metadata dump.

    Written from the format's description, escape by escape: a line ends at an unescaped newline (ffmpeg's
    writer does not escape a carriage return, which stays in the value), a key at the first unescaped '='.
    """
    lines: list[list[tuple[str, bool]]] = [[]]
    chars = iter(text)
    for ch in chars:
        if ch == "\\":
            lines[-1].append((next(chars, ""), True))
        elif ch == "\n":
            lines.append([])
        else:
            lines[-1].append((ch, False))
    header, *rest = lines
    assert "".join(c for c, _ in header) == ";FFMETADATA1"
    tags: dict[str, str] = {}
    chapters: list[dict[str, str]] = []
    section = tags
    for line in rest:
        plain = "".join(c for c, _ in line)
        if not line or (not line[0][1] and line[0][0] in ";#"):
            continue
        if plain == "[CHAPTER]" and not any(escaped for _, escaped in line):
            chapters.append({})
            section = chapters[-1]
            continue
        split = next(i for i, (c, escaped) in enumerate(line) if c == "=" and not escaped)
        key = "".join(c for c, _ in line[:split])
        assert key not in section, f"{key} twice"
        section[key] = "".join(c for c, _ in line[split + 1 :])
    return tags, chapters


def ffmpeg_metadata(path: Path, stream: bool = False) -> tuple[dict[str, str], list[dict[str, str]]]:
    """What ffmpeg reads from ``path``: the file's tags (or its audio stream's, for Ogg), and chapters
    at the times stored in the file (-copyts: no shift by the MP3 decoder's start padding)."""
    cmd = [ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-copyts", "-i", str(path)]
    if stream:
        cmd += ["-map_metadata", "0:s:a:0"]
    out = subprocess.run([*cmd, "-f", "ffmetadata", "-"], capture_output=True, check=True)
    tags, chapters = parse_ffmetadata(out.stdout.decode("utf-8"))
    return {key.lower(): value for key, value in tags.items()}, chapters  # ffmpeg's keys ignore case


def ffmpeg_streams(path: Path) -> list[str]:
    """The ``Stream #0:n`` lines ffmpeg prints for ``path``."""
    cmd = [ffmpeg_exe(), "-hide_banner", "-i", str(path)]  # exits 1: no output file given
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return [line.strip() for line in proc.stderr.splitlines() if line.strip().startswith("Stream #")]


def chapter_seconds(chapter: dict[str, str]) -> Fraction:
    num, den = chapter.get("TIMEBASE", "1/1000000000").split("/")
    return Fraction(int(chapter["START"]) * int(num), int(den))


def rounded_ms(samples: int) -> int:
    """Milliseconds, halves up, computed independently of worker.audio."""
    return math.floor(Fraction(samples * 1000, SR) + Fraction(1, 2))


def vorbis_ms(value: str) -> int:
    hours, minutes, seconds = value.split(":")
    whole, millis = seconds.split(".")
    return ((int(hours) * 60 + int(minutes)) * 60 + int(whole)) * 1000 + int(millis)


def mutagen_module(name: str) -> Any:
    return pytest.importorskip(name, reason="mutagen is a dev dependency; the ffmpeg read-backs still run")


# --- fixtures -------------------------------------------------------------------------------------


def tone(hz: float, n: int) -> npt.NDArray[np.float32]:
    t = np.arange(n) / SR
    return apply_fades((0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32), SR)


@pytest.fixture(scope="module")
def chunk_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("chunks")
    for i, (hz, n) in enumerate(zip(TONES, LENGTHS, strict=True)):
        write_wav_atomic(folder / f"{i}.wav", tone(hz, n), SR)
    return folder


def pieces_in(folder: Path) -> list[StitchPiece]:
    return [
        StitchPiece(str(folder / f"{i}.wav"), kind, chapter)
        for i, (kind, chapter) in enumerate(zip(KINDS, CHAPTERS, strict=True))
    ]


def layout() -> tuple[list[int], int]:
    """Start of every chunk in samples, and the total, computed here from the constants."""
    starts, position = [], 0
    for n, kind in zip(LENGTHS, KINDS, strict=True):
        starts.append(position)
        position += n + round(PAUSES.seconds(kind) * SR)
    return starts, position


@pytest.fixture(scope="module")
def cover_jpeg(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("cover") / "cover.jpg"
    cmd = [ffmpeg_exe(), "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=s=400x400", "-frames:v", "1"]
    subprocess.run([*cmd, "-c:v", "mjpeg", "-f", "image2", str(path)], check=True)
    return path.read_bytes()


@pytest.fixture(scope="module")
def books(chunk_dir: Path, cover_jpeg: bytes, tmp_path_factory: pytest.TempPathFactory) -> Books:
    """One book per format, stitched once for the tests below."""
    out_dir = tmp_path_factory.mktemp("books")
    cover = load_cover(cover_jpeg)
    made: Books = {}
    for fmt in OUTPUT_FORMATS:
        out = out_dir / f"book{FORMATS[fmt].extension}"
        result = stitch(
            pieces_in(chunk_dir), out, fmt, SR, PAUSES, 64, tags=TAGS, chapter_titles=TITLES, cover=cover
        )
        made[fmt] = (out, result)
    assert sorted(os.listdir(out_dir)) == sorted(f"book{FORMATS[f].extension}" for f in OUTPUT_FORMATS)
    return made


# --- audio -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", OUTPUT_FORMATS)
def test_every_format_decodes_to_the_stitched_length_and_audio(
    books: Books, chunk_dir: Path, fmt: OutputFormat
) -> None:
    out, result = books[fmt]
    starts, total = layout()
    assert result.duration == total / SR
    assert result.bytes == out.stat().st_size
    decoded = decode_to_pcm(out, SR)
    # MP3 (LAME's gapless header) and AAC in MP4 (edit list) decode to exactly the samples encoded;
    # Opus is encoded at 48 kHz, and resampling there and back may gain or lose one sample at 22.05 kHz.
    assert abs(decoded.size - total) <= (2 if fmt == "ogg" else 0)
    margin = 1_000
    for start, n, hz in zip(starts, LENGTHS, TONES, strict=True):
        segment = decoded[start + margin : start + n - margin]
        spectrum = np.abs(np.fft.rfft(segment * np.hanning(segment.size)))
        peak = float(np.fft.rfftfreq(segment.size, 1 / SR)[int(np.argmax(spectrum))])
        assert peak == pytest.approx(hz, abs=5.0), "audio out of place"
    if FORMATS[fmt].lossless:
        for i, (start, n) in enumerate(zip(starts, LENGTHS, strict=True)):
            np.testing.assert_array_equal(
                decoded[start : start + n], decode_to_pcm(chunk_dir / f"{i}.wav", SR)
            )


def test_mp3_is_cbr_at_the_chosen_bitrate(books: Books) -> None:
    mp3 = mutagen_module("mutagen.mp3")
    info = mp3.MP3(books["mp3"][0]).info
    assert info.bitrate_mode == mp3.BitrateMode.CBR
    assert info.bitrate == 64_000
    assert info.sample_rate == SR


def test_m4b_has_the_audiobook_brand_and_m4a_not(books: Books) -> None:
    for fmt, brand in (("m4b", b"M4B "), ("m4a", b"isom")):
        head = books[fmt][0].read_bytes()[:64]
        assert head[4:12] == b"ftyp" + brand
        assert b"moov" in head, "faststart: the index comes right after ftyp, before the audio"
    mp4 = mutagen_module("mutagen.mp4")
    assert mp4.MP4(books["m4b"][0]).tags["stik"] == [2]  # iTunes media kind: audiobook
    assert "stik" not in mp4.MP4(books["m4a"][0]).tags


# --- chapters --------------------------------------------------------------------------------------


def expected_starts() -> list[int]:
    starts, _ = layout()
    return [starts[0], starts[2], starts[3]]  # chapters 0, 1, 2 begin at chunks 0, 2, 3


@pytest.mark.parametrize("fmt", OUTPUT_FORMATS)
def test_result_chapters_are_the_planned_ones(books: Books, fmt: OutputFormat) -> None:
    _, result = books[fmt]
    _, total = layout()
    starts = expected_starts()
    assert [m.index for m in result.chapters] == [0, 1, 2]
    assert [m.start_sample for m in result.chapters] == starts
    assert [m.end_sample for m in result.chapters] == [*starts[1:], total]
    assert [m.start for m in result.chapters] == [s / SR for s in starts]
    assert [m.title for m in result.chapters] == list(TITLES.values())
    assert result.embedded_chapters == 3


@pytest.mark.parametrize("fmt", OUTPUT_FORMATS)
def test_ffmpeg_reads_back_the_chapters(books: Books, fmt: OutputFormat) -> None:
    out, _ = books[fmt]
    _, chapters = ffmpeg_metadata(out)
    assert [c["title"] for c in chapters] == list(TITLES.values())
    seconds = [chapter_seconds(c) for c in chapters]
    if fmt in ("m4a", "m4b", "wav"):  # the MP4 chapter track and WAV cue points are in samples: exact
        assert seconds == [Fraction(s, SR) for s in expected_starts()]
    else:  # ID3 CHAP and the Vorbis chapter comments hold milliseconds
        assert seconds == [Fraction(rounded_ms(s), 1000) for s in expected_starts()]


def test_mutagen_reads_id3_chap_and_ctoc(books: Books) -> None:
    id3 = mutagen_module("mutagen.id3")
    tags = id3.ID3(books["mp3"][0])
    assert tags.version[:2] == (2, 3)
    (toc,) = tags.getall("CTOC")
    assert toc.flags & id3.CTOCFlags.TOP_LEVEL
    assert toc.flags & id3.CTOCFlags.ORDERED
    chaps = {c.element_id: c for c in tags.getall("CHAP")}
    assert len(toc.child_element_ids) == len(chaps) == 3
    ordered = [chaps[e] for e in toc.child_element_ids]
    _, total = layout()
    starts = expected_starts()
    assert [c.start_time for c in ordered] == [rounded_ms(s) for s in starts]
    assert [c.end_time for c in ordered] == [rounded_ms(s) for s in [*starts[1:], total]]
    assert [c.sub_frames["TIT2"].text[0] for c in ordered] == list(TITLES.values())


@pytest.mark.parametrize("fmt", ["m4a", "m4b"])
def test_mutagen_reads_mp4_chapters(books: Books, fmt: str) -> None:
    mp4 = mutagen_module("mutagen.mp4")
    chapters = mp4.MP4(books[fmt][0]).chapters
    assert [c.title for c in chapters] == list(TITLES.values())
    for chapter, start in zip(chapters, expected_starts(), strict=True):
        assert chapter.start == pytest.approx(start / SR, abs=1e-4)


@pytest.mark.parametrize("fmt", ["flac", "ogg"])
def test_mutagen_reads_vorbis_chapter_comments(books: Books, fmt: str) -> None:
    mutagen = mutagen_module("mutagen")
    comments = mutagen.File(books[fmt][0]).tags
    keys = sorted(k.upper() for k, _ in comments if k.upper().startswith("CHAPTER"))  # (key, value) list
    assert keys == [f"CHAPTER00{n}{suffix}" for n in (1, 2, 3) for suffix in ("", "NAME")]
    assert [vorbis_ms(comments[f"CHAPTER00{n}"][0]) for n in (1, 2, 3)] == [
        rounded_ms(s) for s in expected_starts()
    ]
    assert [comments[f"CHAPTER00{n}NAME"][0] for n in (1, 2, 3)] == list(TITLES.values())


# --- tags ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", OUTPUT_FORMATS)
def test_ffmpeg_reads_back_the_tags_literally(books: Books, fmt: OutputFormat) -> None:
    out, _ = books[fmt]
    tags, chapters = ffmpeg_metadata(out, stream=fmt == "ogg")
    assert tags["title"] == EVIL_TITLE
    assert tags["artist"] == "a=b;c#d\\e"
    assert tags["genre"] == "Audiobook"
    assert tags["date"] == "2024"
    assert tags.get("comment", tags.get("description")) == TAGS.description
    assert "evil" not in {c.get("title") for c in chapters}
    if fmt != "wav":
        assert tags["album_artist"] == "a=b;c#d\\e"
        assert tags["composer"] == "-i /etc/passwd"
    if fmt in ("mp3", "flac", "ogg"):
        assert tags["publisher"] == "Back\\slash ends\\"
        assert tags["language"] == "eng"


def test_mutagen_reads_the_id3_frames(books: Books) -> None:
    id3 = mutagen_module("mutagen.id3")
    tags = id3.ID3(books["mp3"][0])
    texts = {key: frame.text[0] for key, frame in tags.items() if hasattr(frame, "text")}
    assert {k: str(v) for k, v in texts.items()} == {
        "TIT2": EVIL_TITLE,
        "TALB": EVIL_TITLE,
        "TPE1": "a=b;c#d\\e",
        "TPE2": "a=b;c#d\\e",
        "TCOM": "-i /etc/passwd",
        "TXXX:narrator": "-i /etc/passwd",
        "TPUB": "Back\\slash ends\\",
        "TDRC": "2024",  # mutagen shows ID3v2.3's TYER as TDRC
        "TLAN": "eng",
        "TCON": "Audiobook",
        "TXXX:comment": TAGS.description,
        "TSSE": texts["TSSE"],
    }
    assert {f.FrameID for f in tags.values()} == {"TIT2", "TALB", "TPE1", "TPE2", "TCOM", "TXXX", "TPUB"} | {
        "TDRC",
        "TLAN",
        "TCON",
        "TSSE",
        "CTOC",
        "CHAP",
        "APIC",
    }


@pytest.mark.parametrize("fmt", ["m4a", "m4b"])
def test_mutagen_reads_the_mp4_atoms(books: Books, fmt: str) -> None:
    mp4 = mutagen_module("mutagen.mp4")
    tags = mp4.MP4(books[fmt][0]).tags
    assert tags["\xa9nam"] == [EVIL_TITLE]
    assert tags["\xa9alb"] == [EVIL_TITLE]
    assert tags["\xa9ART"] == tags["aART"] == ["a=b;c#d\\e"]
    assert tags["\xa9wrt"] == ["-i /etc/passwd"]
    assert tags["\xa9day"] == ["2024"]
    assert tags["\xa9gen"] == ["Audiobook"]
    assert tags["\xa9cmt"] == tags["desc"] == tags["ldes"] == [TAGS.description]
    expected = {"\xa9nam", "\xa9alb", "\xa9ART", "aART", "\xa9wrt", "\xa9day", "\xa9gen", "\xa9cmt", "desc"}
    expected |= {"ldes", "\xa9too", "covr"} | ({"stik"} if fmt == "m4b" else set())
    assert set(tags.keys()) == expected


@pytest.mark.parametrize("fmt", ["flac", "ogg"])
def test_mutagen_reads_the_vorbis_comments(books: Books, fmt: str) -> None:
    mutagen = mutagen_module("mutagen")
    comments = mutagen.File(books[fmt][0]).tags
    values = {k.upper(): v for k, v in comments.items() if not k.upper().startswith("CHAPTER")}
    values.pop("ENCODER")
    values.pop("METADATA_BLOCK_PICTURE", None)
    assert values == {
        "TITLE": [EVIL_TITLE],
        "ALBUM": [EVIL_TITLE],
        "ARTIST": ["a=b;c#d\\e"],
        "ALBUMARTIST": ["a=b;c#d\\e"],
        "COMPOSER": ["-i /etc/passwd"],
        "NARRATOR": ["-i /etc/passwd"],
        "PUBLISHER": ["Back\\slash ends\\"],
        "DATE": ["2024"],
        "LANGUAGE": ["eng"],
        "GENRE": ["Audiobook"],
        "DESCRIPTION": [TAGS.description],
    }


# --- cover -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", OUTPUT_FORMATS)
def test_cover_is_an_attached_picture(books: Books, fmt: OutputFormat) -> None:
    video = [s for s in ffmpeg_streams(books[fmt][0]) if "Video:" in s]
    if not FORMATS[fmt].cover:
        assert video == []
        return
    assert len(video) == 1
    assert "mjpeg" in video[0]
    assert "400x400" in video[0]
    assert "(attached pic)" in video[0]


def test_mutagen_finds_the_cover_bytes(books: Books, cover_jpeg: bytes) -> None:
    mutagen = mutagen_module("mutagen")
    flac = mutagen_module("mutagen.flac")
    (apic,) = mutagen.File(books["mp3"][0]).tags.getall("APIC")
    assert (apic.type, apic.mime, apic.data) == (3, "image/jpeg", cover_jpeg)
    for fmt in ("m4a", "m4b"):
        (covr,) = mutagen.File(books[fmt][0]).tags["covr"]
        assert bytes(covr) == cover_jpeg
    (picture,) = flac.FLAC(books["flac"][0]).pictures
    assert (picture.type, picture.mime, picture.data) == (3, "image/jpeg", cover_jpeg)
    (block,) = mutagen.File(books["ogg"][0]).tags["METADATA_BLOCK_PICTURE"]
    picture = flac.Picture(base64.b64decode(block))
    assert (picture.type, picture.mime, picture.width, picture.height) == (3, "image/jpeg", 400, 400)
    assert picture.data == cover_jpeg


# --- limits, lengths and failures ------------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "embedded"), [("mp3", 255), ("flac", 999), ("m4b", 1001)])
def test_chapter_limits(tmp_path: Path, fmt: OutputFormat, embedded: int) -> None:
    chunk = tmp_path / "c.wav"
    write_wav_atomic(chunk, tone(440.0, 441), SR)
    pieces = [StitchPiece(str(chunk), "none", i, samples=441) for i in range(1001)]
    out = tmp_path / f"many{FORMATS[fmt].extension}"
    result = stitch(pieces, out, fmt, SR)
    assert len(result.chapters) == 1001
    assert result.embedded_chapters == embedded
    _, chapters = ffmpeg_metadata(out)
    assert len(chapters) == embedded
    assert chapters[-1]["title"] == f"Chapter {embedded}"
    if fmt == "mp3":
        id3 = mutagen_module("mutagen.id3")
        tags = id3.ID3(out)
        (toc,) = tags.getall("CTOC")
        assert len(toc.child_element_ids) == len(tags.getall("CHAP")) == 255


def test_no_tags_no_titles_and_no_cover(tmp_path: Path, chunk_dir: Path) -> None:
    out = tmp_path / "plain.mp3"
    result = stitch(pieces_in(chunk_dir), out, "mp3", SR, PAUSES)
    tags, chapters = ffmpeg_metadata(out)
    assert set(tags) == {"encoder"}
    assert [c["title"] for c in chapters] == ["Chapter 1", "Chapter 2", "Chapter 3"]
    assert [m.title for m in result.chapters] == ["Chapter 1", "Chapter 2", "Chapter 3"]
    assert not [s for s in ffmpeg_streams(out) if "Video:" in s]


def test_longest_tags_are_stored_whole(tmp_path: Path, chunk_dir: Path) -> None:
    long = BookTags(title="t" * 999 + "\\", description="d\n" * 2_000)
    out = tmp_path / "long.flac"
    stitch(pieces_in(chunk_dir)[:1], out, "flac", SR, tags=long, chapter_titles={0: "c" * 5_000})
    tags, chapters = ffmpeg_metadata(out)
    assert tags["title"] == long.title
    assert tags["comment"] == long.description  # ffmpeg reads DESCRIPTION back as comment
    assert chapters[0]["title"] == "c" * 999 + "\u2026"


def test_nul_characters_are_removed(tmp_path: Path, chunk_dir: Path) -> None:
    out = tmp_path / "nul.m4a"
    stitch(pieces_in(chunk_dir)[:1], out, "m4a", SR, tags=BookTags(title="a\0b"), chapter_titles={0: "\0c"})
    tags, chapters = ffmpeg_metadata(out)
    assert tags["title"] == "ab"
    assert chapters[0]["title"] == "c"


def test_declared_lengths_are_used_and_checked(tmp_path: Path, chunk_dir: Path) -> None:
    declared = [
        StitchPiece(p.path, p.pause_after, p.chapter, samples=n)
        for p, n in zip(pieces_in(chunk_dir), LENGTHS, strict=True)
    ]
    read = stitch(pieces_in(chunk_dir), tmp_path / "a.flac", "flac", SR, PAUSES)
    given = stitch(declared, tmp_path / "b.flac", "flac", SR, PAUSES)
    assert given.chapters == read.chapters

    wrong = [*declared[:3], StitchPiece(declared[3].path, "none", 2, samples=LENGTHS[3] + 1)]
    with pytest.raises(StitchError, match=r"3\.wav has 13001 samples; 13002 were planned"):
        stitch(wrong, tmp_path / "c.m4b", "m4b", SR, tags=TAGS)
    assert sorted(os.listdir(tmp_path)) == ["a.flac", "b.flac"]  # no output, no temp files


def test_ffmpeg_failure_leaves_no_temp_files(tmp_path: Path, cover_jpeg: bytes) -> None:
    # ffmpeg's FLAC encoder refuses a 1 Hz stream; the metadata and cover files go with the output.
    chunk = tmp_path / "c.wav"
    write_wav_atomic(chunk, np.full(10, 0.1, np.float32), 1)
    with pytest.raises(StitchError, match="ffmpeg"):
        stitch(
            [StitchPiece(str(chunk), "none", 0)],
            tmp_path / "book.flac",
            "flac",
            1,
            tags=TAGS,
            cover=load_cover(cover_jpeg),
        )
    assert os.listdir(tmp_path) == ["c.wav"]


def test_opus_bitrate_is_capped_and_rate_resampled(tmp_path: Path, chunk_dir: Path) -> None:
    out = tmp_path / "loud.opus"
    stitch(pieces_in(chunk_dir)[:1], out, "ogg", SR, bitrate_kbps=320)  # libopus takes 256 kb/s at most
    (audio,) = [s for s in ffmpeg_streams(out) if "Audio:" in s]
    assert "opus" in audio
    assert "48000 Hz" in audio


def test_cover_type_is_checked(tmp_path: Path, chunk_dir: Path) -> None:
    with pytest.raises(TypeError, match="load_cover"):
        stitch(pieces_in(chunk_dir), tmp_path / "x.mp3", "mp3", SR, cover=b"\xff\xd8\xff")  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


def test_cover_object_is_what_load_cover_returns(cover_jpeg: bytes) -> None:
    cover = load_cover(cover_jpeg)
    assert isinstance(cover, Cover)
    assert (cover.mime_type, cover.width, cover.height, cover.depth) == ("image/jpeg", 400, 400, 24)

"""A book joined from chapter files built one by one (no second encode) plays every chunk where its
subtitles, manifest and chapter marks say: located in the decoded book, for every format that joins."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.unit.audio.test_deliverables import chapter_seconds, ffmpeg_metadata
from worker.audio import BookTags, Pauses, write_wav_atomic
from worker.audio.ffmpeg import decode_to_pcm, ffmpeg_exe
from worker.audio.formats import OutputFormat
from worker.audio.join import joinable, packet_seconds
from worker.audio.presets import Delivery
from worker.audio.wavcues import read_cues
from worker.jobs.deliver import BookInfo, ChapterBuild, ChunkRow, build_chapter, build_from_chapters

RATE = 24_000
CHAPTERS = [3, 1, 4, 2]  # chunks per chapter
TITLES = {0: "One", 1: "Two; [CHAPTER] =#", 2: "", 3: "Four"}
TOLERANCE = 0.01  # seconds: where a chunk's tone burst starts in the decoded book, against the manifest


def _rows(folder: Path) -> list[ChunkRow]:
    """Chunks of different lengths, each a tone burst that starts with the chunk (no fade to blur it)."""
    rows = []
    seq = 0
    rng = np.random.default_rng(7)
    for chapter, count in enumerate(CHAPTERS):
        for _ in range(count):
            seconds = float(rng.uniform(0.4, 1.3))
            t = np.arange(round(seconds * RATE)) / RATE
            wave = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
            path = folder / f"{seq}.wav"
            write_wav_atomic(path, wave, RATE)
            pause = "chapter" if _ == count - 1 else "sentence"
            rows.append(ChunkRow(seq, chapter, str(path), pause, None, f"Chunk {seq}.", f"Chunk {seq}.", "v"))
            seq += 1
    return rows


def _packet_sizes(path: str | Path) -> list[int]:
    """The sizes of the audio packets of ``path``, read by ffmpeg without decoding."""
    cmd = [ffmpeg_exe(), "-v", "error", "-i", str(path), "-map", "0:a:0", "-c", "copy", "-f", "framecrc", "-"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [int(line.split(",")[4]) for line in out.splitlines() if line[:1].isdigit()]


def _onsets(samples: np.ndarray, rate: int) -> list[float]:
    """Where each burst starts: the first loud sample after at least 0.2 s of quiet."""
    loud = np.flatnonzero(np.abs(samples) > 0.2)
    gaps = np.flatnonzero(np.diff(loud) > 0.2 * rate)
    return [loud[0] / rate] + [loud[g + 1] / rate for g in gaps]


def _build(tmp_path: Path, fmt: OutputFormat, split: str) -> tuple[list[ChapterBuild], object, Path]:
    rows = _rows(tmp_path)
    delivery = Delivery(format=fmt, split=split, mastering=None, bitrate_kbps=96)  # type: ignore[arg-type]
    info = BookInfo(BookTags(title="Joined"), TITLES, None, "en", 1)
    groups: list[list[ChunkRow]] = []
    for row in rows:
        if not groups or groups[-1][-1].chapter != row.chapter:
            groups.append([])
        groups[-1].append(row)

    def folder(n: int) -> Callable[[str], Path]:
        return lambda name: tmp_path / f"chapter-{n}" / name

    builds = [
        build_chapter(
            group,
            delivery,
            folder(n),
            position=n,
            chapters_total=len(groups),
            sample_rate=RATE,
            pauses=Pauses(),
            info=info,
        )
        for n, group in enumerate(groups, start=1)
    ]
    book = tmp_path / f"book.{fmt}"
    done = build_from_chapters(
        builds,
        rows,
        delivery,
        book,
        lambda name: tmp_path / "files" / name,
        sample_rate=RATE,
        pauses=Pauses(),
        info=info,
    )
    return builds, done, book


@pytest.mark.parametrize("fmt", ["mp3", "m4b", "flac", "wav"])
def test_every_chunk_plays_where_the_manifest_says(tmp_path: Path, fmt: OutputFormat) -> None:
    assert joinable(fmt)
    builds, _, book = _build(tmp_path, fmt, "none")
    # each chapter measured its files' joined length when it was built (the join does not read them)
    assert all(b.lengths is not None and len(b.lengths) == len(b.files) for b in builds)
    manifest = json.loads((tmp_path / "files" / "manifest.json").read_text())
    expected = [c["start"] for c in manifest["chunks"]]
    assert len(expected) == sum(CHAPTERS)
    heard = _onsets(decode_to_pcm(book, RATE), RATE)
    assert len(heard) == len(expected)
    worst = max(abs(h - e) for h, e in zip(heard, expected, strict=True))
    assert worst <= TOLERANCE, (fmt, worst)
    # the book is the chapters' packets, not a second encode: the same packets, in order
    files = [f.path for b in builds for f in b.files]
    ours = [size for f in files for size in _packet_sizes(f)]
    if fmt == "wav":  # PCM is re-cut into packets of its own size: the same bytes
        assert sum(_packet_sizes(book)) == sum(ours)
    else:
        assert _packet_sizes(book) == ours
    assert packet_seconds(book) >= sum(b.contents[0] for b in builds)
    # chapter marks read back from the file: at the start of each chapter's packets, with the titles
    _, chapters = ffmpeg_metadata(book)
    marks = [c["title"] for c in chapters]
    assert marks == ["One", "Two; [CHAPTER] =#", "Chapter 3", "Four"]
    starts = [float(chapter_seconds(c)) for c in chapters]
    first_chunk = {m["index"]: m["start"] for m in manifest["chapters"]}
    for start, chapter in zip(starts, manifest["chapters"], strict=True):
        assert start == pytest.approx(first_chunk[chapter["index"]], abs=0.002)
    if fmt == "wav":
        assert [label for _, label in read_cues(book)] == marks


def test_early_chapter_files_are_playable_books_of_their_own(tmp_path: Path) -> None:
    builds, _, _ = _build(tmp_path, "mp3", "none")
    for b in builds:
        (file,) = b.files
        tags, _ = ffmpeg_metadata(Path(file.path))
        assert tags.get("album") == "Joined"
        assert tags.get("track") == f"{b.position}/{len(CHAPTERS)}"
        assert file.duration == pytest.approx(b.contents[0])
        heard = _onsets(decode_to_pcm(file.path, RATE), RATE)
        assert len(heard) == CHAPTERS[b.position - 1]
        assert [p[2] for p in b.placements] == pytest.approx(heard, abs=TOLERANCE)


def test_split_delivery_keeps_the_chapter_files_and_joins_the_book(tmp_path: Path) -> None:
    _, done, book = _build(tmp_path, "mp3", "chapter")
    names = [f.name for f in done.files]  # type: ignore[attr-defined]
    assert [n for n in names if n.startswith("chapter-")] == [f"chapter-{n:03d}.mp3" for n in (1, 2, 3, 4)]
    assert "chapters.zip" in names
    assert book.stat().st_size > 0


def test_ogg_is_encoded_again_not_joined(tmp_path: Path) -> None:
    assert not joinable("ogg")
    _, _, book = _build(tmp_path, "ogg", "none")
    manifest = json.loads((tmp_path / "files" / "manifest.json").read_text())
    heard = _onsets(decode_to_pcm(book, RATE), RATE)
    expected = [c["start"] for c in manifest["chunks"]]
    assert max(abs(h - e) for h, e in zip(heard, expected, strict=True)) <= TOLERANCE

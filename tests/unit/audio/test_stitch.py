"""stitch() with the real bundled ffmpeg: lengths, order, chapters, failures, memory."""

from __future__ import annotations

import gc
import os
import tracemalloc
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import soundfile as sf

from worker.audio import (
    ChapterMark,
    OutputFormat,
    Pauses,
    StitchError,
    StitchPiece,
    apply_fades,
    decode_to_pcm,
    stitch,
    write_wav_atomic,
)

SR = 24_000
TONES = (200.0, 300.0, 400.0, 500.0, 600.0)
KINDS = ("sentence", "paragraph", "none", "chapter", "sentence")
CHAPTERS = (0, 0, 0, 1, 2)
PAUSES = Pauses(sentence=0.35, paragraph=0.8, chapter=2.0)


def tone(hz: float, seconds: float = 0.5) -> npt.NDArray[np.float32]:
    t = np.arange(round(seconds * SR)) / SR
    return apply_fades((0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32), SR)


def dominant_hz(x: npt.NDArray[np.float32]) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return float(np.fft.rfftfreq(x.size, 1.0 / SR)[int(np.argmax(spectrum))])


def make_pieces(directory: Path) -> list[StitchPiece]:
    pieces = []
    for i, (hz, kind, chapter) in enumerate(zip(TONES, KINDS, CHAPTERS, strict=True)):
        path = directory / f"chunk{i}.wav"
        write_wav_atomic(path, tone(hz), SR)
        pieces.append(StitchPiece(path=str(path), pause_after=kind, chapter=chapter))
    return pieces


def layout() -> tuple[list[tuple[int, int]], int]:
    """(start, length) in samples of every chunk, and the total length including pauses."""
    spans = []
    position = 0
    for kind in KINDS:
        spans.append((position, SR // 2))
        position += SR // 2 + round(PAUSES.seconds(kind) * SR)
    return spans, position


@pytest.fixture
def pieces(tmp_path: Path) -> list[StitchPiece]:
    chunks = tmp_path / "chunks"
    chunks.mkdir()
    return make_pieces(chunks)


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_lossless_output_is_sample_exact(
    tmp_path: Path, pieces: list[StitchPiece], fmt: OutputFormat
) -> None:
    out = tmp_path / f"book.{fmt}"
    result = stitch(pieces, out, fmt, SR, PAUSES)

    spans, total = layout()
    assert total == 5 * SR // 2 + round((0.35 + 0.8 + 0 + 2.0 + 0.35) * SR)
    assert result.duration == total / SR
    assert result.bytes == out.stat().st_size
    assert sorted(os.listdir(tmp_path)) == ["book." + fmt, "chunks"]

    info = sf.info(str(out))
    assert (info.format, info.channels, info.samplerate, info.frames) == (fmt.upper(), 1, SR, total)
    decoded = decode_to_pcm(out, SR)
    assert decoded.size == total
    for i, (start, length) in enumerate(spans):
        chunk, _ = sf.read(pieces[i].path, dtype="float32")
        np.testing.assert_array_equal(decoded[start : start + length], chunk)
        assert dominant_hz(decoded[start : start + length]) == pytest.approx(TONES[i], abs=2.0)
        next_start = spans[i + 1][0] if i + 1 < len(spans) else total
        assert not decoded[start + length : next_start].any()  # the pause is digital silence


def test_mp3_output(tmp_path: Path, pieces: list[StitchPiece]) -> None:
    out = tmp_path / "book.mp3"
    result = stitch(pieces, out, "mp3", SR, PAUSES, bitrate_kbps=64)

    spans, total = layout()
    assert result.duration == total / SR
    assert result.bytes == out.stat().st_size
    decoded = decode_to_pcm(out, SR)
    assert abs(decoded.size - total) / SR < 0.1
    margin = SR // 20
    for (start, length), hz in zip(spans, TONES, strict=True):
        segment = decoded[start + margin : start + length - margin]
        assert dominant_hz(segment) == pytest.approx(hz, abs=3.0)
    assert sf.info(str(out)).format == "MP3"


def test_chapter_marks(tmp_path: Path, pieces: list[StitchPiece]) -> None:
    # Marks carry their end, their position in samples and their title too (they are written into files).
    result = stitch(pieces, tmp_path / "book.wav", "wav", SR, PAUSES, chapter_titles={1: "Two"})
    spans, total = layout()
    assert result.chapters == [
        ChapterMark(0, 0.0, spans[3][0] / SR, 0, spans[3][0], "Chapter 1"),
        ChapterMark(1, spans[3][0] / SR, spans[4][0] / SR, spans[3][0], spans[4][0], "Two"),
        ChapterMark(2, spans[4][0] / SR, total / SR, spans[4][0], total, "Chapter 3"),
    ]
    assert result.embedded_chapters == 3  # as cue points with labels
    assert result.chapters[1].start == pytest.approx(3 * 0.5 + 0.35 + 0.8)
    assert result.chapters[2].start == pytest.approx(4 * 0.5 + 0.35 + 0.8 + 2.0)


def test_accepts_any_iterable_and_replaces_existing_output(tmp_path: Path, pieces: list[StitchPiece]) -> None:
    out = tmp_path / "book.wav"
    out.write_bytes(b"old")
    result = stitch((p for p in pieces[:2]), out, "wav", SR, Pauses(sentence=0.1, paragraph=0.2))
    assert result.duration == pytest.approx(1.0 + 0.1 + 0.2)
    assert sf.info(str(out)).frames == round(1.3 * SR)


def test_sample_rate_mismatch_is_a_value_error(tmp_path: Path, pieces: list[StitchPiece]) -> None:
    odd = tmp_path / "chunks" / "odd.wav"
    write_wav_atomic(odd, tone(440.0), 16_000)
    out = tmp_path / "book.flac"
    with pytest.raises(ValueError, match="16000 Hz"):
        stitch([*pieces, StitchPiece(str(odd), "none", 2)], out, "flac", SR)
    assert sorted(os.listdir(tmp_path)) == ["chunks"]


def test_missing_chunk_is_a_stitch_error_and_leaves_nothing(
    tmp_path: Path, pieces: list[StitchPiece]
) -> None:
    out = tmp_path / "book.mp3"
    out.write_bytes(b"previous book")
    missing = StitchPiece(str(tmp_path / "chunks" / "gone.wav"), "none", 1)
    with pytest.raises(StitchError, match=r"gone\.wav is missing"):
        stitch([*pieces[:3], missing, pieces[4]], out, "mp3", SR)
    assert sorted(os.listdir(tmp_path)) == ["book.mp3", "chunks"]
    assert out.read_bytes() == b"previous book"


def test_corrupt_chunk_is_a_stitch_error(tmp_path: Path, pieces: list[StitchPiece]) -> None:
    bad = tmp_path / "chunks" / "bad.wav"
    bad.write_bytes(b"RIFF garbage")
    with pytest.raises(StitchError, match="could not be read"):
        stitch([pieces[0], StitchPiece(str(bad), "none", 0)], tmp_path / "book.wav", "wav", SR)
    assert sorted(os.listdir(tmp_path)) == ["chunks"]


@pytest.mark.parametrize("samples", [10, 2_000_000])
def test_ffmpeg_failure_is_a_stitch_error(tmp_path: Path, samples: int) -> None:
    # ffmpeg's FLAC encoder refuses a 1 Hz stream: it exits with an error, either at the end (short input)
    # or while audio is still being piped to it (long input: the pipe breaks).
    chunk = tmp_path / "c.wav"
    write_wav_atomic(chunk, np.full(samples, 0.1, np.float32), 1)
    with pytest.raises(StitchError, match=r"ffmpeg.*invalid block size"):
        stitch([StitchPiece(str(chunk), "sentence", 0)], tmp_path / "book.flac", "flac", 1)
    assert os.listdir(tmp_path) == ["c.wav"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fmt": "aac"}, "format"),
        ({"fmt": "OGG"}, "format"),
        ({"sample_rate": 0}, "sample_rate"),
        ({"bitrate_kbps": 4}, "bitrate"),
    ],
)
def test_invalid_arguments(
    tmp_path: Path, pieces: list[StitchPiece], kwargs: dict[str, object], match: str
) -> None:
    args: dict[str, object] = {"fmt": "wav", "sample_rate": SR, **kwargs}
    with pytest.raises(ValueError, match=match):
        stitch(pieces, tmp_path / "book.out", **args)  # type: ignore[arg-type]
    assert sorted(os.listdir(tmp_path)) == ["chunks"]


def test_unknown_pause_kind_empty_input_and_scattered_chapters(
    tmp_path: Path, pieces: list[StitchPiece]
) -> None:
    out = tmp_path / "book.wav"
    with pytest.raises(ValueError, match="pause kind"):
        stitch([StitchPiece(pieces[0].path, "comma", 0)], out, "wav", SR)
    with pytest.raises(ValueError, match="no pieces"):
        stitch([], out, "wav", SR)
    scattered = [pieces[0], StitchPiece(pieces[1].path, "none", 1), StitchPiece(pieces[2].path, "none", 0)]
    with pytest.raises(ValueError, match="not contiguous"):
        stitch(scattered, out, "wav", SR)
    assert sorted(os.listdir(tmp_path)) == ["chunks"]


def test_pauses() -> None:
    pauses = Pauses()
    assert pauses.seconds("none") == 0.0
    assert pauses.seconds("sentence") == 0.35
    assert pauses.seconds("paragraph") == 0.8
    assert pauses.seconds("chapter") == 2.0
    with pytest.raises(ValueError, match="unknown pause kind"):
        pauses.seconds("seconds")
    with pytest.raises(ValueError, match="chapter"):
        Pauses(chapter=-1.0)
    with pytest.raises(ValueError, match="sentence"):
        Pauses(sentence=float("nan"))
    with pytest.raises(ValueError, match="paragraph"):
        Pauses(paragraph="1")  # type: ignore[arg-type]
    assert Pauses(chapter=3).seconds("chapter") == 3.0


def test_empty_chunks_are_allowed(tmp_path: Path, pieces: list[StitchPiece]) -> None:
    # A chunk trimmed to nothing (the engine produced only silence) still gets its pause.
    empty = tmp_path / "chunks" / "empty.wav"
    write_wav_atomic(empty, np.zeros(0, np.float32), SR)
    out = tmp_path / "book.flac"
    result = stitch([pieces[0], StitchPiece(str(empty), "paragraph", 0), pieces[1]], out, "flac", SR, PAUSES)
    expected = SR // 2 + round(0.35 * SR) + round(0.8 * SR) + SR // 2 + round(0.8 * SR)
    assert result.duration == expected / SR
    assert decode_to_pcm(out, SR).size == expected


def _traced_peak(pieces: list[StitchPiece], out: Path) -> int:
    gc.collect()  # garbage left by earlier tests is not this stitch's memory
    tracemalloc.start()
    try:
        stitch(pieces, out, "wav", SR, Pauses(sentence=0.3, paragraph=0.6, chapter=1.5))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_number_of_pieces(tmp_path: Path) -> None:
    chunk_dir = tmp_path / "chunks"
    chunk_dir.mkdir()
    rng = np.random.default_rng(0)
    kinds = ("none", "sentence", "paragraph", "chapter")
    pieces = []
    for i in range(400):
        path = chunk_dir / f"{i:04d}.wav"
        write_wav_atomic(path, (0.2 * rng.standard_normal(SR)).astype(np.float32), SR)
        pieces.append(StitchPiece(str(path), kinds[i % 4], i // 40))

    # One untraced run first: what is done once per process (imports on first use, codec tables,
    # caches) must not count as growth with the number of pieces.
    stitch(pieces, tmp_path / "warm.wav", "wav", SR, Pauses(sentence=0.3, paragraph=0.6, chapter=1.5))
    small = _traced_peak(pieces[:40], tmp_path / "small.wav")
    large = _traced_peak(pieces, tmp_path / "large.wav")

    print(f"tracemalloc peak: 40 pieces {small / 1e6:.2f} MB, 400 pieces {large / 1e6:.2f} MB")
    assert sf.info(str(tmp_path / "large.wav")).frames > 400 * SR
    assert large < 20 * 1024 * 1024
    assert large < 1.5 * small + 256 * 1024


def test_an_exact_pause_in_seconds_is_that_many_samples_of_silence(
    tmp_path: Path, pieces: list[StitchPiece]
) -> None:
    """A script's break (``<!-- break: 1.25s -->``, SSML ``<break time>``) is stitched exactly."""
    first, second = pieces[0], pieces[1]
    timed = [StitchPiece(first.path, 1.25, 0), StitchPiece(second.path, 0.0, 0)]
    out = tmp_path / "breaks.flac"
    result = stitch(timed, out, "flac", SR, PAUSES)
    pcm = decode_to_pcm(out, SR)
    assert pcm.size == SR // 2 + round(1.25 * SR) + SR // 2
    assert result.duration == pcm.size / SR
    gap = pcm[SR // 2 : SR // 2 + round(1.25 * SR)]
    assert np.abs(gap).max() == 0  # silence, all of it
    assert np.abs(pcm[SR // 2 + round(1.25 * SR) :]).max() > 0.1  # then the second chunk, at once
    with pytest.raises(ValueError, match="finite number of seconds"):
        stitch([StitchPiece(first.path, -1.0, 0)], tmp_path / "bad.flac", "flac", SR, PAUSES)

"""add_cues / read_cues: chapter cue points in WAV files, checked by a separate RIFF walker, by soundfile
(same samples) and by ffmpeg (which reads cue points and labels as chapters)."""

from __future__ import annotations

import logging
import os
import re
import struct
import subprocess
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import soundfile as sf

from worker.audio import Pauses, StitchPiece, apply_fades, ffmpeg_exe, stitch, write_wav_atomic
from worker.audio.wavcues import MAX_LABEL_BYTES, add_cues, read_cues

SR = 22_050
HOSTILE = [
    "Chapter 1",
    "",
    "line\nbreak\r\nand\rmore",
    "a\0b\0",
    "=;#\\",
    "x\\",
    "[CHAPTER]\nTIMEBASE=1/1\nSTART=0\ntitle=evil",
    "LIST\x04\x00\x00\x00adtl",
    "  spaced  ",
    "Ünïcödé — 終わり 🎧",
    "\ud800lone",
]


def riff_chunks(path: Path) -> list[tuple[bytes, bytes]]:
    """Every top-level chunk (id, body) of a RIFF/WAVE file, asserting that the sizes add up exactly:
    each chunk with its pad byte, the RIFF size and the file length (written apart from the module)."""
    raw = path.read_bytes()
    assert raw[:4] == b"RIFF"
    assert raw[8:12] == b"WAVE"
    riff_size = int.from_bytes(raw[4:8], "little")
    assert 8 + riff_size == len(raw)
    chunks = []
    pos = 12
    while pos < len(raw):
        cid, size = raw[pos : pos + 4], int.from_bytes(raw[pos + 4 : pos + 8], "little")
        assert pos + 8 + size <= len(raw), f"{cid!r} overruns the file"
        chunks.append((cid, raw[pos + 8 : pos + 8 + size]))
        if size % 2:
            assert raw[pos + 8 + size] == 0, "pad byte"
        pos += 8 + size + size % 2
    assert pos == len(raw)
    return chunks


def spec_cues(path: Path) -> list[tuple[int, str]]:
    """The cue points and labels as the RIFF specification lays them out, decoded here independently."""
    chunks = dict(riff_chunks(path))
    cue = chunks[b"cue "]
    (count,) = struct.unpack("<I", cue[:4])
    assert len(cue) == 4 + 24 * count
    offsets = {}
    for n in range(count):
        name, position, fcc, chunk_start, block_start, offset = struct.unpack(
            "<II4sIII", cue[4 + 24 * n : 28 + 24 * n]
        )
        assert (name, fcc, chunk_start, block_start) == (n + 1, b"data", 0, 0)
        assert position == offset
        offsets[name] = offset
    (adtl,) = [body for cid, body in riff_chunks(path) if cid == b"LIST" and body[:4] == b"adtl"]
    labels = {}
    pos = 4
    while pos < len(adtl):
        sid, size = adtl[pos : pos + 4], int.from_bytes(adtl[pos + 4 : pos + 8], "little")
        text = adtl[pos + 12 : pos + 8 + size]
        assert sid == b"labl"
        assert text.endswith(b"\0")
        assert b"\0" not in text[:-1]
        labels[int.from_bytes(adtl[pos + 8 : pos + 12], "little")] = text[:-1].decode("utf-8")
        pos += 8 + size + size % 2
    assert pos == len(adtl)
    assert sorted(labels) == sorted(offsets)
    return [(offsets[n], labels[n]) for n in sorted(offsets)]


def noise(frames: int, channels: int = 1) -> npt.NDArray[np.int16]:
    return np.random.default_rng(frames).integers(-20_000, 20_000, (frames, channels), dtype=np.int16)


def chunk(cid: bytes, body: bytes, *, pad: bool = True) -> bytes:
    return cid + struct.pack("<I", len(body)) + body + (b"\0" if pad and len(body) % 2 else b"")


def handmade_wav(path: Path, samples: npt.NDArray[np.int16], *chunks: bytes, data_first: bool = True) -> None:
    """A 16-bit PCM WAV with ``chunks`` after (or before) its data chunk."""
    channels = samples.shape[1]
    fmt = chunk(b"fmt ", struct.pack("<HHIIHH", 1, channels, SR, SR * 2 * channels, 2 * channels, 16))
    data = chunk(b"data", samples.astype("<i2").tobytes())
    extra = b"".join(chunks)
    body = b"WAVE" + fmt + (data + extra if data_first else extra + data)
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)


def odd_info() -> bytes:
    """A LIST/INFO chunk of odd size: its last sub-chunk (5 bytes) has no pad byte inside the list."""
    return chunk(b"LIST", b"INFO" + chunk(b"INAM", b"Tome\0") + chunk(b"IART", b"abc\0x", pad=False))


def test_round_trip_keeps_the_file_valid_and_the_samples(tmp_path: Path) -> None:
    path = tmp_path / "book.wav"
    samples = noise(10_001, channels=2)
    sf.write(path, samples, SR, subtype="PCM_16")
    cues = [(0, "Opening"), (4_000, "Two"), (10_001, "At the very end")]

    assert add_cues(path, cues) is True

    assert read_cues(path) == cues
    assert spec_cues(path) == cues
    assert [cid for cid, _ in riff_chunks(path)][-2:] == [b"cue ", b"LIST"]
    again, rate = sf.read(path, dtype="int16", always_2d=True)
    assert rate == SR
    np.testing.assert_array_equal(again, samples)


@pytest.mark.parametrize("data_first", [True, False])
def test_odd_sized_chunks_and_data_not_last(tmp_path: Path, data_first: bool) -> None:
    path = tmp_path / "odd.wav"
    samples = noise(777)
    handmade_wav(path, samples, odd_info(), chunk(b"junk", b"123"), data_first=data_first)
    before = riff_chunks(path)

    assert add_cues(path, [(0, "A"), (700, "Bé")])

    assert riff_chunks(path)[: len(before)] == before  # the existing chunks are untouched
    assert spec_cues(path) == read_cues(path) == [(0, "A"), (700, "Bé")]
    np.testing.assert_array_equal(sf.read(path, dtype="int16", always_2d=True)[0], samples)


def test_last_chunk_without_its_pad_byte_gets_one(tmp_path: Path) -> None:
    path = tmp_path / "nopad.wav"
    handmade_wav(path, noise(100), chunk(b"note", b"odd", pad=False))
    assert path.stat().st_size % 2 == 1

    assert add_cues(path, [(50, "half")])

    assert read_cues(path) == spec_cues(path) == [(50, "half")]
    assert dict(riff_chunks(path))[b"note"] == b"odd"


def test_hostile_labels_are_stored_literally(tmp_path: Path) -> None:
    path = tmp_path / "labels.wav"
    sf.write(path, np.zeros(1_000, np.int16), SR, subtype="PCM_16")
    cues = [(n * 10, label) for n, label in enumerate(HOSTILE)]

    assert add_cues(path, cues)

    expected = [(offset, label.replace("\0", "").replace("\ud800", "\ufffd")) for offset, label in cues]
    assert read_cues(path) == spec_cues(path) == expected


def test_long_labels_are_cut_between_characters(tmp_path: Path) -> None:
    path = tmp_path / "long.wav"
    sf.write(path, np.zeros(100, np.int16), SR, subtype="PCM_16")
    labels = ["é" * 3_000, "ab" + "€" * 2_000, "x" * MAX_LABEL_BYTES, "🎧" * 1_000]

    assert add_cues(path, [(0, label) for label in labels])

    stored = [label for _, label in spec_cues(path)]
    assert stored == ["é" * 2_000, "ab" + "€" * 1_332, "x" * MAX_LABEL_BYTES, "🎧" * 1_000]


@pytest.mark.parametrize(
    "cues",
    [
        [(0, "ok"), (1_001, "one past the end")],
        [(-1, "before the start")],
        [(True, "not a number")],
        [(2**32, "huge")],
        [],
    ],
)
def test_offsets_outside_the_data_are_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cues: list[tuple[int, str]]
) -> None:
    path = tmp_path / "short.wav"
    sf.write(path, np.zeros(1_000, np.int16), SR, subtype="PCM_16")
    before = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="worker.audio.wavcues"):
        assert add_cues(path, cues) is False
    assert path.read_bytes() == before
    assert "no chapter cues added" in caplog.text


def riff(body: bytes, tag: bytes = b"RIFF") -> bytes:
    return tag + struct.pack("<I", len(body)) + body


PCM_FMT = chunk(b"fmt ", struct.pack("<HHIIHH", 1, 1, SR, 2 * SR, 2, 16))


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"ID3\x03\x00\x00\x00\x00\x00\x00 not a wav at all", "not a RIFF/WAVE file"),
        (b"", "not a RIFF/WAVE file"),
        (riff(b"WAVE" + PCM_FMT + chunk(b"data", b"\0" * 8), tag=b"RF64"), "not a RIFF/WAVE file"),
        (riff(b"WAVE" + PCM_FMT + chunk(b"data", b"\0" * 8), tag=b"RIFX"), "not a RIFF/WAVE file"),
        (riff(b"AVI " + chunk(b"data", b"\0" * 8)), "not a RIFF/WAVE file"),
        (riff(b"WAVE" + PCM_FMT + chunk(b"data", b"\0" * 8))[:-3], "unfinished"),
        (riff(b"WAVE" + PCM_FMT + chunk(b"data", b"\0" * 8)) + b"tail", "follow its RIFF chunk"),
        (riff(b"WAVE" + PCM_FMT + chunk(b"data", b"\0" * 8) + b"xy"), "stray bytes"),
        (riff(b"WAVE" + chunk(b"data", b"\0" * 8)), "one fmt and one data"),
        (riff(b"WAVE" + PCM_FMT), "one fmt and one data"),
        (
            riff(
                b"WAVE"
                + chunk(b"fmt ", struct.pack("<HHIIHH", 0x55, 1, SR, 2 * SR, 2, 16))
                + chunk(b"data", b"\0" * 8)
            ),
            "not PCM",
        ),
        (
            riff(b"WAVE" + PCM_FMT + chunk(b"data", b"\0" * 8) + chunk(b"cue ", struct.pack("<I", 0))),
            "cue chunk",
        ),
        (riff(b"WAVE" + PCM_FMT + chunk(b"data", b"\0" * 8) + chunk(b"LIST", b"adtl")), "LIST/adtl"),
    ],
)
def test_files_that_cannot_take_cues_are_left_unchanged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, reason: str
) -> None:
    path = tmp_path / "other.wav"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="worker.audio.wavcues"):
        assert add_cues(path, [(0, "one")]) is False
    assert path.read_bytes() == content
    assert reason in caplog.text


def test_second_add_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "twice.wav"
    sf.write(path, np.zeros(100, np.int16), SR, subtype="PCM_16")
    assert add_cues(path, [(0, "first")])
    after = path.read_bytes()
    assert not add_cues(path, [(10, "second")])
    assert path.read_bytes() == after
    assert read_cues(path) == [(0, "first")]


def test_a_file_that_would_outgrow_riff_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "huge.wav"
    data_size = 0xFFFF_FFFF - 4 - len(PCM_FMT) - 8 - 40  # room for 40 bytes more: not for a cue chunk
    data_size -= data_size % 2
    head = b"WAVE" + PCM_FMT + b"data" + struct.pack("<I", data_size)
    with path.open("wb") as f:
        f.write(b"RIFF" + struct.pack("<I", len(head) + data_size) + head)
        f.truncate(8 + len(head) + data_size)  # sparse: no 4 GiB written
    if path.stat().st_blocks * 512 > 1 << 20:
        pytest.skip("this file system does not keep files sparse")
    with caplog.at_level(logging.WARNING, logger="worker.audio.wavcues"):
        assert add_cues(path, [(0, "x")]) is False
    assert "4 GiB" in caplog.text
    assert path.stat().st_size == 8 + len(head) + data_size


def test_a_failed_write_puts_the_file_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "fail.wav"
    sf.write(path, noise(500), SR, subtype="PCM_16")
    before = path.read_bytes()

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        add_cues(path, [(0, "x")])
    assert path.read_bytes() == before


def test_a_crash_before_the_header_is_patched_leaves_a_playable_file(tmp_path: Path) -> None:
    path = tmp_path / "crash.wav"
    samples = noise(3_000)
    handmade_wav(path, samples, odd_info())
    original = path.read_bytes()
    assert add_cues(path, [(0, "one"), (1_500, "two")])
    cued = path.read_bytes()
    for cut in (len(original) + 3, len(original) + 40, len(cued) - 1, len(cued)):
        crashed = tmp_path / f"crash{cut}.wav"
        crashed.write_bytes(original[:8] + cued[8:cut])  # new chunks (or part of them), old RIFF size
        np.testing.assert_array_equal(sf.read(crashed, dtype="int16", always_2d=True)[0], samples)
        assert not add_cues(crashed, [(0, "again")])  # refused, not piled on


def ffmpeg_chapters(path: Path) -> list[tuple[str, int, str]]:
    """(time base, start, title) of every chapter ffmpeg reads from ``path`` (its own WAV reader)."""
    cmd = [ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-i", str(path), "-f", "ffmetadata", "-"]
    text = subprocess.run(cmd, capture_output=True, check=True).stdout.decode("utf-8")
    out = []
    for section in text.split("[CHAPTER]\n")[1:]:
        base = re.search(r"^TIMEBASE=(\S+)$", section, re.M)
        start = re.search(r"^START=(\d+)$", section, re.M)
        title = re.search(r"^title=((?:[^\\\n]|\\.)*)$", section, re.M | re.S)
        assert base
        assert start
        assert title
        out.append((base[1], int(start[1]), re.sub(r"\\(.)", r"\1", title[1], flags=re.S)))
    return out


def tone(hz: float, frames: int) -> npt.NDArray[np.float32]:
    t = np.arange(frames) / SR
    return apply_fades((0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32), SR)


@pytest.mark.parametrize("output_rate", [None, 48_000])
def test_stitched_wav_carries_the_chapter_starts(tmp_path: Path, output_rate: int | None) -> None:
    chunks = tmp_path / "chunks"
    chunks.mkdir()
    layout = [(5_001, "sentence", 0), (3_333, "chapter", 0), (4_410, "paragraph", 1), (2_205, "none", 2)]
    pieces = []
    for i, (frames, kind, chapter) in enumerate(layout):
        write_wav_atomic(chunks / f"{i}.wav", tone(220.0 * (i + 1), frames), SR)
        pieces.append(StitchPiece(str(chunks / f"{i}.wav"), kind, chapter))
    out = tmp_path / "book.wav"
    titles = {1: "Two = [CHAPTER]\nthree;#", 2: ""}

    result = stitch(
        pieces, out, "wav", SR, Pauses(), chapter_titles=titles, head_seconds=0.25, output_rate=output_rate
    )

    assert sorted(os.listdir(tmp_path)) == ["book.wav", "chunks"]  # no temp file left
    rate = output_rate or SR
    starts = [mark.start_sample * rate / SR for mark in result.chapters]
    assert [round(s) for s in starts] == [s for s, _ in read_cues(out)]
    if output_rate is None:  # exact: the cue points are the planned starts
        assert [s for s, _ in read_cues(out)] == [m.start_sample for m in result.chapters]
        assert result.chapters[1].start_sample == round(0.25 * SR) + 5_001 + 3_333 + 2 * SR + round(0.35 * SR)
    assert [label for _, label in read_cues(out)] == ["Chapter 1", titles[1], "Chapter 3"]
    assert spec_cues(out) == read_cues(out)
    assert ffmpeg_chapters(out) == [(f"1/{rate}", s, t) for s, t in read_cues(out)]
    info = sf.info(str(out))
    assert (info.samplerate, info.frames) == (rate, round(result.duration * rate))

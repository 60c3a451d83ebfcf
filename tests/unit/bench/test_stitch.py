"""bench/stitch.py at a tiny length: the book it writes, the cases it runs and the table it reports."""

from __future__ import annotations

import json
from pathlib import Path

import soundfile as sf

from bench.stitch import MANIFEST, SAMPLE_RATE, Chunk, book_seconds, make_book, prefix, run_stitch_bench
from tests.support.factories import table_cells

COLUMNS = [
    "case",
    "hours",
    "chunks",
    "wall s",
    "speed",
    "Python peak MB",
    "ffmpeg peak MB",
    "total MB",
    "note",
]


def test_book_has_the_asked_length_in_chunks_of_2_to_20_seconds(tmp_path: Path) -> None:
    book = make_book(tmp_path, 0.05)

    extra = sum(c.samples for c in book) - 180 * SAMPLE_RATE
    assert 0 <= extra < SAMPLE_RATE  # the last chunk is cut to fit, but kept at least 1 s long
    assert all(SAMPLE_RATE <= c.samples <= 20 * SAMPLE_RATE for c in book)
    assert [c.chapter for c in book] == sorted(c.chapter for c in book)
    assert {c.chapter for c in book} == set(range(book[-1].chapter + 1))
    assert [c.pause for c in book if c.pause == "chapter"] == ["chapter"] * (book[-1].chapter + 1)
    info = sf.info(str(tmp_path / book[3].name))
    assert (info.samplerate, info.channels, info.subtype, info.frames) == (
        SAMPLE_RATE,
        1,
        "PCM_16",
        book[3].samples,
    )
    x, _ = sf.read(str(tmp_path / book[3].name), dtype="float32")
    assert 0.1 < float(abs(x).max()) <= 0.5  # audible, not clipped
    assert float((abs(x) < 1e-3).mean()) < 0.5  # mostly sound, with gaps

    manifest = json.loads((tmp_path / MANIFEST).read_text())
    (tmp_path / book[0].name).unlink()
    assert make_book(tmp_path, 0.05) == book  # reused, not rewritten
    assert not (tmp_path / book[0].name).exists()
    assert len(manifest["chunks"]) == len(book)


def test_prefix_and_book_seconds() -> None:
    chunks = [Chunk(f"{i}.wav", 10 * SAMPLE_RATE, 0, "sentence") for i in range(10)]
    assert len(prefix(chunks, 30 / 3600)) == 3
    assert len(prefix(chunks, 0.0)) == 1
    assert book_seconds(chunks[:2]) == 2 * (10 + 0.35)


def test_tiny_run_reports_every_case_without_problems(tmp_path: Path) -> None:
    problems, lines = run_stitch_bench(tmp_path, 0.02)

    assert problems == []
    header = lines.index("| " + " | ".join(COLUMNS) + " |")
    assert lines[header + 1] == "|" + "---|" * len(COLUMNS)
    rows = []
    for line in lines[header + 2 :]:
        if not line:
            break
        rows.append(table_cells(line))
    assert all(len(row) == len(COLUMNS) for row in rows)
    cases = [row[0] for row in rows]
    assert cases.count("Tome stitch -> MP3") == 2  # a tenth of the book, then all of it
    assert cases.count("Tome stitch -> M4B") == 2  # the probe, then all of it (no cap at this length)
    assert cases.count("pydub += then export MP3") == 2
    for row in rows:
        wall, speed = float(row[3]), float(row[4].removesuffix("x"))
        python_mb, ffmpeg_mb, total_mb = (float(v) for v in row[5:8])
        assert wall > 0
        assert speed > 1
        assert 30 < python_mb < 1000
        # ffmpeg's memory is sampled every 50 ms: at this tiny length one may end before it is sampled
        assert 0 <= ffmpeg_mb < 1000
        assert abs(total_mb - python_mb - ffmpeg_mb) <= 1
    assert max(float(row[6]) for row in rows) > 5  # but not all of them
    assert float(rows[1][1]) == round(book_seconds(make_book(tmp_path / "chunks-0.02h", 0.02)) / 3600, 2)
    text = "\n".join(lines)
    assert "EXTRAPOLATED" not in text
    assert "Tome's peak RSS (Python + ffmpeg)" in text
    assert not [p for p in (tmp_path / "out").iterdir() if p.suffix in (".mp3", ".m4b")]  # removed

"""bench/storage_stitch.py at a tiny length: both backends stitch both books, and the table says so."""

from __future__ import annotations

from bench.storage_stitch import run_storage_stitch_bench


def test_both_backends_stitch_both_books_and_report_their_peak_memory() -> None:
    problems, lines = run_storage_stitch_bench(minutes=0.5)
    rows = [line.split() for line in lines[1:5]]
    assert [(row[0], row[1]) for row in rows] == [
        ("local", "short"),
        ("local", "10x"),
        ("s3", "short"),
        ("s3", "10x"),
    ]
    for row in rows:
        chunks, audio_min, peak_mb = int(row[2]), float(row[3]), float(row[5])
        assert chunks >= 1
        assert audio_min > 0
        assert 20 < peak_mb < 2000  # a Python process's VmHWM, read back
    short, long = float(rows[0][3]), float(rows[1][3])
    assert 6 < long / short < 12  # about ten times (whole chunks of 5-15 s)
    assert lines[5].startswith("short: S3 costs")
    assert all(p.startswith("storage stitch memory not flat") for p in problems)

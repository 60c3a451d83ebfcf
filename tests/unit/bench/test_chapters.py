"""bench/chapters.py on a tiny book: the book it writes, the checks it makes, and a run on real workers
whose figures must agree with each other."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench.chapters import COLUMNS, ChapterRun, book, chapters_for, problems_of, run_chapters_bench
from tests.support.factories import table_cells
from worker.script import make_chunks, parse_document

GOOD = ChapterRun(
    engine="espeak",
    workers="1 worker x 2",
    words=1000,
    chapters=3,
    chunks=16,
    audio_seconds=400.0,
    status="succeeded",
    error=None,
    queued_s=0.5,
    first_chapter_s=2.0,
    last_chapter_s=4.0,
    rendered_s=3.0,
    wall_s=5.0,
    ready_before_book=3,
)


def test_book_has_the_asked_words_and_chapters_in_one_chunk_a_paragraph() -> None:
    text = book(3000, 4)

    document = parse_document(text, "markdown")
    assert [c.title for c in document.chapters] == [f"Chapter {n}" for n in range(1, 5)]
    words = len(text.split()) - 3 * 4  # less the headings
    assert 3000 <= words < 3000 + 4 * 15  # each chapter's last sentence may overrun its share
    paragraphs = [p for p in text.split("\n\n") if not p.startswith("#")]
    chunks = make_chunks(document.chapters, 600)
    assert len(chunks) == len(paragraphs) + 4  # a heading is read as a chunk of its own
    assert book(3000, 4) == text  # seeded
    assert chapters_for(20_000) == 12
    assert chapters_for(100) == 2


def test_problems_of_a_run() -> None:
    assert problems_of(GOOD) == []
    assert GOOD.ratio == pytest.approx(5 / 3)
    assert GOOD.tail_s == pytest.approx(2.0)

    failed = problems_of(dataclasses.replace(GOOD, status="failed", error="boom"))
    assert failed == ["chapters (espeak): the job ended failed: boom"]
    late = problems_of(
        dataclasses.replace(GOOD, first_chapter_s=5.0, last_chapter_s=5.0, ready_before_book=0)
    )
    assert any("no chapter was ready before the book" in p for p in late)
    assert any("0 of 3 chapters ready" in p for p in late)
    assert problems_of(
        dataclasses.replace(GOOD, first_chapter_s=None, last_chapter_s=None, ready_before_book=0)
    )
    assert problems_of(dataclasses.replace(GOOD, chapters=0, ready_before_book=0))
    assert problems_of(dataclasses.replace(GOOD, rendered_s=None))


@pytest.mark.e2e
def test_tiny_run_on_real_workers_reports_consistent_figures(tmp_path: Path) -> None:
    """Both cases: espeak on one worker, espeak-paced (fast here) on a render worker and a CPU worker."""
    problems, lines, summary = run_chapters_bench(tmp_path, 900, chapters=3, paced_seconds_per_chunk=0.02)

    assert problems == []
    header = lines.index("| " + " | ".join(COLUMNS) + " |")
    assert lines[header + 1] == "|" + "---|" * len(COLUMNS)
    rows = [table_cells(line) for line in lines[header + 2 :] if line.startswith("| ")]
    assert [row[:2] for row in rows] == [
        ["espeak", "1 worker x 2"],
        ["espeak-paced (0.02 s/chunk)", "render 1 + CPU 2"],
    ]
    for row, engine in zip(rows, ("espeak", "espeak-paced"), strict=True):
        assert len(row) == len(COLUMNS)
        words, chapters, chunks, audio_h, first, share, render, wall, ratio, tail, verdict = row[2:]
        assert 900 <= int(words.replace(",", "")) < 950
        assert chapters == "3"
        assert int(chunks) > 3
        assert float(audio_h) > 0
        first_s, render_s, wall_s = float(first), float(render), float(wall)
        assert 0 < first_s < wall_s  # the first chapter came before the book
        assert 0 < render_s <= wall_s  # the book comes after its last chunk
        assert float(ratio) >= 1.0
        # the table rounds seconds to 0.1 and the ratio to 0.01: the ratio lies within what that allows
        low = (wall_s - 0.05) / (render_s + 0.05) - 0.005
        assert low <= float(ratio) <= (wall_s + 0.05) / (render_s - 0.05) + 0.005
        assert float(tail) == pytest.approx(wall_s - render_s, abs=0.11)
        share_low = 100 * (first_s - 0.05) / (wall_s + 0.05) - 0.5
        assert share_low <= float(share) <= 100 * (first_s + 0.05) / (wall_s - 0.05) + 0.5
        assert verdict == ("yes" if float(ratio) <= 1.2 else "no")
        assert f"{engine} first={first}s wall/render={ratio}x" in summary

"""plan_chapters: the timeline of an output from lengths and pauses alone (pure, no audio)."""

from __future__ import annotations

import pytest

from worker.audio.chapters import ChapterMark, Pauses, PieceLength, plan_chapters, samples_to_ms

SR = 24_000
PAUSES = Pauses(sentence=0.25, paragraph=0.5, chapter=1.5)


def test_chapters_start_at_their_first_piece_and_end_where_the_next_starts() -> None:
    pieces = [
        PieceLength(1_000, "sentence", 3),
        PieceLength(2_000, "chapter", 3),
        PieceLength(0, "none", 7),  # an empty chunk still starts its chapter
        PieceLength(500, "paragraph", 7),
        PieceLength(700, "sentence", 9),
    ]
    plan = plan_chapters(pieces, SR, PAUSES, {3: "Three", 9: "Nine"})
    c7 = 1_000 + 6_000 + 2_000 + 36_000
    c9 = c7 + 0 + 500 + 12_000
    total = c9 + 700 + 6_000
    assert plan.total_samples == total
    assert plan.duration == total / SR
    assert plan.sample_rate == SR
    assert plan.chapters == (
        ChapterMark(3, 0.0, c7 / SR, 0, c7, "Three"),
        ChapterMark(7, c7 / SR, c9 / SR, c7, c9, "Chapter 2"),
        ChapterMark(9, c9 / SR, total / SR, c9, total, "Nine"),
    )


def test_pause_lengths_round_to_the_nearest_sample() -> None:
    pauses = Pauses(sentence=1 / 3)
    assert pauses.samples("sentence", 22_050) == 7_350
    assert pauses.samples("none", 22_050) == 0
    assert Pauses(sentence=0.00003).samples("sentence", 22_050) == 1
    plan = plan_chapters([PieceLength(10, "sentence", 0), PieceLength(10, "none", 1)], 22_050, pauses)
    assert plan.chapters[1].start_sample == 7_360


def test_titles_default_clean_and_cut() -> None:
    pieces = [PieceLength(10, "none", i) for i in range(5)]
    titles = {0: "", 1: "  \n", 2: "a\0b", 3: "x" * 1_500, 4: None}
    marks = plan_chapters(pieces, SR, PAUSES, titles).chapters
    assert [m.title for m in marks[:3]] == ["Chapter 1", "Chapter 2", "ab"]
    assert marks[3].title == "x" * 999 + "\u2026"
    assert marks[4].title == "Chapter 5"
    assert plan_chapters(pieces[:1], SR).chapters[0].title == "Chapter 1"


def test_titles_are_kept_as_given() -> None:
    title = " x\n[CHAPTER]\r\\ "
    (mark,) = plan_chapters([PieceLength(10, "none", 0)], SR, titles={0: title}).chapters
    assert mark.title == title


def test_accepts_any_iterable() -> None:
    plan = plan_chapters((PieceLength(n, "sentence", 0) for n in (5, 6)), SR, PAUSES)
    assert plan.total_samples == 11 + 2 * 6_000
    assert len(plan.chapters) == 1


@pytest.mark.parametrize(
    ("pieces", "sample_rate", "match"),
    [
        ([], SR, "no pieces"),
        ([PieceLength(1, "none", 0), PieceLength(1, "none", 1), PieceLength(1, "none", 0)], SR, "contiguous"),
        ([PieceLength(-1, "none", 0)], SR, "samples"),
        ([PieceLength(1.5, "none", 0)], SR, "samples"),  # type: ignore[arg-type]
        ([PieceLength(True, "none", 0)], SR, "samples"),
        ([PieceLength(1, "comma", 0)], SR, "pause kind"),
        ([PieceLength(1, "none", 0)], 0, "sample_rate"),
        ([PieceLength(1, "none", 0)], 22_050.0, "sample_rate"),
    ],
)
def test_invalid_timelines(pieces: list[PieceLength], sample_rate: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plan_chapters(pieces, sample_rate, PAUSES)


@pytest.mark.parametrize(
    ("samples", "rate", "ms"),
    [
        (0, 22_050, 0),
        (11, 22_050, 0),
        (12, 22_050, 1),
        (33_075, 22_050, 1_500),
        (12, 24_000, 1),
        (11, 22_000, 1),
    ],
)
def test_samples_to_ms_rounds_halves_up(samples: int, rate: int, ms: int) -> None:
    assert samples_to_ms(samples, rate) == ms

"""What a job's output request resolves to: presets fill what they fix and refuse what contradicts them."""

from __future__ import annotations

import pytest

from worker.audio.chapters import Pauses
from worker.audio.master import Mastering
from worker.audio.presets import (
    ACX_BITRATE_KBPS,
    ACX_SAMPLE_RATE,
    Delivery,
    DeliveryError,
    resolve,
)
from worker.audio.stitch import StitchPiece
from worker.jobs.deliver import chapter_parts


def _resolve(
    given: frozenset[str],
    loudness: tuple[float, float] | None = (-18.0, -3.0),
    *,
    fmt: str = "mp3",
    bitrate_kbps: int = 128,
    preset: str = "none",
    split: str = "none",
    max_part_minutes: int = 600,
) -> Delivery:
    return resolve(
        fmt=fmt,
        bitrate_kbps=bitrate_kbps,
        preset=preset,
        split=split,
        max_part_minutes=max_part_minutes,
        loudness=loudness,
        given=given,
    )


def test_no_preset_keeps_what_was_asked() -> None:
    d = _resolve(frozenset(), (-20.0, -2.0), fmt="m4b", split="chapter")
    assert (d.format, d.bitrate_kbps, d.split, d.preset) == ("m4b", 128, "chapter", "none")
    assert d.mastering == Mastering(target_lufs=-20.0, true_peak_db=-2.0)
    assert d.sample_rate is None
    assert not d.room_tone
    assert not d.report


def test_acx_fixes_format_rate_split_and_mastering() -> None:
    d = _resolve(frozenset({"preset"}), preset="acx")
    assert (d.format, d.bitrate_kbps, d.sample_rate, d.split) == (
        "mp3",
        ACX_BITRATE_KBPS,
        ACX_SAMPLE_RATE,
        "chapter",
    )
    assert d.max_part_seconds == 120 * 60
    assert d.room_tone
    assert d.report
    assert 0.5 <= d.head_seconds <= 1.0
    assert 1.0 <= d.tail_seconds <= 5.0
    assert d.mastering is not None
    assert d.mastering.true_peak_db < -3.0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"fmt": "m4b"}, "output.format"),
        ({"bitrate_kbps": 320}, "output.bitrate_kbps"),
        ({"max_part_minutes": 121}, "output.max_part_minutes"),
    ],
)
def test_acx_refuses_what_contradicts_it(change: dict[str, object], field: str) -> None:
    given = frozenset({"preset", *(k if k != "fmt" else "format" for k in change)})
    with pytest.raises(DeliveryError) as caught:
        _resolve(given, preset="acx", **change)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_acx_takes_what_agrees_with_it() -> None:
    given = frozenset({"preset", "format", "bitrate_kbps", "split", "max_part_minutes"})
    d = _resolve(given, preset="acx", bitrate_kbps=192, split="chapter", max_part_minutes=60)
    assert d.max_part_seconds == 3600


def test_delivery_round_trips_through_json() -> None:
    for d in (
        Delivery(),
        Delivery(mastering=None),
        _resolve(frozenset({"preset"}), preset="acx"),
    ):
        assert Delivery.from_json(d.to_json()) == d


def _pieces(lengths: list[tuple[int, int]]) -> list[StitchPiece]:
    return [
        StitchPiece(f"{n}.wav", "sentence", chapter, samples) for n, (chapter, samples) in enumerate(lengths)
    ]


def test_chapter_parts_cut_long_chapters_between_chunks() -> None:
    rate = 100
    pauses = Pauses(sentence=1.0)
    # chapter 0: 5 chunks of 10 s (+1 s pause each); chapter 1: one chunk
    pieces = _pieces([(0, 1000)] * 5 + [(1, 500)])
    parts = chapter_parts(pieces, pauses, rate, max_seconds=25)
    assert [(p, n, c, len(ps)) for p, n, c, ps in parts] == [
        (1, 1, 3, 2),
        (1, 2, 3, 2),
        (1, 3, 3, 1),
        (2, 1, 1, 1),
    ]
    assert [x for _, _, _, ps in parts for x in ps] == pieces  # nothing lost, duplicated or reordered


def test_a_chunk_longer_than_a_part_is_a_part_of_its_own() -> None:
    pieces = _pieces([(0, 5000), (0, 100)])
    parts = chapter_parts(pieces, Pauses(), 100, max_seconds=10)
    assert [len(ps) for _, _, _, ps in parts] == [1, 1]

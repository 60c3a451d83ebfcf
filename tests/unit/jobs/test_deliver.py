"""Chapter parts are cut so that each whole file, head and tail included, stays under the part limit."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from worker.audio import BookTags, Pauses, write_wav_atomic
from worker.audio.presets import Delivery
from worker.jobs.deliver import BookInfo, ChunkRow, build

RATE = 24_000


def _row(folder: Path, seq: int, chapter: int) -> ChunkRow:
    t = np.arange(RATE) / RATE  # one second of a quiet tone, faded in and out
    wave = (0.2 * np.sin(2 * np.pi * 220 * t) * np.hanning(t.size)).astype(np.float32)
    path = folder / f"{seq}.wav"
    write_wav_atomic(path, wave, RATE)
    return ChunkRow(seq, chapter, str(path), "sentence", None, f"Sentence {seq}.", f"Sentence {seq}.", "v")


def test_every_part_with_its_head_and_tail_fits_the_limit(tmp_path: Path) -> None:
    rows = [_row(tmp_path, n, 0) for n in range(12)]
    delivery = Delivery(
        format="wav",
        split="chapter",
        max_part_seconds=6.0,
        mastering=None,
        head_seconds=0.75,
        tail_seconds=2.5,
    )
    built = build(
        rows,
        delivery,
        tmp_path / "book.wav",
        lambda name: tmp_path / "files" / name,
        sample_rate=RATE,
        pauses=Pauses(),
        info=BookInfo(BookTags(title="Parts"), {0: "One"}, None, "en", 1),
    )
    parts = [f for f in built.files if f.kind == "chapter"]
    assert len(parts) > 1
    assert [f.part for f in parts] == list(range(1, len(parts) + 1))
    for part in parts:
        assert part.duration is not None
        assert part.duration <= 6.0, part
    # nothing lost: the parts hold every chunk once (their audio adds up to the chunks' and the pauses)
    assert sum(f.duration or 0 for f in parts) >= len(rows) * 1.0

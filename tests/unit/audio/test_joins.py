"""No clicks where chunks meet: in a stitched and mastered book, the largest sample step around every join
is no larger than the large steps inside the speech itself (real espeak chunks, prepared as a render
prepares them: silence trimmed, faded in and out, then gained and limited at the stitch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from worker.audio import StitchPiece, apply_fades, read_wav, stitch, trim_silence, write_wav_atomic
from worker.audio.loudness import measure
from worker.audio.master import Mastering, chunk_gain_db
from worker.audio.roomtone import RoomTone
from worker.engines import SynthesisRequest
from worker.engines.registry import get_engine

TEXTS = [
    "It was a bright cold day in April.",
    "The clocks were striking thirteen.",
    "Yes.",
    "Far out in the uncharted backwaters, a small sun.",
    "Nobody noticed.",
]


@pytest.mark.parametrize("room_tone", [False, True])
def test_the_largest_step_at_every_join_is_no_larger_than_inside_the_speech(
    tmp_path: Path, room_tone: bool
) -> None:
    engine = get_engine("espeak")
    rate = engine.sample_rate
    waves = engine.synthesize([SynthesisRequest(text, {}) for text in TEXTS])
    mastering = Mastering()
    pieces = []
    for n, (wave, level) in enumerate(zip(waves, (-12, 0, -6, -3, -9), strict=True)):
        chunk = apply_fades(trim_silence(wave * np.float32(10 ** (level / 20)), rate), rate)
        path = tmp_path / f"{n}.wav"
        write_wav_atomic(path, chunk, rate)
        gain = chunk_gain_db(measure(chunk, rate), mastering)
        pieces.append(StitchPiece(str(path), "sentence" if n % 2 else "none", 0, None, gain))
    out = tmp_path / "book.wav"
    result = stitch(
        pieces,
        out,
        "wav",
        rate,
        mastering=mastering,
        room_tone=RoomTone(-62.0, rate, seed=1) if room_tone else None,
    )
    book = read_wav(out)[0].astype(np.float64)
    steps = np.abs(np.diff(book))
    lengths = [read_wav(p.path)[0].shape[0] for p in pieces]
    joins = list(result.starts[1:]) + [s + n for s, n in zip(result.starts, lengths, strict=True)]
    inside = np.concatenate(
        [steps[s + rate // 50 : s + n - rate // 50] for s, n in zip(result.starts, lengths, strict=True)]
    )
    typical = float(np.percentile(inside, 99.9))
    window = rate // 200  # 5 ms either side of the join
    for at in joins:
        around = steps[max(0, at - window) : at + window]
        assert around.max() <= typical, (at, float(around.max()), typical)
    # "none" pauses put chunks back to back: those joins are the hard case, and they exist here
    assert any(p.pause_after == "none" for p in pieces[:-1])

"""Batch splitting on out-of-memory. A GPU running out of memory cannot happen on this machine, so the
engine here raises the way torch does (an exception class named OutOfMemoryError) above a batch size."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from worker.engines import SynthesisRequest
from worker.engines.base import Waveform
from worker.pipeline import is_out_of_memory, synthesize_in_halves


class OutOfMemoryError(RuntimeError):
    """Named like torch.cuda.OutOfMemoryError."""


class SmallGpuEngine:
    name, version, sample_rate, max_chunk_chars = "small-gpu", "1", 16000, 100
    prompt_shapes: Mapping[str, tuple[int, ...]] = {}

    def __init__(self, fits: int):
        self.fits = fits
        self.calls: list[int] = []

    def encode_speaker(self, audio: Waveform, sample_rate: int, ref_text: str) -> dict[str, np.ndarray]:
        return {}

    def synthesize(self, batch: Sequence[SynthesisRequest]) -> list[Waveform]:
        self.calls.append(len(batch))
        if len(batch) > self.fits:
            raise OutOfMemoryError("CUDA out of memory")
        return [np.full(3, float(r.seed), dtype=np.float32) for r in batch]


def _requests(n: int) -> list[SynthesisRequest]:
    return [SynthesisRequest(f"text {i}", {}, seed=i) for i in range(n)]


def test_out_of_memory_halves_the_batch_and_keeps_the_order() -> None:
    engine = SmallGpuEngine(fits=2)
    waves = synthesize_in_halves(engine, _requests(8))
    assert [int(w[0]) for w in waves] == list(range(8))
    assert engine.calls == [8, 4, 2, 2, 4, 2, 2]


def test_a_single_chunk_that_does_not_fit_raises_for_a_retry_later() -> None:
    engine = SmallGpuEngine(fits=0)
    with pytest.raises(OutOfMemoryError):
        synthesize_in_halves(engine, _requests(4))


def test_other_errors_are_not_split() -> None:
    class Broken(SmallGpuEngine):
        def synthesize(self, batch: Sequence[SynthesisRequest]) -> list[Waveform]:
            self.calls.append(len(batch))
            raise ValueError("bad input")

    engine = Broken(fits=8)
    with pytest.raises(ValueError, match="bad input"):
        synthesize_in_halves(engine, _requests(4))
    assert engine.calls == [4]
    assert is_out_of_memory(MemoryError())
    assert not is_out_of_memory(ValueError())

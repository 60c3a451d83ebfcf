"""Batch splitting on out-of-memory. A GPU running out of memory cannot happen on this machine, so the
engine here raises the way torch does (an exception class named OutOfMemoryError) above a batch size."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from worker import tasks
from worker.engines import SynthesisRequest
from worker.engines.base import Waveform
from worker.jobs.render import EngineOutOfMemory, is_out_of_memory, synthesize_in_halves
from worker.task_names import RENDER_CHUNKS


class OutOfMemoryError(RuntimeError):
    """Named like torch.cuda.OutOfMemoryError."""


class SmallGpuEngine:
    name, version, sample_rate, max_chunk_chars = "small-gpu", "1", 16000, 100
    prompt_shapes: Mapping[str, tuple[int, ...]] = {}

    def __init__(self, fits: int):
        self.fits = fits
        self.calls: list[int] = []
        self.released = 0
        self.handling: list[bool] = []

    def release_memory(self) -> None:
        self.released += 1

    def encode_speaker(self, audio: Waveform, sample_rate: int, ref_text: str) -> dict[str, np.ndarray]:
        return {}

    def synthesize(self, batch: Sequence[SynthesisRequest]) -> list[Waveform]:
        self.calls.append(len(batch))
        self.handling.append(sys.exc_info()[0] is not None)  # called from inside an except block?
        if len(batch) > self.fits:
            raise OutOfMemoryError("CUDA out of memory")
        return [np.full(3, float(r.seed), dtype=np.float32) for r in batch]


def _requests(n: int) -> list[SynthesisRequest]:
    return [SynthesisRequest(f"text {i}", {}, seed=i) for i in range(n)]


def test_out_of_memory_halves_the_batch_and_keeps_the_order() -> None:
    engine = SmallGpuEngine(fits=2)
    waves = synthesize_in_halves(engine, _requests(8))
    assert [int(w[0]) for w, marks in waves] == list(range(8))  # each wave with its word marks (none)
    assert all(marks == [] for _, marks in waves)
    assert engine.calls == [8, 4, 2, 2, 4, 2, 2]
    assert engine.released == 3  # once before each split: 8, then each 4
    # The halves run after the failed call's exception (and what its traceback holds) is released.
    assert not any(engine.handling)


def test_engines_without_the_memory_hook_are_split_too() -> None:
    class NoHook:
        name, version, sample_rate, max_chunk_chars = "no-hook", "1", 16000, 100
        prompt_shapes: Mapping[str, tuple[int, ...]] = {}

        def encode_speaker(self, audio: Waveform, sample_rate: int, ref_text: str) -> dict[str, np.ndarray]:
            return {}

        def synthesize(self, batch: Sequence[SynthesisRequest]) -> list[Waveform]:
            if len(batch) > 1:
                raise OutOfMemoryError("CUDA out of memory")
            return [np.zeros(1, dtype=np.float32)]

    assert len(synthesize_in_halves(NoHook(), _requests(3))) == 3


def test_a_single_chunk_that_does_not_fit_raises_for_a_retry_later() -> None:
    engine = SmallGpuEngine(fits=0)
    with pytest.raises(EngineOutOfMemory, match="one chunk does not fit") as raised:
        synthesize_in_halves(engine, _requests(4))
    assert isinstance(raised.value.__cause__, OutOfMemoryError)
    # The render task retries it with backoff, as it does database and broker outages.
    assert isinstance(raised.value, tasks.TRANSIENT)
    render_chunks = tasks.CELERY_TASKS[RENDER_CHUNKS]
    assert render_chunks.autoretry_for == tasks.TRANSIENT
    assert render_chunks.retry_backoff


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

"""``espeak-paced``: espeak's real audio, delivered at the pace of a GPU engine.

espeak renders about 1000x faster than real time, so crashes, restarts and leases are hard to exercise
with it: every chunk is done before anything can go wrong. This engine returns exactly espeak's audio
(word times included) but makes each synthesize call take at least ``seconds_per_chunk`` per chunk; it
can also make its warm-up and each prompt build take a while, and refuse long references with a
RuntimeError (not an EngineError: a build must survive any exception), as neural engines do. It is what
the chaos battery runs; it stands in only for a GPU's timing. Its version differs from espeak's, so
prompts are not shared between the two. A process offers it when ``TOME_ENGINE_MODULES`` names
``bench.engines``; its settings are in docs/operations.md."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from bench.engines import PacedSettings
from worker.engines.base import SynthesisRequest, Waveform, WordMark
from worker.engines.espeak import EspeakEngine

_T = TypeVar("_T")


class PacedEspeakEngine:
    name = "espeak-paced"

    def __init__(
        self,
        seconds_per_chunk: float = 0.25,
        warm_up_seconds: float = 0.0,
        max_reference_seconds: float = 0.0,
        seconds_per_build: float = 0.0,
    ) -> None:
        self._inner = EspeakEngine()
        self.seconds_per_chunk = seconds_per_chunk
        self.warm_up_seconds = warm_up_seconds
        self.max_reference_seconds = max_reference_seconds
        self.seconds_per_build = seconds_per_build
        self.version = f"{self._inner.version}/paced"
        self.sample_rate = self._inner.sample_rate
        self.max_chunk_chars = self._inner.max_chunk_chars
        self.prompt_shapes: Mapping[str, tuple[int, ...]] = self._inner.prompt_shapes

    def warm_up(self) -> None:
        time.sleep(self.warm_up_seconds)

    def encode_speaker(
        self, audio: Waveform, sample_rate: int, ref_text: str
    ) -> dict[str, npt.NDArray[np.generic]]:
        seconds = len(audio) / sample_rate
        if self.max_reference_seconds and seconds > self.max_reference_seconds:
            raise RuntimeError(
                f"the codec takes at most {self.max_reference_seconds:g} s of reference audio, "
                f"not {seconds:.1f} s"
            )
        started = time.monotonic()
        prompt = self._inner.encode_speaker(audio, sample_rate, ref_text)
        remaining = self.seconds_per_build - (time.monotonic() - started)
        if remaining > 0:
            time.sleep(remaining)
        return prompt

    def synthesize(self, batch: Sequence[SynthesisRequest]) -> list[Waveform]:
        return self._paced(self._inner.synthesize, batch)

    def synthesize_timed(self, batch: Sequence[SynthesisRequest]) -> list[tuple[Waveform, list[WordMark]]]:
        return self._paced(self._inner.synthesize_timed, batch)

    def _paced(
        self, render: Callable[[Sequence[SynthesisRequest]], _T], batch: Sequence[SynthesisRequest]
    ) -> _T:
        started = time.monotonic()
        out = render(batch)
        remaining = self.seconds_per_chunk * len(batch) - (time.monotonic() - started)
        if remaining > 0:
            time.sleep(remaining)
        return out


def create(settings: PacedSettings) -> PacedEspeakEngine:
    """The engine as the registry builds it."""
    return PacedEspeakEngine(
        settings.seconds_per_chunk,
        settings.warm_up_seconds,
        settings.max_reference_seconds,
        settings.seconds_per_build,
    )

"""The engine protocol every TTS engine implements (pure: no Flask, no Celery).

An engine turns a reference recording into a *speaker prompt* (a flat mapping of names to numpy arrays,
saved as safetensors by the voice cache) and renders batches of text with such prompts. Waveforms are
mono float32 in [-1, 1] at ``sample_rate``.

Engines that know where each word is in what they rendered (espeak does; Qwen3 does not) also implement
:class:`TimedEngine`; the worker calls :func:`synthesize_timed`, which works with any engine.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Waveform = npt.NDArray[np.float32]
SpeakerPrompt = Mapping[str, npt.NDArray[np.generic]]


class EngineError(Exception):
    """The engine failed on input it was given (not a transient fault)."""


@dataclass(frozen=True)
class SynthesisRequest:
    """One chunk to render: its text, the voice's speaker prompt, its language, extra parameters."""

    text: str
    prompt: SpeakerPrompt
    language: str = "en"
    params: Mapping[str, float] = field(default_factory=dict)
    seed: int = 0


@runtime_checkable
class Engine(Protocol):
    """What the worker needs from a TTS engine."""

    name: str
    sample_rate: int
    max_chunk_chars: int
    prompt_shapes: Mapping[str, tuple[int, ...]]  # tensor name -> shape (-1: any size), checked on load

    @property
    def version(self) -> str:
        """Identity of the engine and its model: part of every cache key (a change makes prompts stale).
        A property, so that an engine may compute it lazily (hashing a checkpoint is costly)."""
        ...

    def encode_speaker(
        self, audio: Waveform, sample_rate: int, ref_text: str
    ) -> dict[str, npt.NDArray[np.generic]]:
        """Compute the speaker prompt of a reference recording (mono float32) and its transcript."""
        ...

    def synthesize(self, batch: Sequence[SynthesisRequest]) -> list[Waveform]:
        """Render every request of the batch, in order; one waveform per request."""
        ...


@dataclass(frozen=True)
class WordMark:
    """Where a word of a request is in its rendering: samples ``[start, end)`` of the returned waveform
    (speech only: pauses around the word are left out) and characters ``[text_start, text_end)`` of the
    request's ``text`` (Python ``str`` indices). ``start == end`` when the engine reported the word but
    rendered no sound for it. A request's marks are in order and do not overlap, in samples and in text.
    """

    start: int
    end: int
    text_start: int
    text_end: int


@runtime_checkable
class TimedEngine(Protocol):
    """An engine that reports word positions (optional: call :func:`synthesize_timed`, not this)."""

    def synthesize_timed(self, batch: Sequence[SynthesisRequest]) -> list[tuple[Waveform, list[WordMark]]]:
        """Like ``synthesize``, with the same waveforms, plus the words of each request in its waveform."""
        ...


@dataclass(frozen=True)
class EmbeddingSpec:
    """A speaker embedding as an engine takes it: the tensor's name, numpy dtype and shape."""

    name: str  # the tensor's name in the file (and in the engine's prompt)
    dtype: str  # numpy dtype name
    shape: tuple[int, ...]


@runtime_checkable
class EmbeddingEngine(Protocol):
    """An engine that can speak from a speaker embedding alone (optional; Qwen3-TTS in x-vector-only
    mode). ``embedding_spec`` is for the engine's own checkpoint, known without loading the model."""

    embedding_spec: EmbeddingSpec

    def prompt_from_embedding(self, embedding: npt.NDArray[np.float32]) -> dict[str, npt.NDArray[np.generic]]:
        """The engine's speaker prompt for a voice given by this embedding alone."""
        ...

    def embedding_of(self, prompt: SpeakerPrompt) -> npt.NDArray[np.float32]:
        """The speaker embedding inside one of the engine's prompts."""
        ...


def embedding_engine(engine: Engine) -> EmbeddingEngine | None:
    """``engine`` if it has speaker embeddings, else None."""
    return engine if isinstance(engine, EmbeddingEngine) else None


@runtime_checkable
class RefillingEngine(Protocol):
    """An engine whose batch can take more requests while it renders (the Qwen3-TTS fast runner)."""

    @property
    def refills(self) -> bool:
        """Whether the worker should refill its batches now (a setting may turn it off)."""
        ...

    def synthesize_refilling(
        self,
        batch: Sequence[SynthesisRequest],
        refill: Callable[[int], Sequence[SynthesisRequest]],
        waiting: int | None = None,
    ) -> list[Waveform | None]:
        """The waves of ``batch`` then of each request ``refill`` returned (asked before every step with
        how many it may return); None for a refilled request to render on its own. ``waiting``: how many
        requests ``refill`` could give now (None: unknown), so the engine need not size for more."""
        ...


def refilling_engine(engine: Engine) -> RefillingEngine | None:
    """``engine`` if it refills its batches while they render and is set to, else None."""
    return engine if isinstance(engine, RefillingEngine) and engine.refills else None


# The speaking-rate parameter every engine takes: a multiplier of the voice's own rate (a job's speed
# times SSML prosody rate). The worker leaves it out at 1.
RATE_SCALE = "rate_scale"
RATE_RANGE = (0.25, 4.0)


def rate_scale(params: Mapping[str, float]) -> float:
    """The request's ``rate_scale`` (1 if absent); :class:`EngineError` unless a number in RATE_RANGE."""
    value = params.get(RATE_SCALE, 1.0)
    try:
        scale = float(value)
    except (TypeError, ValueError) as exc:
        raise EngineError(f"rate_scale must be a number, got {value!r}") from exc
    low, high = RATE_RANGE
    if not low <= scale <= high:  # also refuses NaN
        raise EngineError(f"rate_scale must be between {low} and {high}, got {scale!r}")
    return scale


# Optional hooks: an engine may define these methods; the worker calls them through the functions below,
# so engines without them (espeak) need no empty stubs.


def warm_up(engine: Engine) -> None:
    """Let the engine load its model and run a first tiny render (a worker calls this at process start,
    after fork, so the first job does not pay for it). Engines without ``warm_up()`` have nothing to do."""
    hook = getattr(engine, "warm_up", None)
    if callable(hook):
        hook()


def release_memory(engine: Engine) -> None:
    """Let the engine return cached accelerator memory (called after an out-of-memory error)."""
    hook = getattr(engine, "release_memory", None)
    if callable(hook):
        hook()


def synthesize_timed(
    engine: Engine, batch: Sequence[SynthesisRequest]
) -> list[tuple[Waveform, list[WordMark]]]:
    """Render the batch, with each waveform the words the engine found in it: its ``synthesize_timed()``
    if it has one, else ``engine.synthesize()`` with no words (``[]``) for every waveform."""
    if isinstance(engine, TimedEngine):
        return engine.synthesize_timed(batch)
    return [(wave, []) for wave in engine.synthesize(batch)]


_DEVICE = re.compile(r"cpu|cuda(:\d+)?")


def is_device(name: str) -> bool:
    """Whether ``name`` is a device a torch model can be put on here: ``cpu``, ``cuda`` or ``cuda:N``."""
    return _DEVICE.fullmatch(name) is not None


def default_device() -> str:
    """``cuda:0`` when CUDA is available, else ``cpu`` (imports torch: call it where a model loads)."""
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"

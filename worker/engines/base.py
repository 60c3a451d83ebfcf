"""The engine protocol every TTS engine implements (pure: no Flask, no Celery).

An engine turns a reference recording into a *speaker prompt* (a flat mapping of names to numpy arrays,
saved as safetensors by the voice cache) and renders batches of text with such prompts. Waveforms are
mono float32 in [-1, 1] at ``sample_rate``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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

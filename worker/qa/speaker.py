"""The speaker check (pure: numpy; no Flask, no Celery, no torch import here).

An engine that has its own speaker encoder (Qwen3-TTS: the x-vector encoder its prompts are built with)
is a :class:`SpeakerEncoder`: it embeds any audio at its sample rate (``speaker_embedding``) and holds the
voice's embedding in its speaker prompt (``embedding_of``). The check embeds the rendered chunk with the
same encoder and scores the cosine similarity of the two embeddings: a chunk spoken in another voice
(a decoder that lost its speaker conditioning, a prompt mixed up) is farther from the voice than the
voice's own chunks are.

``QaPolicy.min_speaker_similarity`` is the threshold; 0 means *off*: the score is still measured and
recorded on the chunk (so that a deployment with real weights can read its own distribution from
``GET /v1/jobs/{id}/qa`` and set a threshold per job), but the check never fails. No default threshold
is set here: the only checkpoint on these machines is a tiny randomly initialised one, whose
similarities (0.98-1.0 for any input) say nothing about real voices (docs/qa.md).
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from worker.engines.base import EngineError, SpeakerPrompt
from worker.qa.checks import Check

__all__ = ["SpeakerEncoder", "check_speaker", "cosine_similarity", "speaker_encoder", "speaker_similarity"]

NAME = "speaker"


@runtime_checkable
class SpeakerEncoder(Protocol):
    """An engine whose speaker encoder the QA can use (optional; Qwen3-TTS)."""

    def speaker_embedding(self, audio: npt.NDArray[np.float32], sample_rate: int) -> npt.NDArray[np.float32]:
        """The speaker embedding of ``audio`` (mono float32 at ``sample_rate``), as in the engine's
        prompts; :class:`~worker.engines.base.EngineError` when it cannot be measured (too short)."""
        ...

    def embedding_of(self, prompt: SpeakerPrompt) -> npt.NDArray[np.float32]:
        """The voice's speaker embedding inside one of the engine's prompts."""
        ...


def speaker_encoder(engine: object) -> SpeakerEncoder | None:
    """``engine`` if it can embed audio with its own speaker encoder, else None (espeak: its pitch check
    stands for this one)."""
    return engine if isinstance(engine, SpeakerEncoder) else None


def cosine_similarity(a: npt.ArrayLike, b: npt.ArrayLike) -> float | None:
    """Cosine similarity of two vectors of one shape; None if either is zero, not finite or they differ
    in shape."""
    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    if x.shape != y.shape or x.size == 0 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        return None
    norm = float(np.linalg.norm(x) * np.linalg.norm(y))
    if norm == 0.0 or not math.isfinite(norm):
        return None
    return float(np.clip(np.dot(x, y) / norm, -1.0, 1.0))


def speaker_similarity(
    encoder: SpeakerEncoder, audio: npt.ArrayLike, sample_rate: int, prompt: SpeakerPrompt
) -> float | None:
    """Similarity of ``audio``'s speaker embedding to the voice's in ``prompt``; None when either cannot
    be had (audio too short for the encoder, a prompt without an embedding)."""
    wave = np.nan_to_num(np.asarray(audio, dtype=np.float32).reshape(-1), nan=0.0, posinf=0.0, neginf=0.0)
    try:
        voice = encoder.embedding_of(prompt)
        chunk = encoder.speaker_embedding(np.ascontiguousarray(wave), sample_rate)
    except EngineError:
        return None
    return cosine_similarity(chunk, voice)


def check_speaker(similarity: float | None, minimum: float) -> Check:
    """The speaker check of a measured ``similarity`` against the policy's ``minimum`` (0 or less: off,
    always passes; an unmeasured score passes: nothing to hold against it)."""
    score = None if similarity is None else round(similarity, 4)
    if minimum <= 0:
        return Check(NAME, score, "off (min_speaker_similarity 0: measured, not held to a limit)", True)
    limit = f">= {minimum:g} cosine similarity to the voice's speaker embedding"
    if similarity is None or similarity >= minimum:
        return Check(NAME, score, limit, True)
    reason = f"speaker similarity {similarity:.3f} under {minimum:g}: another voice"
    return Check(NAME, score, limit, False, reason)

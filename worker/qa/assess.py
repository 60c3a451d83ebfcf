"""One call for the render step: the cheap checks, then (when they found speech) the transcript check."""

from __future__ import annotations

import numpy.typing as npt

from worker.engines.base import SpeakerPrompt
from worker.qa.checks import QaPolicy, QaResult, SpeakingRate, VoiceFloor, check_audio
from worker.qa.speaker import SpeakerEncoder, check_speaker, speaker_similarity
from worker.qa.transcript import Recogniser, check_transcript

__all__ = ["assess_chunk"]


def assess_chunk(
    audio: npt.ArrayLike,
    sample_rate: int,
    text: str,
    *,
    policy: QaPolicy | None = None,
    rate: SpeakingRate | None = None,
    expected_f0_hz: float | None = None,
    expected_level_db: float | None = None,
    floor: VoiceFloor | None = None,
    recogniser: Recogniser | None = None,
    speaker: tuple[SpeakerEncoder, SpeakerPrompt] | None = None,
) -> QaResult:
    """:func:`~worker.qa.checks.check_audio`, plus :func:`~worker.qa.transcript.check_transcript` (its
    checks ``words`` and ``unexplained``; its details under ``details["transcript"]``) unless there is
    no recogniser or nothing to recognise (empty or silent audio, already failed); plus the ``speaker``
    check (:mod:`~worker.qa.speaker`) when an engine's encoder and the voice's prompt are given and there
    is speech to embed."""
    policy = policy or QaPolicy()
    result = check_audio(
        audio,
        sample_rate,
        text,
        policy=policy,
        rate=rate,
        expected_f0_hz=expected_f0_hz,
        expected_level_db=expected_level_db,
        floor=floor,
    )
    silence = result.check("silence")
    if silence is None or not silence.passed:
        return result
    if speaker is not None:
        encoder, prompt = speaker
        similarity = speaker_similarity(encoder, audio, sample_rate, prompt)
        result = result.combined([check_speaker(similarity, policy.min_speaker_similarity)])
    if recogniser is None:
        return result
    transcript = check_transcript(recogniser, audio, sample_rate, text, policy=policy)
    return result.combined(transcript.checks, {"transcript": transcript.details()})

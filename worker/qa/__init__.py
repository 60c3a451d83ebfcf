"""Chunk QA, pure: numpy and the pocketsphinx wheel; no Flask, no Celery, no database.

* :mod:`.checks`: cheap checks of a rendered chunk against its text and voice, the :class:`QaPolicy`
  thresholds (per-engine defaults), the voice's speaking rate measured from its chunks.
* :mod:`.transcript`: the transcript check behind the :class:`Recogniser` protocol, and the embedded
  offline recogniser (pocketsphinx constrained to the chunk's text).
* :mod:`.speaker`: the speaker check, for engines with their own speaker encoder (Qwen3-TTS): cosine
  similarity of the chunk's speaker embedding to the voice's (off by default: not calibrated).
* :mod:`.assess`: all of them in one call, for the render step.

The fault-injecting engine the QA benchmark and the tests use is ``bench/faults.py``.
"""

from worker.qa.assess import assess_chunk
from worker.qa.checks import (
    DEFAULT_POLICIES,
    Check,
    QaPolicy,
    QaResult,
    SpeakingRate,
    check_audio,
    measure_speaking_rate,
    median_f0,
    policy_for,
)
from worker.qa.speaker import SpeakerEncoder, check_speaker, speaker_encoder, speaker_similarity
from worker.qa.transcript import PocketsphinxRecogniser, Recogniser, TranscriptResult, check_transcript

__all__ = [
    "DEFAULT_POLICIES",
    "Check",
    "PocketsphinxRecogniser",
    "QaPolicy",
    "QaResult",
    "Recogniser",
    "SpeakerEncoder",
    "SpeakingRate",
    "TranscriptResult",
    "assess_chunk",
    "check_audio",
    "check_speaker",
    "check_transcript",
    "measure_speaking_rate",
    "median_f0",
    "policy_for",
    "speaker_encoder",
    "speaker_similarity",
]

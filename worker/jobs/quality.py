"""Chunk QA in the render step: every synthesised chunk is checked (worker.qa) before it counts as done;
one that fails is rendered again with a new seed, under the same claim (lease and token), up to the job's
``max_rerenders``, and the best take is kept. A chunk that never passes fails the job or is kept and
flagged, as the job's policy says; a chunk with no audio at all (empty, silent, not finite) is never done.

Policy per job (``options["qa"]``, see webapi.schemas.QaOptions), with per-engine defaults: the cheap
checks always run (tens of milliseconds a chunk); the transcript check (pocketsphinx, ~0.8 s of CPU a
chunk) is on by default for neural engines, whose failures are dropped, invented or repeated words, and
off for espeak, which reads every word it is given: its failures are the ones the cheap checks see. An
engine with a speaker encoder (Qwen3-TTS) also gets the speaker check (worker.qa.speaker): its score is
recorded on every chunk; it fails only under the job's ``min_speaker_similarity`` (default 0: off).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models import Chunk, ChunkStatus
from worker.config import Settings
from worker.engines import Engine, SynthesisRequest
from worker.engines.base import WordMark
from worker.qa.assess import assess_chunk
from worker.qa.checks import (
    QaPolicy,
    QaResult,
    SpeakingRate,
    VoiceFloor,
    check_audio,
    is_rule_based,
    measure_floor,
    measure_speaking_rate,
    median_f0,
    median_level,
    policy_for,
    unusable_audio,
)
from worker.qa.speaker import speaker_encoder
from worker.qa.transcript import PocketsphinxRecogniser, Recogniser, understands
from worker.qa.whisper import WhisperRecogniser

log = logging.getLogger(__name__)

FATAL_CHECKS = frozenset({"audio", "silence"})  # no usable audio: never counts as done
DEFAULT_MAX_RERENDERS = 2


@dataclass(frozen=True)
class QaSettings:
    """A job's QA: whether it runs, with the transcript check or not, how many new takes a failing chunk
    gets, what happens to one that never passes, and the thresholds."""

    enabled: bool
    transcript: bool
    max_rerenders: int
    on_fail: str  # "flag" (keep it, flagged) or "fail" (fail the job)
    policy: QaPolicy
    recogniser: Recogniser | None = None  # the worker's (TOME_QA_RECOGNISER); None: the embedded one

    @classmethod
    def of(
        cls,
        options: Mapping[str, Any],
        engine: str,
        recogniser: Recogniser | None = None,
        language: str | None = None,
    ) -> QaSettings:
        """A job's QA from its ``options``; ``language`` is what it reads (by default the transcript check
        runs only where the recogniser hears that language)."""
        given = options.get("qa")
        qa: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        transcript = qa.get("transcript")
        if transcript is None:
            # an engine that reads by rule says every word it is given: no transcript check by default;
            # nor where the recogniser does not hear the job's language (it would flag every chunk)
            hearing = recogniser if recogniser is not None else _recogniser("pocketsphinx", "", "")
            heard = understands(hearing, language)
            transcript = not is_rule_based(engine) and heard
        return cls(
            enabled=bool(qa.get("enabled", True)),
            transcript=bool(transcript),
            max_rerenders=int(qa.get("max_rerenders", DEFAULT_MAX_RERENDERS)),
            on_fail=str(qa.get("on_fail", "flag")),
            policy=policy_for(engine, qa.get("thresholds") or None),
            recogniser=recogniser,
        )

    @property
    def policy_digest(self) -> str:
        """The thresholds this job holds chunks to, hashed (recorded on every chunk it checks): audio an
        earlier job passed under other thresholds is not reused for it (worker.jobs.reuse)."""
        return policy_digest(self.policy)

    @property
    def required_checks(self) -> frozenset[str]:
        """The checks a chunk reused from an earlier job must have passed for this job: any (``audio``,
        every QA record has it) when QA is on, and the transcript's when this job runs it."""
        if not self.enabled:
            return frozenset()
        return frozenset({"audio", "words"} if self.transcript else {"audio"})


def policy_digest(policy: QaPolicy) -> str:
    fields = json.dumps(dataclasses.asdict(policy), sort_keys=True, default=str)
    return hashlib.sha256(fields.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Take:
    """The kept rendering of a chunk: its audio and word marks, its QA (None: QA off), how many renders
    it took, and whether it is kept although it failed."""

    wave: Any
    marks: list[WordMark]
    result: QaResult | None
    renders: int

    @property
    def passed(self) -> bool:
        return self.result is None or self.result.passed

    @property
    def fatal(self) -> bool:
        return self.result is not None and any(c.name in FATAL_CHECKS for c in self.result.failed)

    def to_json(self) -> dict[str, Any] | None:
        if self.result is None:
            return None
        return {**self.result.to_json(), "renders": self.renders}


def recogniser(settings: Settings | None = None) -> Recogniser:
    """This process's recogniser for the transcript check, as ``settings`` choose (the embedded
    pocketsphinx without them); one instance per choice, loaded once."""
    if settings is None or settings.qa.recogniser == "pocketsphinx":
        return _recogniser("pocketsphinx", "", "")
    return _recogniser(settings.qa.recogniser, settings.qa.whisper_dir, settings.qa.whisper_device)


@functools.cache
def _recogniser(kind: str, model_dir: str, device: str) -> Recogniser:
    if kind == "whisper":
        return WhisperRecogniser(Path(model_dir), device)
    return PocketsphinxRecogniser()


# Read with a voice's prompt when a job has not learnt the voice's pitch yet (worker.jobs.render): book
# sentences of the usual shapes (a question among them), about 250 letters.
CALIBRATION_TEXTS = (
    "The fog came in before dawn, and the old keeper counted the boats along the quay.",
    "By noon the wind had turned, and the gulls went quiet one after another.",
    "She opened the letter slowly and read it twice before she put it down.",
    "Why had nobody told him that the ferry would not sail that evening?",
    "They walked home together through the narrow streets behind the harbour.",
)
# Read with it too for the voice's floor (worker.qa.checks.VoiceFloor): paragraphs as long as a book's
# chunks (more sentence ends and pauses, where a low voice's creak sits), and headings and one-line
# sentences, whose starts and ends are a larger share of their sound than a paragraph's.
CALIBRATION_PARAGRAPHS = (
    "The carriage stopped at the edge of the village, and the driver would go no further. Martha paid "
    "him, lifted her trunk onto the wet grass and watched the lamps disappear between the hedges. The "
    "house stood where her mother had said it would, dark except for one window on the upper floor. "
    "She knocked twice, waited, and knocked again.",
    "\u201cYou are late,\u201d said the woman who opened the door. \u201cWe expected you on Tuesday, "
    "and the fire has been lit for three days.\u201d Martha apologised, although she was sure the letter "
    "had said Thursday, and followed her along a corridor that smelled of wax and old paper.",
)
CALIBRATION_LINES = (
    "Chapter One",
    "Chapter Three: The Orchard",
    "Chapter Eleven",
    "Chapter Twenty",
    "Part Two",
    "Prologue",
    "Nobody answered.",
    "Good morning, Doctor.",
)


@dataclass(frozen=True)
class Calibration:
    """What a voice's prompt sounds like through an engine that reads by rule, measured on the
    calibration texts, paragraphs and lines read with it: its median F0 (of :data:`CALIBRATION_TEXTS`;
    None: nothing voiced heard) and its floor on the edge and noise checks (of all of them)."""

    f0_hz: float | None
    floor: VoiceFloor


_calibrated: dict[tuple[object, ...], Calibration | None] = {}
_calibration_lock = threading.Lock()


def calibration(engine: Engine, request: SynthesisRequest, voice_key: str) -> Calibration | None:
    """The voice's :class:`Calibration` at the request's settings, once per worker process and voice
    (~1 s of CPU with espeak); None for a neural engine (a render is costly, and varies)."""
    if not is_rule_based(engine.name):
        return None
    key = (engine.name, engine.version, voice_key, request.language, tuple(sorted(request.params.items())))
    with _calibration_lock:
        if key in _calibrated:
            return _calibrated[key]
    texts = CALIBRATION_TEXTS + CALIBRATION_PARAGRAPHS + CALIBRATION_LINES
    waves = engine.synthesize([replace(request, text=text) for text in texts])
    medians = [
        check_audio(wave, engine.sample_rate, text).f0_median_hz
        for wave, text in zip(waves[: len(CALIBRATION_TEXTS)], CALIBRATION_TEXTS, strict=True)
    ]
    floor = measure_floor(zip(waves, texts, strict=True), engine.sample_rate, policy_for(engine.name))
    found = Calibration(median_f0(medians), floor)
    with _calibration_lock:
        _calibrated[key] = found
    return found


def calibrated_pitch(engine: Engine, request: SynthesisRequest, voice_key: str) -> float | None:
    """The median F0 an engine that reads by rule gives a voice's prompt at the request's settings,
    measured on :data:`CALIBRATION_TEXTS` read with it: what the pitch check holds the voice's chunks to
    until the job has learnt it from its own (the first chunks of a job, every chunk of a short one, would
    otherwise have no pitch check: another voice would pass). Measured, not the prompt's own figure:
    espeak's rendering sits up to 3 semitones under the reference's median for a lively voice. None for
    a neural engine or when nothing voiced was heard."""
    found = calibration(engine, request, voice_key)
    return None if found is None else found.f0_hz


@dataclass(frozen=True)
class Expected:
    """What a voice's chunks should sound like in this job, learnt from its chunks that passed so far
    (None until there are enough: then only the plausible range of speech rates holds). Learnt, not
    taken from the voice's prompt: a reference whose transcript is wrong would otherwise set a rate
    that every chunk fails."""

    rate: SpeakingRate | None = None
    f0_hz: float | None = None
    level_db: float | None = None  # the speech level of the voice's chunks in this job (loudness outliers)
    floor: VoiceFloor | None = None  # the voice's own edge and noise figures (its calibration)

    @classmethod
    def learnt(cls, passed: Sequence[tuple[str, Mapping[str, Any]]]) -> Expected:
        """From ``(spoken text, stored QA)`` of the voice's chunks that passed (at the same rate)."""
        speech = [(text, float(qa.get("speech_s") or 0.0)) for text, qa in passed]
        enough = len(passed) >= MIN_PITCH_CHUNKS
        f0 = median_f0([qa.get("f0_median_hz") for _, qa in passed]) if enough else None
        level = median_level([qa.get("level_db") for _, qa in passed]) if enough else None
        return cls(measure_speaking_rate(speech), f0, level)


MIN_PITCH_CHUNKS = 3


def assess(
    engine: Engine, wave: Any, request: SynthesisRequest, settings: QaSettings, expected: Expected
) -> QaResult:
    """The chunk's checks; with the speaker check where the engine has a speaker encoder (its score is
    recorded even when the policy's ``min_speaker_similarity`` is 0, off)."""
    encoder = speaker_encoder(engine)
    return assess_chunk(
        wave,
        engine.sample_rate,
        request.text,
        policy=settings.policy,
        rate=expected.rate,
        expected_f0_hz=expected.f0_hz,
        expected_level_db=expected.level_db,
        floor=expected.floor,
        recogniser=(settings.recogniser or recogniser()) if settings.transcript else None,
        speaker=None if encoder is None else (encoder, request.prompt),
    )


def with_calibration(
    expected: Expected, engine: Engine, request: SynthesisRequest, voice_key: str
) -> Expected:
    """``expected`` with the voice's floor, and with its :func:`calibrated_pitch` where it has learnt no
    pitch yet (an engine that reads by rule; a neural one's stays as it is)."""
    found = calibration(engine, request, voice_key)
    if found is None:
        return expected
    f0 = expected.f0_hz if expected.f0_hz is not None else found.f0_hz
    return replace(expected, f0_hz=f0, floor=found.floor)


def _better(a: Take, b: Take) -> bool:
    """Whether take ``a`` is better than ``b``: passing first, then fewer failed checks (a take with no
    audio is worst)."""

    def rank(t: Take) -> tuple[int, int, int]:
        failed = 0 if t.result is None else len(t.result.failed)
        return (int(t.passed), -int(t.fatal), -failed)

    return rank(a) > rank(b)


def review(
    engine: Engine,
    requests: Sequence[SynthesisRequest],
    rendered: Sequence[tuple[Any, list[WordMark]]],
    settings: QaSettings,
    synthesize: Any,
    expected: Sequence[Expected],
    renew: Callable[[], object] | None = None,
) -> list[Take]:
    """The take to keep of each request: its first rendering if it passes, else the best of up to
    ``max_rerenders`` more, each with a new seed (``synthesize`` renders a batch as the render step
    does). ``renew`` is called before each request's check and each new take (the render step keeps its
    claims' leases up: cheap when no renewal is due)."""
    takes = []
    for request, (wave, marks), hold in zip(requests, rendered, expected, strict=True):
        if not settings.enabled:  # no checks but one: audio with nothing in it never counts as done
            takes.append(Take(wave, marks, unusable_audio(wave, engine.sample_rate, settings.policy), 1))
            continue
        if renew is not None:
            renew()
        best = Take(wave, marks, assess(engine, wave, request, settings, hold), 1)
        renders = 1
        while not best.passed and renders <= settings.max_rerenders:
            if renew is not None:
                renew()
            retry = replace(request, seed=(request.seed + 7919 * renders) & 0x7FFFFFFF)
            ((wave2, marks2),) = synthesize(engine, [retry])
            renders += 1
            take = Take(wave2, marks2, assess(engine, wave2, retry, settings, hold), renders)
            if _better(take, best):
                best = take
        takes.append(replace(best, renders=renders))
        if renders > 1:
            assert best.result is not None
            outcome = "passed" if best.passed else "still fails: " + "; ".join(best.result.reasons)
            log.info("chunk QA: %r rendered %d times, %s", request.text[:60], renders, outcome)
    return takes


def learnt(
    session: Session, job_id: uuid.UUID, voice_ids: Iterable[uuid.UUID], limit: int = 200
) -> dict[tuple[uuid.UUID, float | None], Expected]:
    """What each voice's chunks should sound like, from its chunks of this job that passed QA (the
    latest ``limit``), by (voice, chunk rate): a chunk's SSML rate changes its expected speaking rate."""
    rows = session.execute(
        select(Chunk.voice_id, Chunk.rate, Chunk.text, Chunk.qa)
        .where(
            Chunk.job_id == job_id,
            Chunk.voice_id.in_(list(voice_ids)),
            Chunk.status == ChunkStatus.DONE.value,
            Chunk.flagged.is_(False),
        )
        .order_by(Chunk.seq.desc())
        .limit(limit * 4)
    ).all()
    grouped: dict[tuple[uuid.UUID, float | None], list[tuple[str, Mapping[str, Any]]]] = {}
    for row in rows:
        if isinstance(row.qa, Mapping) and row.qa.get("passed"):
            grouped.setdefault((row.voice_id, row.rate), []).append((row.text, row.qa))
    return {key: Expected.learnt(passed[:limit]) for key, passed in grouped.items()}

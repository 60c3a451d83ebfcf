"""Short text spoken at once (``POST /v1/audio/speech``), the API's side before the stream: the input
planned as a plain script with its first sentence a chunk of its own (:func:`first_sentence_apart`), the
job's row, and its admission: at most ``TOME_SPEECH_PER_OWNER`` speech jobs of an owner run at once
(:func:`admit`, race-safe; the API answers 429 beyond it), inserted running with its chunks marked sent
for ``tome.speak`` (worker.jobs.speech). No Flask or Celery imports."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from sqlalchemy import delete, func, select, true
from sqlalchemy.orm import Session

from models import Job, JobKind, JobStatus, SpeechWait, utcnow
from worker.jobs import state
from worker.jobs.plan import PlanRequest, plan
from worker.script import ChunkSpec, split_sentences

# A running speech job older than this no longer counts against its owner's TOME_SPEECH_PER_OWNER: the
# API process that streamed it died (a live one ends every job it streams, worker.jobs.speech_stream).
ORPHAN_SECONDS = 600
WAIT_SLACK = 30  # seconds a waiting request's speech place outlives its wait, should its API process die
FIRST_CHUNK_CHARS = 100  # a longer first chunk is cut after its first sentence
ENGINE_SPEEDS = (0.5, 2.0)  # the part of a speed the engine renders (a job's speed range); ffmpeg the rest


@dataclass(frozen=True)
class Speed:
    """A requested speed as the engine's ``rate_scale`` times an ffmpeg ``atempo`` factor: the engine
    speaks faster or slower for what it can (a natural voice rather than a time-stretched one), ffmpeg
    stretches whatever is left (OpenAI's range, 0.25 to 4, is wider than a job's)."""

    requested: float
    engine: float
    tempo: float

    @classmethod
    def of(cls, speed: float) -> Speed:
        low, high = ENGINE_SPEEDS
        engine = min(max(speed, low), high)
        return cls(speed, engine, round(speed / engine, 6))


@dataclass(frozen=True)
class SpeechPlan:
    specs: list[ChunkSpec]
    chunk_voices: list[uuid.UUID]
    estimated_seconds: float  # speech and pauses, at the requested speed

    def voice_ids(self, default: uuid.UUID) -> list[uuid.UUID]:
        used = list(dict.fromkeys(self.chunk_voices))
        return [default, *(v for v in used if v != default)] if default in used else used


def plan_speech(session: Session, request: PlanRequest, speed: Speed, language: str) -> SpeechPlan:
    """The input planned as a plain script (raises :class:`worker.jobs.plan.PlanError`), its first chunk
    cut after the first sentence."""
    script_plan = plan(session, request)
    specs, voices = first_sentence_apart(script_plan.specs, script_plan.chunk_voices, language)
    seconds = script_plan.size.total_seconds / speed.requested
    return SpeechPlan(specs, voices, round(seconds, 1))


def first_sentence_apart(
    specs: Sequence[ChunkSpec], voices: Sequence[uuid.UUID], language: str = "en"
) -> tuple[list[ChunkSpec], list[uuid.UUID]]:
    """The chunks with the first one cut after its first sentence, when it is longer than
    :data:`FIRST_CHUNK_CHARS` and holds more than one: the time to the first audio is the time to render
    that sentence, not a paragraph. The two parts keep the chunk's voice and rate; a sentence pause
    falls between them."""
    if not specs or len(specs[0].text) <= FIRST_CHUNK_CHARS:
        return list(specs), list(voices)
    first = specs[0]
    sentences = split_sentences(first.text, language)
    if len(sentences) < 2:
        return list(specs), list(voices)
    head = ChunkSpec(0, first.chapter, sentences[0], "sentence", first.voice, rate=first.rate)
    tail = replace(first, seq=1, text=" ".join(sentences[1:]), source=None, fired=())
    rest = [replace(spec, seq=spec.seq + 1) for spec in specs[1:]]
    return [head, tail, *rest], [voices[0], *voices]


def new_job(
    *,
    owner: str,
    api_key_id: uuid.UUID | None,
    voice_id: uuid.UUID,
    engine: str,
    fmt: str,
    speed: Speed,
    speech_plan: SpeechPlan,
    title: str,
) -> Job:
    """The speech job's row, running from the start (nothing to wait for but its task)."""
    row = state.SpeechRow(
        owner=owner,
        api_key_id=api_key_id,
        voice_id=voice_id,
        engine=engine,
        title=" ".join(title.split())[:200] or "speech",
        output_format=fmt,
        options={
            "speed": speed.requested,
            "rate_scale": speed.engine,
            "tempo": speed.tempo,
            "voice_ids": [str(v) for v in speech_plan.voice_ids(voice_id)],
        },
        chunks_total=len(speech_plan.specs),
        estimated_seconds=speech_plan.estimated_seconds,
    )
    return state.speech_job(row, utcnow())


class SpeechBusy(Exception):
    """The owner already has its share of speech jobs running."""

    def __init__(self, running: int, limit: int) -> None:
        super().__init__(
            f"{running} speech requests of yours are still rendering or waiting for a voice build; at most "
            f"{limit} at once (TOME_SPEECH_PER_OWNER): retry when one has ended"
        )
        self.running, self.limit = running, limit


def admit(session: Session, job: Job, speech_plan: SpeechPlan, per_owner: int) -> bool:
    """Insert the speech job and its chunks unless its owner already has ``per_owner`` speech jobs running
    (then :class:`SpeechBusy`, and the caller rolls back); True when it is the owner's only one, which is
    sent at the speech priority (worker.celery_app.task_routes).

    Race-safe without a counter to keep in step: the owner's admissions are serialised (a transaction
    lock on the owner on PostgreSQL; SQLite has one writer, and the insert takes the write lock) and the
    count runs after the insert, in the same transaction, so two requests at once cannot both pass the
    last place. A job older than :data:`ORPHAN_SECONDS` no longer counts (its API process died while
    streaming it), so such a job cannot lock its owner out."""
    _serialise(session, job.owner)
    _insert_speech(session, job, speech_plan)
    running = running_speech(session, job.owner, but=job.id)
    if running >= per_owner:
        raise SpeechBusy(running, per_owner)
    return running == 0


def hold_wait(session: Session, owner: str, voice_id: uuid.UUID, per_owner: int, seconds: float) -> uuid.UUID:
    """A speech place for a request about to wait up to ``seconds`` for its voice's build, inserted unless
    its owner's speech jobs and waiting requests already take ``per_owner`` (then :class:`SpeechBusy`, and
    the caller rolls back); race-safe as :func:`admit` is. The caller commits, and ends it with
    :func:`end_wait`; a place whose API process died frees itself a little after ``seconds``."""
    _serialise(session, owner)
    now = utcnow()
    session.execute(delete(SpeechWait).where(SpeechWait.owner == owner, SpeechWait.until < now))
    wait = SpeechWait(owner=owner, voice_id=voice_id, until=now + timedelta(seconds=seconds + WAIT_SLACK))
    session.add(wait)
    session.flush()
    running = running_speech(session, owner, but=wait.id)
    if running >= per_owner:
        raise SpeechBusy(running, per_owner)
    return wait.id


def end_wait(session: Session, wait_id: uuid.UUID) -> None:
    """The waiting request's speech place, freed (the caller commits)."""
    session.execute(delete(SpeechWait).where(SpeechWait.id == wait_id))


def running_speech(session: Session, owner: str, but: uuid.UUID | None = None) -> int:
    """The owner's speech jobs and requests waiting for a voice build that count against
    TOME_SPEECH_PER_OWNER (``but`` left out: a job's or a wait's id). The API asks this before it starts
    an encoder too, so that a refused request costs no ffmpeg process; only :func:`admit`'s answer is
    race-safe."""
    waiting = session.scalar(
        select(func.count(SpeechWait.id)).where(
            SpeechWait.owner == owner,
            SpeechWait.until >= utcnow(),
            SpeechWait.id != but if but is not None else true(),
        )
    )
    return int(waiting or 0) + (
        session.scalar(
            select(func.count(Job.id)).where(
                Job.owner == owner,
                Job.kind == JobKind.SPEECH.value,
                Job.status == JobStatus.RUNNING.value,
                Job.id != but if but is not None else true(),
                Job.created_at > utcnow() - timedelta(seconds=ORPHAN_SECONDS),
            )
        )
        or 0
    )


def _serialise(session: Session, owner: str) -> None:
    """Serialise the owner's admissions and waits until the transaction ends: a transaction lock on the
    owner on PostgreSQL; SQLite has one writer, and the insert that follows takes the write lock."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(_owner_lock(owner))))


def _owner_lock(owner: str) -> int:
    """A signed 64-bit key for PostgreSQL's advisory lock on the owner's speech admissions."""
    digest = hashlib.sha256(f"tome-speech:{owner}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _insert_speech(session: Session, job: Job, speech_plan: SpeechPlan) -> None:
    """The job and its chunks, the chunks marked sent: only ``tome.speak`` renders them (the caller
    commits, then sends it)."""
    state.insert_job(session, job, speech_plan.specs, speech_plan.chunk_voices)
    session.flush()
    state.mark_enqueued(session, job.id, [spec.seq for spec in speech_plan.specs])

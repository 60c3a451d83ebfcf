"""Short text spoken at once (``POST /v1/audio/speech``): a job of kind ``speech`` whose chunks are read
by the API process as they finish and streamed to the client (worker.jobs.speech_stream). No Flask or
Celery imports.

A job, so that quotas, ownership, cancelling, attempt tokens and leases hold for speech exactly as for
books. What differs: the input is planned as a plain script with its first sentence a chunk of its own
(:func:`first_sentence_apart`); at most ``TOME_SPEECH_PER_OWNER`` speech jobs of an owner run at once
(:func:`admit`, race-safe; the API answers 429 beyond it); the job is inserted running with its chunks
marked sent, rendered in order by one ``tome.speak`` task once its voice is ready; it succeeds
when its last chunk is done (no stitch, no webhook), and :func:`end_speech` cancels it if the client left
and forgets its audio. See docs/how-it-works.md, "Speech requests"."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from pathlib import Path

import numpy as np
from sqlalchemy import delete, func, select, true
from sqlalchemy.orm import Session

from models import Chunk, ChunkStatus, Job, JobKind, JobStatus, SpeechWait, unit_of_work, utcnow
from worker.audio import Pauses, apply_fades, write_wav_atomic
from worker.audio.dsp import silence_bounds
from worker.engines import Engine, EngineError, SynthesisRequest
from worker.engines.base import RATE_SCALE, Waveform
from worker.jobs import actions, state
from worker.jobs.plan import PlanRequest, plan
from worker.jobs.render import synthesize_in_halves
from worker.jobs.reuse import text_seed
from worker.jobs.scheduler import schedule
from worker.runtime import Runtime
from worker.script import ChunkSpec, split_sentences
from worker.task_names import Enqueue
from worker.voices.builds import request_builds
from worker.voices.prompts import VoiceCacheFailed, VoiceNotReady, ensure_ready, load_voice_prompt
from worker.voices.store import Prompt

log = logging.getLogger(__name__)

# A running speech job older than this no longer counts against its owner's TOME_SPEECH_PER_OWNER: the
# API process that streamed it died (a live one ends every job it streams, worker.jobs.speech_stream).
ORPHAN_SECONDS = 600
WAIT_SLACK = 30  # seconds a waiting request's speech place outlives its wait, should its API process die
FIRST_CHUNK_CHARS = 100  # a longer first chunk is cut after its first sentence
ENGINE_SPEEDS = (0.5, 2.0)  # the part of a speed the engine renders (a job's speed range); ffmpeg the rest
PAUSES = Pauses()  # the pauses between chunks, as a book's defaults


class SpeechError(Exception):
    """Why a speech job ended without its audio; ``code`` and ``field`` as the API answers them."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.field = code, message, field


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
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(_owner_lock(job.owner))))
    insert_speech(session, job, speech_plan)
    running = running_speech(session, job.owner, but=job.id)
    if running >= per_owner:
        raise SpeechBusy(running, per_owner)
    return running == 0


def hold_wait(session: Session, owner: str, voice_id: uuid.UUID, per_owner: int, seconds: float) -> uuid.UUID:
    """A speech place for a request about to wait up to ``seconds`` for its voice's build, inserted unless
    its owner's speech jobs and waiting requests already take ``per_owner`` (then :class:`SpeechBusy`, and
    the caller rolls back); race-safe as :func:`admit` is. The caller commits, and ends it with
    :func:`end_wait`; a place whose API process died frees itself a little after ``seconds``."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(_owner_lock(owner))))
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


def _owner_lock(owner: str) -> int:
    """A signed 64-bit key for PostgreSQL's advisory lock on the owner's speech admissions."""
    digest = hashlib.sha256(f"tome-speech:{owner}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def insert_speech(session: Session, job: Job, speech_plan: SpeechPlan) -> None:
    """The job and its chunks, the chunks marked sent: only ``tome.speak`` renders them (the caller
    commits, then sends it)."""
    state.insert_job(session, job, speech_plan.specs, speech_plan.chunk_voices)
    session.flush()
    state.mark_enqueued(session, job.id, [spec.seq for spec in speech_plan.specs])


# -- the worker: tome.speak ---------------------------------------------------------------------------


class SpeakOutcome(StrEnum):
    DONE = "done"  # every chunk rendered, the job succeeded
    SKIPPED = "skipped"  # not a running speech job (ended, or a duplicate message found nothing to do)
    STOPPED = "stopped"  # the job ended meanwhile (its client left): the rest is not rendered
    FAILED = "failed"


def speak(rt: Runtime, job_id: uuid.UUID, enqueue: Enqueue) -> SpeakOutcome:
    """Render a speech job's chunks in order, each marked done as soon as it is stored; then the render
    slots its chunks held go back to the books (worker.jobs.scheduler)."""
    try:
        return _speak(rt, job_id, enqueue)
    except Exception as exc:
        fail_speech(rt, job_id, "speech_failed", f"the speech could not be rendered: {exc}")
        raise
    finally:
        schedule(rt, enqueue)


def _speak(rt: Runtime, job_id: uuid.UUID, enqueue: Enqueue) -> SpeakOutcome:
    with rt.sessions() as session:
        job = session.get(Job, job_id)
        if job is None or job.kind != JobKind.SPEECH or job.status != JobStatus.RUNNING:
            return SpeakOutcome.SKIPPED
        engine_name, rate_scale = job.engine, float(job.options.get("rate_scale", 1.0))
        pending = session.execute(
            select(Chunk.seq, Chunk.voice_id)
            .where(Chunk.job_id == job_id, Chunk.status != ChunkStatus.DONE.value)
            .order_by(Chunk.seq)
        ).all()
    if not pending:
        return SpeakOutcome.DONE if finish_speech(rt, job_id) else SpeakOutcome.SKIPPED
    try:
        prompts = _prompts(rt, list(dict.fromkeys(row.voice_id for row in pending)), enqueue)
    except SpeechError as exc:
        fail_speech(rt, job_id, exc.code, exc.message, exc.field)
        return SpeakOutcome.FAILED
    engine = rt.engine(engine_name)
    seqs = [row.seq for row in pending]
    for group in [seqs[:1], *actions.batches(seqs[1:], rt.settings.tasks.chunks_per_task)]:
        outcome = _render_group(rt, job_id, engine, group, prompts, rate_scale)
        if outcome is not None:
            return outcome
    finish_speech(rt, job_id)
    log.info("speech: %d chunks rendered", len(seqs))
    return SpeakOutcome.DONE


def _render_group(
    rt: Runtime,
    job_id: uuid.UUID,
    engine: Engine,
    seqs: list[int],
    prompts: dict[uuid.UUID, tuple[Prompt, str]],
    rate_scale: float,
) -> SpeakOutcome | None:
    """Claim, render in one engine call and store one batch; an outcome when the task must stop."""
    lease = timedelta(seconds=rt.settings.speech.wait_seconds)
    with unit_of_work(rt.sessions) as session:
        token, claimed = state.claim_chunks(
            session, job_id, seqs, lease, rt.settings.tasks.max_chunk_attempts, utcnow()
        )
    if not claimed:
        return None  # another delivery of this task has them
    if not actions.still_running(rt, job_id):
        actions.release(rt, [c.id for c in claimed], token)
        return SpeakOutcome.STOPPED
    requests = [
        SynthesisRequest(
            c.text,
            prompts[c.voice_id][0],
            prompts[c.voice_id][1],
            _params(rate_scale * (c.rate if c.rate is not None else 1.0)),
            seed=text_seed(c.text) if c.seed is None else c.seed,
        )
        for c in claimed
    ]
    try:
        takes = synthesize_in_halves(engine, requests)
    except EngineError as exc:
        actions.release(rt, [c.id for c in claimed], token)
        fail_speech(rt, job_id, "engine_error", f"the engine could not read the input: {exc}", "input")
        return SpeakOutcome.FAILED
    except Exception:
        actions.release(rt, [c.id for c in claimed], token)
        raise
    for chunk, (wave, _marks) in zip(claimed, takes, strict=True):
        if not _store(rt, job_id, engine.sample_rate, chunk, wave, token):
            actions.release(rt, [c.id for c in claimed], token)
            return SpeakOutcome.STOPPED
    return None


def _params(scale: float) -> dict[str, float]:
    scale = round(scale, 4)
    return {} if scale == 1.0 else {RATE_SCALE: scale}


def _store(
    rt: Runtime, job_id: uuid.UUID, rate: int, chunk: state.Claimed, wave: Waveform, token: str
) -> bool:
    """Trim, fade and write the chunk, then mark it done if the job still runs, in one transaction whose
    first statement is the write (so the check sees any cancel committed before it); if the job has
    ended, the file goes again. False when the job has ended."""
    samples = np.asarray(wave, dtype=np.float32)
    start, stop = silence_bounds(samples, rate)
    samples = apply_fades(samples[start:stop], rate)
    path = rt.layout.chunk_audio(job_id, chunk.seq, token)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        size = write_wav_atomic(path, samples, rate)
    except FileNotFoundError:
        # The API removes an ended job's folder (the client hung up: the job was cancelled) and can do so
        # between the mkdir and the write. That is the job ending, not a failure; anything else is.
        if _still_running(rt, job_id):
            raise
        _remove_empty(path.parent)
        return False
    rt.storage.publish(path)  # the API process streaming it may be on another host
    session = rt.sessions()
    try:
        done = state.complete_chunk(session, chunk.id, job_id, token, str(path), len(samples) / rate, size)
        if done and state.is_running(session, job_id):
            session.commit()
            return True
        session.rollback()
    finally:
        session.close()
    rt.storage.remove(path)
    _remove_empty(path.parent)
    return False


def _still_running(rt: Runtime, job_id: uuid.UUID) -> bool:
    session = rt.sessions()
    try:
        return state.is_running(session, job_id)
    finally:
        session.close()


def _remove_empty(folder: Path) -> None:
    """The chunk folder (and the job's) of an ended speech job, if a late write re-created them."""
    for candidate in (folder, folder.parent):
        with contextlib.suppress(OSError):
            candidate.rmdir()


def _prompts(rt: Runtime, voices: list[uuid.UUID], enqueue: Enqueue) -> dict[uuid.UUID, tuple[Prompt, str]]:
    """Each voice's prompt and language. The API admits a request once its voice is ready; one that is
    not ready now (its prompt went stale meanwhile) is not built here, outside the build bounds and quota:
    its build is asked for as any job's is (worker.voices.builds) and the speech fails ``voice_not_ready``
    (a 409 with Retry-After before the first byte)."""
    prompts: dict[uuid.UUID, tuple[Prompt, str]] = {}
    for voice_id in voices:
        try:
            prompts[voice_id] = load_voice_prompt(rt, voice_id)
            continue
        except VoiceNotReady:
            pass
        except VoiceCacheFailed as exc:
            raise SpeechError("voice_unavailable", str(exc), "voice") from exc
        try:
            ensure_ready(rt, voice_id)  # marks a prompt of another engine stale, so its build is asked for
        except VoiceCacheFailed as exc:
            raise SpeechError("voice_unavailable", str(exc), "voice") from exc
        request_builds(rt, [voice_id], enqueue)
        raise SpeechError(
            "voice_not_ready",
            f"the prompt of voice {voice_id} is being built; retry in a few seconds",
            "voice",
        )
    return prompts


# -- the job's end, from the worker and from the API ----------------------------------------------------


def finish_speech(rt: Runtime, job_id: uuid.UUID) -> bool:
    """running -> succeeded once every chunk is done (the worker after its last chunk, or the API once it
    has streamed it: whichever comes first)."""
    with unit_of_work(rt.sessions) as session:
        return state.finish_speech(session, job_id, utcnow())


def fail_speech(rt: Runtime, job_id: uuid.UUID, code: str, message: str, field: str | None = None) -> bool:
    """Fail the job with ``error_detail`` (code, message, field) in the same transaction, so that the API
    never reads the failure without its reason."""
    with unit_of_work(rt.sessions) as session:
        if not state.fail_job(session, job_id, message, utcnow()):
            return False
        detail: dict[str, object] = {"code": code, "message": message}
        if field:
            detail["field"] = field
        state.record_error_detail(session, job_id, detail)
    log.warning("speech failed: %s", message)
    return True


def end_speech(rt: Runtime, job_id: uuid.UUID, streamed_all: bool) -> None:
    """The API is done with the job: finished if every chunk was streamed, else cancelled (its task stops
    before the next batch); the chunks' audio is forgotten and their files removed."""
    now = utcnow()
    with unit_of_work(rt.sessions) as session:
        if not streamed_all:
            state.cancel_job(session, job_id, now)
    if streamed_all:
        finish_speech(rt, job_id)
    with unit_of_work(rt.sessions) as session:
        state.forget_audio(session, job_id)
    rt.storage.remove_folder(rt.layout.job_dir(job_id))


@dataclass(frozen=True)
class ReadyChunk:
    seq: int
    path: str
    pause_seconds: float  # the silence after it, at the engine's rate of speech


def ready_chunk(rt: Runtime, job_id: uuid.UUID, seq: int) -> ReadyChunk | None:
    """Chunk ``seq`` once it is done; None while it renders; :class:`SpeechError` once the job has ended
    without it (failed: with the job's ``error_detail``; cancelled)."""
    with rt.sessions() as session:
        row = session.execute(
            select(
                Chunk.status,
                Chunk.audio_path,
                Chunk.pause_after,
                Chunk.pause_seconds,
                Job.status.label("job_status"),
                Job.error,
                Job.options,
            )
            .join(Job, Job.id == Chunk.job_id)
            .where(Chunk.job_id == job_id, Chunk.seq == seq)
        ).one_or_none()
    if row is None:
        raise SpeechError("speech_failed", f"the speech job has no chunk {seq}")
    if row.status == ChunkStatus.DONE.value and row.audio_path:
        pause = PAUSES.seconds(row.pause_after if row.pause_seconds is None else row.pause_seconds)
        scale = float(row.options.get("rate_scale", 1.0)) if isinstance(row.options, dict) else 1.0
        return ReadyChunk(seq, str(row.audio_path), pause / scale)
    if row.job_status in (JobStatus.RUNNING.value, JobStatus.SUCCEEDED.value):
        return None
    detail = row.options.get("error_detail") if isinstance(row.options, dict) else None
    if isinstance(detail, dict):
        raise SpeechError(str(detail.get("code")), str(detail.get("message")), detail.get("field"))
    raise SpeechError("speech_failed", row.error or f"the speech job was {row.job_status}")

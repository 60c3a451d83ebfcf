"""Short text spoken at once (``POST /v1/audio/speech``), the worker's side: :func:`speak` (the task
``tome.speak``, the one entry) renders a speech job's chunks in order once its voice is ready, and the
job succeeds when its last chunk is done (no stitch, no webhook). No Flask or Celery imports.

A job, so that quotas, ownership, cancelling, attempt tokens and leases hold for speech exactly as for
books. The API plans and admits it (worker.jobs.speech_admission: the first sentence a chunk of its own,
at most ``TOME_SPEECH_PER_OWNER`` running at once), inserted running with its chunks marked sent; the
API process reads the chunks as they finish, streams them and ends the job (worker.jobs.speech_stream).
See docs/how-it-works.md, "Speech requests"."""

from __future__ import annotations

import contextlib
import logging
import uuid
from datetime import timedelta
from enum import StrEnum
from pathlib import Path

import numpy as np
from sqlalchemy import select

from models import Chunk, ChunkStatus, Job, JobKind, JobStatus, unit_of_work, utcnow
from worker.audio import apply_fades, write_wav_atomic
from worker.audio.dsp import silence_bounds
from worker.engines import Engine, EngineError, SynthesisRequest
from worker.engines.base import RATE_SCALE, Waveform
from worker.jobs import actions, state
from worker.jobs.render import synthesize_in_halves
from worker.jobs.reuse import text_seed
from worker.jobs.scheduler import schedule
from worker.runtime import Runtime
from worker.task_names import Enqueue
from worker.voices.builds import request_builds
from worker.voices.prompts import VoiceCacheFailed, VoiceNotReady, ensure_ready, load_voice_prompt
from worker.voices.store import Prompt

log = logging.getLogger(__name__)


class SpeechError(Exception):
    """Why a speech job ended without its audio; ``code`` and ``field`` as the API answers them."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.field = code, message, field


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
        _fail_speech(rt, job_id, "speech_failed", f"the speech could not be rendered: {exc}")
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
        return SpeakOutcome.DONE if _finish_speech(rt, job_id) else SpeakOutcome.SKIPPED
    try:
        prompts = _prompts(rt, list(dict.fromkeys(row.voice_id for row in pending)), enqueue)
    except SpeechError as exc:
        _fail_speech(rt, job_id, exc.code, exc.message, exc.field)
        return SpeakOutcome.FAILED
    engine = rt.engine(engine_name)
    seqs = [row.seq for row in pending]
    for group in [seqs[:1], *actions.batches(seqs[1:], rt.settings.tasks.chunks_per_task)]:
        outcome = _render_group(rt, job_id, engine, group, prompts, rate_scale)
        if outcome is not None:
            return outcome
    _finish_speech(rt, job_id)
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
        _fail_speech(rt, job_id, "engine_error", f"the engine could not read the input: {exc}", "input")
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


# -- the job's end -------------------------------------------------------------------------------------


def _finish_speech(rt: Runtime, job_id: uuid.UUID) -> bool:
    """running -> succeeded once every chunk is done (the worker after its last chunk; the API finishes it
    too once it has streamed it, worker.jobs.speech_stream: whichever comes first)."""
    with unit_of_work(rt.sessions) as session:
        return state.finish_speech(session, job_id, utcnow())


def _fail_speech(rt: Runtime, job_id: uuid.UUID, code: str, message: str, field: str | None = None) -> bool:
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

"""What the tasks do: start a job, render a batch of its chunks, stitch the finished chunks.

Framework-free so it can be called from Celery tasks, tests and benchmarks alike; the caller passes an
``enqueue(task_name, args)`` function that sends a follow-up message *after* the state it depends on
is committed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from models import Chunk, ChunkStatus, Job, JobStatus, unit_of_work, utcnow
from worker import state
from worker.audio import Pauses, StitchPiece, apply_fades, stitch, trim_silence, write_wav_atomic
from worker.engines import Engine, EngineError, SynthesisRequest, release_memory
from worker.runtime import Runtime
from worker.voice_prompts import VoiceCacheFailed, VoiceNotReady, ensure_ready, load_voice_prompt

log = logging.getLogger(__name__)

Enqueue = Callable[[str, list[Any]], None]

START_JOB = "tome.start_job"
RENDER_CHUNKS = "tome.render_chunks"
STITCH_JOB = "tome.stitch_job"
BUILD_VOICE = "tome.build_voice"
DELIVER_WEBHOOK = "tome.deliver_webhook"


class WaitForVoice(Exception):
    """The job's voice prompt is being built; try again shortly."""


def job_dir(rt: Runtime, job_id: uuid.UUID) -> Path:
    return rt.settings.data_dir.resolve() / "jobs" / str(job_id)


def batches(seqs: Sequence[int], size: int) -> list[list[int]]:
    return [list(seqs[i : i + size]) for i in range(0, len(seqs), size)]


def enqueue_chunks(rt: Runtime, job_id: uuid.UUID, seqs: Sequence[int], enqueue: Enqueue) -> int:
    """Record that these chunks were sent (after commit), then send them in batches."""
    groups = batches(sorted(seqs), rt.settings.chunks_per_task)
    with unit_of_work(rt.sessions) as session:
        state.mark_enqueued(session, job_id, list(seqs))
    for group in groups:
        enqueue(RENDER_CHUNKS, [str(job_id), group])
    return len(groups)


def start_job(rt: Runtime, job_id: uuid.UUID, enqueue: Enqueue, request_builds: bool = True) -> str:
    """queued -> running once every voice the job's chunks use has a ready prompt; then send every
    pending chunk.

    The voices are those of the chunks (a script's voice directives), not only the job's own voice, which
    needs no prompt if no chunk uses it. Every voice not ready yet gets a build message (a no-op where a
    build runs or the prompt is ready), so several voices build at once, and the task waits. A voice whose
    build failed, or that was deleted, fails the job with a message naming that voice.
    """
    with rt.sessions() as session:
        job = session.get(Job, job_id)
        if job is None or job.status not in (JobStatus.QUEUED, JobStatus.RUNNING):
            return "skipped"
        default = job.voice_id
        used = set(session.scalars(select(Chunk.voice_id).where(Chunk.job_id == job_id).distinct()))
    waiting: list[uuid.UUID] = []
    for voice_id in sorted(used, key=lambda v: (v != default, str(v))):  # the job's own voice first
        try:
            if not ensure_ready(rt, voice_id):
                waiting.append(voice_id)
        except VoiceCacheFailed as exc:
            _fail(rt, job_id, None, None, str(exc), enqueue)
            return "failed"
    if waiting:
        if request_builds:  # the task asks on its first try and now and then, not on every short retry
            for voice_id in waiting:
                enqueue(BUILD_VOICE, [str(voice_id)])
        raise WaitForVoice(", ".join(str(v) for v in waiting))
    with unit_of_work(rt.sessions) as session:
        state.start_job(session, job_id, utcnow())
        pending = list(
            session.scalars(
                select(Chunk.seq).where(Chunk.job_id == job_id, Chunk.status == ChunkStatus.PENDING.value)
            )
        )
    enqueue_chunks(rt, job_id, pending, enqueue)
    log.info("job %s: started, %d chunks sent", job_id, len(pending))
    return "started"


def _job_status(rt: Runtime, job_id: uuid.UUID) -> str | None:
    with rt.sessions() as session:
        return session.scalar(select(Job.status).where(Job.id == job_id))


def _fail(
    rt: Runtime,
    job_id: uuid.UUID,
    chunk_id: int | None,
    token: str | None,
    error: str,
    enqueue: Enqueue | None = None,
) -> None:
    with unit_of_work(rt.sessions) as session:
        if chunk_id is not None:
            state.fail_chunk(session, chunk_id, token, error)
        failed = state.fail_job(session, job_id, error, utcnow())
    log.warning("job %s: failed: %s", job_id, error)
    if failed and enqueue is not None:
        enqueue(DELIVER_WEBHOOK, [str(job_id)])


def _release(rt: Runtime, claimed: Sequence[state.Claimed], token: str) -> None:
    with unit_of_work(rt.sessions) as session:
        for chunk in claimed:
            state.release_chunk(session, chunk.id, token)


def render_chunks(rt: Runtime, job_id: uuid.UUID, seqs: list[int], enqueue: Enqueue) -> int:
    """Render the chunks of ``seqs`` that this call manages to claim; returns how many it completed."""
    settings = rt.settings
    with rt.sessions() as session:
        job = session.get(Job, job_id)
        if job is None or job.status != JobStatus.RUNNING:
            return 0
        engine_name = job.engine
    with unit_of_work(rt.sessions) as session:
        token, claimed = state.claim_chunks(
            session,
            job_id,
            seqs,
            timedelta(seconds=settings.chunk_lease_seconds),
            settings.max_chunk_attempts,
            utcnow(),
        )
    if not claimed:
        maybe_begin_stitch(rt, job_id, enqueue)
        return 0
    engine = rt.engine(engine_name)
    prompts: dict[uuid.UUID, tuple[Any, str]] = {}
    try:
        for voice_id in {c.voice_id for c in claimed}:
            prompts[voice_id] = load_voice_prompt(rt, voice_id)
    except VoiceCacheFailed as exc:
        _fail(rt, job_id, claimed[0].id, token, str(exc), enqueue)
        return 0
    except VoiceNotReady:
        _release(rt, claimed, token)
        for voice_id in {c.voice_id for c in claimed}:
            enqueue(BUILD_VOICE, [str(voice_id)])  # a no-op if a build is running or the prompt is ready
        raise
    requests = [
        SynthesisRequest(c.text, prompts[c.voice_id][0], prompts[c.voice_id][1], seed=c.seq) for c in claimed
    ]
    try:
        waves = _synthesize(rt, job_id, engine_name, claimed, requests, token, enqueue)
    except Exception:
        _release(rt, claimed, token)
        raise
    if waves is None:
        return 0
    out_dir = job_dir(rt, job_id) / "chunks"
    out_dir.mkdir(parents=True, exist_ok=True)
    done = 0
    for chunk, wave in zip(claimed, waves, strict=True):
        if _job_status(rt, job_id) != JobStatus.RUNNING:
            _release(rt, claimed[done:], token)
            log.info("job %s: no longer running; stopped after %d chunks", job_id, done)
            return done
        samples = apply_fades(trim_silence(wave, engine.sample_rate), engine.sample_rate)
        path = out_dir / f"{chunk.seq:06d}-{token}.wav"
        write_wav_atomic(path, samples, engine.sample_rate)
        with unit_of_work(rt.sessions) as session:
            ok = state.complete_chunk(
                session, chunk.id, job_id, token, str(path), len(samples) / engine.sample_rate
            )
        if ok:
            done += 1
        else:
            path.unlink(missing_ok=True)  # another attempt owns this chunk now
    log.info("job %s: %d chunks rendered (seqs %s..%s)", job_id, done, claimed[0].seq, claimed[-1].seq)
    maybe_begin_stitch(rt, job_id, enqueue)
    return done


def _synthesize(
    rt: Runtime,
    job_id: uuid.UUID,
    engine_name: str,
    claimed: Sequence[state.Claimed],
    requests: Sequence[SynthesisRequest],
    token: str,
    enqueue: Enqueue,
) -> list[Any] | None:
    """The batch in one engine call; on bad input, chunk by chunk to name the chunk that fails the job."""
    engine = rt.engine(engine_name)
    try:
        return synthesize_in_halves(engine, requests)
    except EngineError:
        waves = []
        for chunk, request in zip(claimed, requests, strict=True):
            try:
                waves.extend(engine.synthesize([request]))
            except EngineError as exc:
                _fail(rt, job_id, chunk.id, token, f"chunk {chunk.seq} could not be rendered: {exc}", enqueue)
                _release(rt, claimed, token)
                return None
        return waves


def is_out_of_memory(exc: BaseException) -> bool:
    """MemoryError, or an accelerator's out-of-memory error (torch.cuda.OutOfMemoryError and kin)."""
    return isinstance(exc, MemoryError) or "OutOfMemory" in type(exc).__name__


class EngineOutOfMemory(MemoryError):
    """One chunk alone did not fit the accelerator's memory. A MemoryError, so the render task retries it
    later with backoff (worker.tasks.TRANSIENT), when other work may have left the device."""


def synthesize_in_halves(engine: Engine, requests: Sequence[SynthesisRequest]) -> list[Any]:
    """One engine call for the batch; if it runs out of memory, the two halves separately, and so on.
    A single chunk that still does not fit raises :class:`EngineOutOfMemory`."""
    try:
        return engine.synthesize(requests)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        if len(requests) < 2:
            raise EngineOutOfMemory(f"one chunk does not fit: {exc}") from exc
    # Split outside the except block: there the failed call's traceback, and the tensors its frames hold,
    # would stay alive while the halves run, and release_memory could give little back.
    release_memory(engine)  # e.g. torch's cached CUDA blocks, before the smaller tries
    half = len(requests) // 2
    log.warning("engine out of memory on a batch of %d; retrying as %d + %d", len(requests), half,
                len(requests) - half)  # fmt: skip
    return synthesize_in_halves(engine, requests[:half]) + synthesize_in_halves(engine, requests[half:])


def maybe_begin_stitch(rt: Runtime, job_id: uuid.UUID, enqueue: Enqueue) -> bool:
    with unit_of_work(rt.sessions) as session:
        token = state.begin_stitch(
            session, job_id, timedelta(seconds=rt.settings.stitch_lease_seconds), utcnow()
        )
    if token is None:
        return False
    enqueue(STITCH_JOB, [str(job_id), token])
    return True


def stitch_job(rt: Runtime, job_id: uuid.UUID, token: str, enqueue: Enqueue) -> bool:
    """Concatenate the chunks in order with their pauses and encode; only the current token may publish."""
    with rt.sessions() as session:
        job = session.get(Job, job_id)
        if job is None or job.status != JobStatus.STITCHING or job.stitch_token != token:
            return False
        rows = session.execute(
            select(Chunk.audio_path, Chunk.pause_after, Chunk.chapter, Chunk.status)
            .where(Chunk.job_id == job_id)
            .order_by(Chunk.seq)
        ).all()
        fmt, options, titles = job.output_format, dict(job.options), list(job.chapters)
        engine_name = job.engine
    if any(r.status != ChunkStatus.DONE or not r.audio_path for r in rows):
        _fail(rt, job_id, None, None, "internal: stitching started before every chunk was done", enqueue)
        return False
    engine = rt.engine(engine_name)
    pauses = Pauses(**options.get("pauses", {}))
    pieces = (StitchPiece(str(r.audio_path), r.pause_after, r.chapter) for r in rows)
    out = job_dir(rt, job_id) / f"output-{token}.{fmt}"
    result = stitch(
        pieces,
        out,
        fmt,  # type: ignore[arg-type]
        engine.sample_rate,
        pauses,
        int(options.get("bitrate_kbps", rt.settings.mp3_bitrate_kbps)),
    )
    by_index = {int(c["index"]): c for c in titles}
    chapters: list[dict[str, object]] = [
        {"index": m.index, "title": by_index.get(m.index, {}).get("title"), "start": round(m.start, 3)}
        for m in result.chapters
    ]
    now = utcnow()
    with unit_of_work(rt.sessions) as session:
        ok = state.finish_stitch(
            session,
            job_id,
            token,
            output_path=str(out),
            output_bytes=result.bytes,
            duration=result.duration,
            chapters=chapters,
            now=now,
            expires_at=now + timedelta(seconds=rt.settings.output_ttl_seconds),
        )
    if not ok:
        out.unlink(missing_ok=True)
        return False
    _remove_orphans(job_dir(rt, job_id), {out, *(Path(str(r.audio_path)) for r in rows)})
    log.info("job %s: succeeded, %.1f s of %s, %d bytes", job_id, result.duration, fmt, result.bytes)
    enqueue(DELIVER_WEBHOOK, [str(job_id)])
    return True


def _remove_orphans(folder: Path, keep: set[Path]) -> None:
    """Once a job has succeeded, anything in its folder but its output and chunks is debris of attempts
    that lost their claim or were killed mid-write (chunk copies, temp files of an earlier stitch)."""
    kept = {p.resolve() for p in keep}
    for path in folder.rglob("*"):
        if path.is_file() and path.resolve() not in kept:
            path.unlink(missing_ok=True)

"""Stitching: once every chunk is done, exactly one worker wins running -> stitching and concatenates
the chunks in order, with their pauses, into the output file (streamed through ffmpeg)."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select

from models import Chunk, ChunkStatus, Job, JobStatus, unit_of_work, utcnow
from worker.audio import FORMATS, BookTags, Pauses, StitchPiece, stitch
from worker.jobs import actions, state
from worker.runtime import Runtime
from worker.task_names import DELIVER_WEBHOOK, STITCH_JOB, Enqueue

log = logging.getLogger(__name__)


def maybe_begin_stitch(rt: Runtime, job_id: uuid.UUID, enqueue: Enqueue) -> bool:
    """Send the stitch if this call won running -> stitching (every chunk done)."""
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
            select(Chunk.audio_path, Chunk.pause_after, Chunk.pause_seconds, Chunk.chapter, Chunk.status)
            .where(Chunk.job_id == job_id)
            .order_by(Chunk.seq)
        ).all()
        fmt, options, titles, title = job.output_format, dict(job.options), list(job.chapters), job.title
        engine_name = job.engine
    if any(r.status != ChunkStatus.DONE or not r.audio_path for r in rows):
        actions.fail(rt, job_id, "internal: stitching started before every chunk was done", enqueue)
        return False
    out = rt.layout.output(job_id, token, FORMATS[fmt].extension.lstrip("."))  # type: ignore[index]
    out.parent.mkdir(parents=True, exist_ok=True)
    by_index = {int(c["index"]): c.get("title") for c in titles}
    result = stitch(
        (
            StitchPiece(
                str(r.audio_path),
                r.pause_after if r.pause_seconds is None else r.pause_seconds,
                r.chapter,
            )
            for r in rows
        ),
        out,
        fmt,  # type: ignore[arg-type]
        rt.engine(engine_name).sample_rate,
        Pauses(**options.get("pauses", {})),
        int(options.get("bitrate_kbps", rt.settings.mp3_bitrate_kbps)),
        tags=BookTags(title=title, **options.get("metadata", {})),
        chapter_titles=by_index,
    )
    chapters: list[dict[str, object]] = [
        {"index": m.index, "title": by_index.get(m.index), "start": round(m.start, 3)}
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
    _remove_orphans(rt.layout.job_dir(job_id), {out, *(Path(str(r.audio_path)) for r in rows)})
    log.info("succeeded, %.1f s of %s, %d bytes", result.duration, fmt, result.bytes)
    enqueue(DELIVER_WEBHOOK, [str(job_id)])
    return True


def _remove_orphans(folder: Path, keep: set[Path]) -> None:
    """Once a job has succeeded, anything in its folder but its output and chunks is debris of attempts
    that lost their claim or were killed mid-write (chunk copies, temp files of an earlier stitch)."""
    kept = {p.resolve() for p in keep}
    for path in folder.rglob("*"):
        if path.is_file() and path.resolve() not in kept:
            path.unlink(missing_ok=True)

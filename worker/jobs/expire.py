"""A job's stored files expire (the sweeper runs :func:`expire`, the one entry): its book and files once
past their expiry, then its chunks' audio once the job ended long enough ago, or its owner keeps too
much. The rows record what went (worker.jobs.state.expiry)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, exists, select

from models import TERMINAL, Chunk, Job, RateWindow, unit_of_work
from worker.jobs import state as jobs
from worker.runtime import Runtime


@dataclass(frozen=True)
class Expired:
    """What one pass removed: jobs whose book and files went, job folders whose chunk audio went."""

    outputs: int
    chunk_folders: int


def expire(rt: Runtime, now: datetime) -> Expired:
    """Remove what is due at ``now``: books and files first, then chunk audio."""
    outputs = _expire_outputs(rt, now)
    return Expired(outputs=outputs, chunk_folders=_expire_chunks(rt, now))


def _expire_outputs(rt: Runtime, now: datetime) -> int:
    """Remove the book and its files of jobs past their expiry; the job row records when. Chunk audio
    stays for reuse (:func:`_expire_chunks` removes it)."""
    with rt.sessions() as session:
        due = list(
            session.scalars(select(Job.id).where(Job.expires_at < now, Job.expired_at.is_(None)).limit(500))
        )
    for job_id in due:
        with unit_of_work(rt.sessions) as session:
            jobs.expire_book(session, job_id, now)
        rt.storage.remove_folder(rt.layout.job_dir(job_id), keep="chunks")
    with unit_of_work(rt.sessions) as session:  # rate-limit windows older than an hour
        session.execute(delete(RateWindow).where(RateWindow.window_start < int(now.timestamp()) - 3600))
    return len(due)


def _expire_chunks(rt: Runtime, now: datetime) -> int:
    """Remove the chunk audio (the whole folder) of jobs that ended ``chunk_ttl_seconds`` ago, and of an
    owner's oldest ended jobs while their kept chunks weigh more than ``chunk_keep_bytes``; a job's book
    goes first if it is still there (its expiry is brought forward). Returns how many folders went.

    On one disk a reused chunk is a hard link to the same file (worker.jobs.reuse): its bytes are weighed
    once, with the newest job that holds them (removing an older job's folder frees nothing of them). In
    a bucket a reuse is a copy, and every copy weighs."""
    settings = rt.settings
    ended = Job.status.in_([s.value for s in TERMINAL])
    kept = exists().where(Chunk.job_id == Job.id, Chunk.audio_path.is_not(None))
    with rt.sessions() as session:
        jobs_kept = session.execute(
            select(Job.id, Job.owner, Job.finished_at).where(ended, kept).order_by(Job.finished_at.desc())
        ).all()
        chunks: dict[uuid.UUID, list[tuple[str | None, int]]] = defaultdict(list)
        for chunk in session.execute(
            select(Chunk.job_id, Chunk.content_key, Chunk.audio_bytes)
            .join(Job, Job.id == Chunk.job_id)
            .where(ended, Chunk.audio_path.is_not(None))
        ):
            chunks[chunk.job_id].append((chunk.content_key, int(chunk.audio_bytes or 0)))
    shared = rt.storage.kind == "local"
    cutoff = now - timedelta(seconds=settings.storage.chunk_ttl_seconds)
    weight: dict[str, int] = defaultdict(int)
    weighed: dict[str, set[str]] = defaultdict(set)  # per owner: the content keys counted already
    due: list[uuid.UUID] = []
    for row in jobs_kept:  # newest first: the oldest are over the bound
        for key, size in chunks.get(row.id, []):
            if shared and key is not None:
                if key in weighed[row.owner]:
                    continue
                weighed[row.owner].add(key)
            weight[row.owner] += size
        if (row.finished_at is not None and row.finished_at < cutoff) or weight[
            row.owner
        ] > settings.storage.chunk_keep_bytes:
            due.append(row.id)
    for job_id in due[:500]:
        with unit_of_work(rt.sessions) as session:
            jobs.expire_chunk_audio(session, job_id, now)
        rt.storage.remove_folder(rt.layout.job_dir(job_id))
    return len(due[:500])

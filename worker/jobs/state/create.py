"""New rows: a job and its chunks and chapters, added to the caller's transaction (the caller commits,
then enqueues)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy.orm import Session

from models import (
    ChapterStatus,
    Chunk,
    Job,
    JobChapter,
)
from worker.script import ChunkSpec


def insert_job(
    session: Session, job: Job, specs: Sequence[ChunkSpec], voice_ids: Sequence[uuid.UUID]
) -> None:
    """Add a new job and its chunks (``voice_ids[i]`` speaks ``specs[i]``) to the session's transaction:
    the job row first, since chunks reference it. The caller commits, then enqueues."""
    session.add(job)
    session.flush()
    add_chunks(session, job, specs, voice_ids)


def add_chunks(
    session: Session, job: Job, specs: Sequence[ChunkSpec], voice_ids: Sequence[uuid.UUID]
) -> None:
    """Add a job's chunks (its row exists) to the session's transaction, and its chapters when they are
    worth stitching one by one (more than one, or the delivery asks for chapter files)."""
    chapters = list(dict.fromkeys(spec.chapter for spec in specs))
    delivery = job.options.get("delivery") if isinstance(job.options, dict) else None
    split = isinstance(delivery, dict) and delivery.get("split") == "chapter"
    if len(chapters) > 1 or (split and chapters):
        session.add_all(
            JobChapter(job_id=job.id, chapter=index, position=n, status=ChapterStatus.PENDING.value)
            for n, index in enumerate(chapters, start=1)
        )
    session.add_all(
        Chunk(
            job_id=job.id,
            seq=spec.seq,
            chapter=spec.chapter,
            text=spec.text,
            source_text=spec.source,
            pause_after=spec.pause_after,
            pause_seconds=spec.pause_seconds,
            rate=spec.rate,
            voice_id=voice_id,
            speaker=spec.speaker,
        )
        for spec, voice_id in zip(specs, voice_ids, strict=True)
    )

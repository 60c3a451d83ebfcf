"""What the sweeper looks for: quiet queued jobs, overdue chunks, unstitched jobs and expired stitches."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from models import (
    Chunk,
    ChunkStatus,
    Job,
    JobStatus,
)
from worker.jobs.state.common import _chapters_unready


def take_quiet_queued(session: Session, quiet_since: datetime, now: datetime) -> list[uuid.UUID]:
    """Queued jobs untouched since ``quiet_since`` (a lost start message, or a wait for a voice whose
    wake-up was lost): touched now, so the next sweep leaves them alone a while, and returned."""
    queued = list(
        session.scalars(
            select(Job.id).where(Job.status == JobStatus.QUEUED.value, Job.updated_at < quiet_since)
        )
    )
    if queued:
        session.execute(update(Job).where(Job.id.in_(queued)).values(updated_at=now))
    return queued


@dataclass(frozen=True)
class Overdue:
    chunk_id: int
    job_id: uuid.UUID
    seq: int
    attempts: int
    running: bool  # True: its lease expired (worker lost); False: pending, its message may be lost


def overdue_chunks(session: Session, now: datetime, sent_before: datetime) -> list[Overdue]:
    """Chunks of running jobs whose lease expired, or that were sent long ago and are still pending (the
    message may be lost). Chunks never sent are the scheduler's (worker.jobs.scheduler)."""
    rows = session.execute(
        select(Chunk.id, Chunk.job_id, Chunk.seq, Chunk.attempts, Chunk.status)
        .join(Job, Job.id == Chunk.job_id)
        .where(
            Job.status == JobStatus.RUNNING.value,
            or_(
                and_(Chunk.status == ChunkStatus.RUNNING.value, Chunk.lease_until < now),
                and_(Chunk.status == ChunkStatus.PENDING.value, Chunk.enqueued_at < sent_before),
            ),
        )
    ).all()
    return [Overdue(r.id, r.job_id, r.seq, r.attempts, r.status == ChunkStatus.RUNNING) for r in rows]


def unstitched_jobs(session: Session) -> list[uuid.UUID]:
    """Running jobs whose every chunk is done and chapter stitched but whose stitch never began (a worker
    died in between)."""
    return list(
        session.scalars(
            select(Job.id).where(
                Job.status == JobStatus.RUNNING.value,
                Job.chunks_done == Job.chunks_total,
                ~_chapters_unready(),
            )
        )
    )


def expired_stitches(session: Session, now: datetime) -> list[uuid.UUID]:
    return list(
        session.scalars(select(Job.id).where(Job.status == JobStatus.STITCHING.value, Job.lease_until < now))
    )

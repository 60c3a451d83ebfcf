"""A chapter's stitch: claimed once its chunks are done, finished under its token, reissued when its
lease expired; and the chapters to resume."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from models import (
    ChapterStatus,
    Chunk,
    ChunkStatus,
    Job,
    JobChapter,
    JobStatus,
)
from worker.jobs.state.common import _running, new_token, rows


def _chapter_complete(job_id: uuid.UUID, chapter: int) -> ColumnElement[bool]:
    """Every chunk of the chapter is done."""
    return ~exists().where(
        Chunk.job_id == job_id, Chunk.chapter == chapter, Chunk.status != ChunkStatus.DONE.value
    )


def _chapter_in(job_id: uuid.UUID, chapter: int, status: ChapterStatus) -> tuple[ColumnElement[bool], ...]:
    """The job's chapter, while it is in ``status``."""
    return (
        JobChapter.job_id == job_id,
        JobChapter.chapter == chapter,
        JobChapter.status == status.value,
    )


def claim_chapter(
    session: Session, job_id: uuid.UUID, chapter: int, lease: timedelta, now: datetime
) -> str | None:
    """pending -> stitching for the one caller that finds every chunk of the chapter done while the job
    runs; returns its token (None: not complete yet, or someone else has it)."""
    token = new_token()
    job_running = _running(job_id)
    result = session.execute(
        update(JobChapter)
        .where(
            *_chapter_in(job_id, chapter, ChapterStatus.PENDING),
            JobChapter.job_id.in_(job_running),
            _chapter_complete(job_id, chapter),
        )
        .values(
            status=ChapterStatus.STITCHING.value,
            token=token,
            lease_until=now + lease,
            attempts=JobChapter.attempts + 1,
        )
    )
    return token if rows(result) == 1 else None


def finish_chapter(
    session: Session,
    job_id: uuid.UUID,
    chapter: int,
    token: str,
    *,
    build: dict[str, Any],
    size: int,
    duration: float,
    now: datetime,
) -> bool:
    """stitching -> ready under the current token while the job runs, with what was built."""
    job_running = _running(job_id)
    result = session.execute(
        update(JobChapter)
        .where(
            *_chapter_in(job_id, chapter, ChapterStatus.STITCHING),
            JobChapter.token == token,
            JobChapter.job_id.in_(job_running),
        )
        .values(
            status=ChapterStatus.READY.value,
            build=build,
            bytes=size,
            duration=duration,
            ready_at=now,
            lease_until=None,
        )
    )
    return rows(result) == 1


def reissue_chapter(
    session: Session, job_id: uuid.UUID, chapter: int, lease: timedelta, now: datetime
) -> str | None:
    """A chapter whose stitch lease expired (its worker died) gets a new token."""
    token = new_token()
    result = session.execute(
        update(JobChapter)
        .where(
            *_chapter_in(job_id, chapter, ChapterStatus.STITCHING),
            JobChapter.lease_until < now,
        )
        .values(token=token, lease_until=now + lease, attempts=JobChapter.attempts + 1)
    )
    return token if rows(result) == 1 else None


def chapters_to_resume(session: Session, now: datetime) -> tuple[list[tuple[uuid.UUID, int]], ...]:
    """(chapters of running jobs whose chunks are all done but that nobody claimed, chapters whose
    stitch lease expired)."""
    running = select(Job.id).where(Job.status == JobStatus.RUNNING.value)
    unclaimed = session.execute(
        select(JobChapter.job_id, JobChapter.chapter).where(
            JobChapter.status == ChapterStatus.PENDING.value,
            JobChapter.job_id.in_(running),
            ~exists().where(
                Chunk.job_id == JobChapter.job_id,
                Chunk.chapter == JobChapter.chapter,
                Chunk.status != ChunkStatus.DONE.value,
            ),
        )
    ).all()
    expired = session.execute(
        select(JobChapter.job_id, JobChapter.chapter).where(
            JobChapter.status == ChapterStatus.STITCHING.value,
            JobChapter.lease_until < now,
            JobChapter.job_id.in_(running),
        )
    ).all()
    return [(r.job_id, r.chapter) for r in unclaimed], [(r.job_id, r.chapter) for r in expired]

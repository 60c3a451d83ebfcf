"""What the state modules share: attempt tokens, UPDATE row counts, and the conditions several
transitions test (the job runs, a chunk may be claimed, a chapter is unstitched, a re-render is
unpublished)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Select, and_, exists, or_, select
from sqlalchemy.engine import CursorResult
from sqlalchemy.sql.elements import ColumnElement

from models import (
    ChapterStatus,
    Chunk,
    ChunkStatus,
    Job,
    JobChapter,
    JobStatus,
)


def new_token() -> str:
    return uuid.uuid4().hex


def rows(result: object) -> int:
    """How many rows an UPDATE changed."""
    assert isinstance(result, CursorResult)
    return int(result.rowcount)


def _running(job_id: uuid.UUID) -> Select[uuid.UUID]:
    """The job's id while it runs (for UPDATEs that may only happen then)."""
    return select(Job.id).where(Job.id == job_id, Job.status == JobStatus.RUNNING.value)


def claimable(now: datetime) -> ColumnElement[bool]:
    """Chunks a render may take: pending, or running on an expired lease (their worker was lost)."""
    return or_(
        Chunk.status == ChunkStatus.PENDING.value,
        and_(Chunk.status == ChunkStatus.RUNNING.value, Chunk.lease_until < now),
    )


def _chapters_unready() -> ColumnElement[bool]:
    """The job (in an UPDATE or query of jobs) has a chapter not stitched yet."""
    return exists().where(JobChapter.job_id == Job.id, JobChapter.status != ChapterStatus.READY.value)


def _rerendering() -> ColumnElement[bool]:
    """A chunk rendered again on request whose new take is not published yet (pending, running, or stored
    and being stitched into its chapter and the book)."""
    return Chunk.previous.is_not(None)

"""A job's own transitions: start, fail, cancel, and the stitch (begin, reissue, finish), with the checks
that go with them."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, exists, null, or_, select, update
from sqlalchemy.orm import Session

from models import (
    ACTIVE,
    Chunk,
    Job,
    JobKind,
    JobStatus,
)
from worker.jobs.state.common import _chapters_unready, _rerendering, new_token, rows


def start_job(session: Session, job_id: uuid.UUID, now: datetime) -> bool:
    """queued -> running; True if this call moved it (a redelivered start finds it already running)."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.QUEUED.value)
        .values(status=JobStatus.RUNNING.value, started_at=now, updated_at=now)
    )
    return rows(result) == 1


def fail_job(session: Session, job_id: uuid.UUID, error: str, now: datetime) -> bool:
    """Any active state -> failed, with the error the caller will read."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.in_([s.value for s in ACTIVE]))
        .values(status=JobStatus.FAILED.value, error=error, finished_at=now, updated_at=now, lease_until=None)
    )
    return rows(result) == 1


def cancel_job(session: Session, job_id: uuid.UUID, now: datetime) -> bool:
    """Any active state -> cancelled, unless the job has a published book (it renders a chunk again, or
    stitches its book again from a previous take): that book is never cancelled."""
    result = session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.status.in_([s.value for s in ACTIVE]),
            Job.output_path.is_(None),
        )
        .values(status=JobStatus.CANCELLED.value, finished_at=now, updated_at=now, lease_until=None)
    )
    return rows(result) == 1


def begin_stitch(session: Session, job_id: uuid.UUID, lease: timedelta, now: datetime) -> str | None:
    """running -> stitching once every chunk is done and every chapter stitched; returns the stitch
    token of the single winner."""
    token = new_token()
    result = session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.status == JobStatus.RUNNING.value,
            Job.chunks_done == Job.chunks_total,
            ~_chapters_unready(),
        )
        .values(status=JobStatus.STITCHING.value, stitch_token=token, lease_until=now + lease, updated_at=now)
    )
    return token if rows(result) == 1 else None


def reissue_stitch(session: Session, job_id: uuid.UUID, lease: timedelta, now: datetime) -> str | None:
    """An expired stitch lease (its worker died) gets a new token; the old holder can no longer finish."""
    token = new_token()
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.STITCHING.value, Job.lease_until < now)
        .values(stitch_token=token, lease_until=now + lease, updated_at=now)
    )
    return token if rows(result) == 1 else None


def finish_stitch(
    session: Session,
    job_id: uuid.UUID,
    token: str,
    *,
    output_path: str,
    output_bytes: int,
    duration: float,
    chapters: list[dict[str, object]],
    now: datetime,
    expires_at: datetime | None = None,
    files: list[dict[str, Any]] | None = None,
    extra_bytes: int = 0,
) -> bool:
    """stitching -> succeeded under the current token, with the book, its files and what they weigh
    (``extra_bytes``: the job's other stored files, such as its cover). A re-rendered chunk's new take
    is published with it: the chunk no longer keeps its previous take, and cancelling can no longer
    bring it back."""
    # Locks: the re-rendered chunk first, then the job (as keep_previous_take), so that a cancel and the
    # publication are one after the other, whichever comes first.
    unpublished = list(
        session.scalars(select(Chunk.id).where(Chunk.job_id == job_id, _rerendering()).with_for_update())
    )
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.STITCHING.value, Job.stitch_token == token)
        .values(
            status=JobStatus.SUCCEEDED.value,
            output_path=output_path,
            output_bytes=output_bytes,
            output_duration=duration,
            chapters=chapters,
            files=files or [],
            files_bytes=sum(int(f["bytes"]) for f in files or []) + extra_bytes,
            expires_at=expires_at,
            finished_at=now,
            updated_at=now,
            lease_until=None,
        )
    )
    if rows(result) != 1:
        return False
    if unpublished:
        session.execute(update(Chunk).where(Chunk.id.in_(unpublished)).values(previous=null()))
    return True


def is_running(session: Session, job_id: uuid.UUID) -> bool:
    """The one check "may work on this job go on": false once it is cancelled, failed or finished."""
    return session.scalar(select(Job.status).where(Job.id == job_id)) == JobStatus.RUNNING.value


def jobs_using_voice(voice_id: uuid.UUID, statuses: Iterable[JobStatus]) -> Select[uuid.UUID]:
    """Ids of the jobs in ``statuses`` whose own voice, or one of whose chunks' voices, is ``voice_id``
    (the chunk check runs per job, over that job's chunks, which are indexed by job)."""
    in_a_chunk = exists().where(Chunk.job_id == Job.id, Chunk.voice_id == voice_id)
    return select(Job.id).where(
        Job.status.in_([s.value for s in statuses]), or_(Job.voice_id == voice_id, in_a_chunk)
    )


def finish_speech(session: Session, job_id: uuid.UUID, now: datetime) -> bool:
    """A speech job: running -> succeeded once every chunk is done."""
    result = session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.kind == JobKind.SPEECH.value,
            Job.status == JobStatus.RUNNING.value,
            Job.chunks_done == Job.chunks_total,
        )
        .values(status=JobStatus.SUCCEEDED.value, finished_at=now, updated_at=now)
    )
    return rows(result) == 1


def record_error_detail(
    session: Session, job_id: uuid.UUID, detail: dict[str, object], *, drop_script: bool = False
) -> None:
    """A failed job's ``error_detail`` (code, message, field ...), in the failure's transaction;
    ``drop_script``: the script that waited to be planned goes too."""
    job = session.get(Job, job_id)
    if job is None:
        return
    job.options = {**job.options, "error_detail": detail}
    if drop_script:
        job.script = None
        job.script_file = None

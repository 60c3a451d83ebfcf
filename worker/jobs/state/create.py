"""New rows and what is recorded on a job before it starts: a book or speech job's row, its chunks and
chapters (added to the caller's transaction: the caller commits, then enqueues), its script kept for
planning or taken by its planner, and what its plan says."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from models import ChapterStatus, Chunk, Job, JobChapter, JobKind, JobStatus
from worker.jobs.state.common import rows
from worker.script import ChunkSpec


def add_job(session: Session, job: Job) -> None:
    """Add a new job with no chunks yet (a worker plans it) to the session's transaction."""
    session.add(job)


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


@dataclass(frozen=True)
class BookRow:
    """What a submitted book's row is made from: who asks, what it is called, and the options it is
    rendered with (the submit use case's request derives from it)."""

    owner: str
    api_key_id: uuid.UUID | None
    title: str
    script_format: str
    voice_id: uuid.UUID
    engine: str
    options: dict[str, Any]
    output_format: str
    idempotency_key: str | None
    request_sha256: str
    webhook_url: str | None = None


def book_job(
    row: BookRow,
    *,
    job_id: uuid.UUID,
    options: dict[str, Any],
    abs_state: str | None,
    files_bytes: int | None,
) -> Job:
    """A new book's row, queued with no chunks yet (they come with its plan), not yet in a session;
    ``options`` stand for the row's own (the stored cover's path added)."""
    return Job(
        id=job_id,
        files_bytes=files_bytes,
        owner=row.owner,
        title=row.title,
        script_format=row.script_format,
        voice_id=row.voice_id,
        engine=row.engine,
        options=options,
        chapters=[],
        chunks_total=0,
        output_format=row.output_format,
        idempotency_key=row.idempotency_key,
        request_sha256=row.request_sha256,
        webhook_url=row.webhook_url,
        abs_state=abs_state,
        api_key_id=row.api_key_id,
    )


@dataclass(frozen=True)
class SpeechRow:
    """What a speech job's row starts with: one chapter, its chunks counted, running from the start."""

    owner: str
    api_key_id: uuid.UUID | None
    voice_id: uuid.UUID
    engine: str
    title: str
    output_format: str
    options: dict[str, Any]
    chunks_total: int
    estimated_seconds: float


def speech_job(row: SpeechRow, now: datetime) -> Job:
    """A new speech job's row, running from ``now`` (nothing to wait for but its task)."""
    return Job(
        id=uuid.uuid4(),
        kind=JobKind.SPEECH.value,
        owner=row.owner,
        status=JobStatus.RUNNING.value,
        title=row.title,
        script_format="plain",
        voice_id=row.voice_id,
        engine=row.engine,
        options=row.options,
        chapters=[{"index": 0, "title": None}],
        chunks_total=row.chunks_total,
        output_format=row.output_format,
        estimated_seconds=row.estimated_seconds,
        api_key_id=row.api_key_id,
        created_at=now,
        started_at=now,
    )


def record_plan(
    job: Job,
    *,
    chapters: list[dict[str, Any]],
    chunks_total: int,
    estimated_seconds: float,
    options: dict[str, Any],
    title: str | None = None,
) -> None:
    """What a plan records on its job's row (new, or taken for planning by :func:`take_script`)."""
    if title is not None:
        job.title = title
    job.chapters = chapters
    job.chunks_total = chunks_total
    job.estimated_seconds = estimated_seconds
    job.options = options


def await_planning(
    job: Job,
    *,
    script: str,
    script_file: bytes | None,
    estimated_seconds: float | None,
    options: dict[str, Any],
) -> None:
    """A new job's script (text, or an EPUB's bytes in ``script_file``) kept for a worker to plan."""
    job.script = script
    job.script_file = script_file
    if estimated_seconds is not None:
        job.estimated_seconds = estimated_seconds
    job.options = options


def note_stored_file(job: Job, size: int) -> None:
    """A file stored in a new job's folder (its cover, its EPUB kept for a read-along) counts towards
    its stored bytes from now."""
    job.files_bytes = (job.files_bytes or 0) + size


def set_options(job: Job, options: dict[str, Any]) -> None:
    """A new job's options, before it is inserted."""
    job.options = options


def take_script(session: Session, job_id: uuid.UUID, now: datetime) -> bool:
    """A queued job's script taken for planning (dropped from the row): True for the one caller that
    takes it, which then records the plan and adds the chunks in the same transaction."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.script.is_not(None), Job.status == JobStatus.QUEUED.value)
        .values(script=None, script_file=None, updated_at=now)
    )
    return rows(result) == 1

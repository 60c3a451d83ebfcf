"""Job and chunk state transitions, each one a conditional UPDATE (compare-and-set) on the database,
and the queries that find work to resume (the one answer to "where does a job or chunk change state").

    job:     queued ──start_job──> running ──begin_stitch──> stitching ──finish_stitch──> succeeded
             (any active state) ──fail_job──> failed, ──cancel_job──> cancelled
             succeeded ──rerender_chunk──> running; (running | stitching) ──keep_previous_take──> running
    chunk:   pending ──claim_chunks──> running ──complete_chunk──> done
             running ──release_chunk──> pending, (pending | running) ──fail_chunk──> failed
    chapter: pending ──claim_chapter──> stitching ──finish_chapter──> ready

Broker messages are hints that may arrive twice, late, or never; these functions decide what happens.
Only the holder of a chunk's current attempt token can mark it done, so a duplicate delivery never
writes a second copy, and only one worker wins ``running -> stitching``. See docs/how-it-works.md,
"State transitions" (each transition's conditions).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Select, Table, and_, bindparam, exists, null, or_, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from models import (
    ACTIVE,
    ChapterStatus,
    Chunk,
    ChunkStatus,
    Job,
    JobChapter,
    JobRerender,
    JobStatus,
    utcnow,
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


def new_token() -> str:
    return uuid.uuid4().hex


def rows(result: object) -> int:
    """How many rows an UPDATE changed."""
    assert isinstance(result, CursorResult)
    return int(result.rowcount)


@dataclass(frozen=True)
class Claimed:
    id: int
    seq: int
    text: str
    voice_id: uuid.UUID
    attempts: int
    rate: float | None = None
    seed: int | None = None


def start_job(session: Session, job_id: uuid.UUID, now: datetime) -> bool:
    """queued -> running; True if this call moved it (a redelivered start finds it already running)."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.QUEUED.value)
        .values(status=JobStatus.RUNNING.value, started_at=now, updated_at=now)
    )
    return rows(result) == 1


def _running(job_id: uuid.UUID) -> Select[uuid.UUID]:
    """The job's id while it runs (for UPDATEs that may only happen then)."""
    return select(Job.id).where(Job.id == job_id, Job.status == JobStatus.RUNNING.value)


def claimable(now: datetime) -> ColumnElement[bool]:
    """Chunks a render may take: pending, or running on an expired lease (their worker was lost)."""
    return or_(
        Chunk.status == ChunkStatus.PENDING.value,
        and_(Chunk.status == ChunkStatus.RUNNING.value, Chunk.lease_until < now),
    )


def claim_chunks(
    session: Session, job_id: uuid.UUID, seqs: list[int], lease: timedelta, max_attempts: int, now: datetime
) -> tuple[str, list[Claimed]]:
    """Take the chunks of ``seqs`` that are pending, or running on an expired lease, under one new token."""
    token = new_token()
    job_running = _running(job_id)
    # RETURNING: the claimed rows come back with the UPDATE, not from a second SELECT (a round trip a
    # task; the SELECT also had to find them by token, which has no index).
    rows = session.execute(
        update(Chunk)
        .where(
            Chunk.job_id == job_id,
            Chunk.seq.in_(seqs),
            claimable(now),
            Chunk.attempts < max_attempts,
            Chunk.job_id.in_(job_running),
        )
        .values(
            status=ChunkStatus.RUNNING.value,
            attempt_token=token,
            attempts=Chunk.attempts + 1,
            lease_until=now + lease,
        )
        .returning(Chunk.id, Chunk.seq, Chunk.text, Chunk.voice_id, Chunk.attempts, Chunk.rate, Chunk.seed)
    ).all()
    claimed = [Claimed(r.id, r.seq, r.text, r.voice_id, r.attempts, r.rate, r.seed) for r in rows]
    return token, sorted(claimed, key=lambda c: c.seq)


_CHUNKS = cast(Table, Chunk.__table__)
_chunks = _CHUNKS.c
# complete_chunks' UPDATE, built once: its parameters are bound per chunk (an executemany).
_COMPLETE = (
    update(_CHUNKS)
    .where(
        _chunks.id == bindparam("b_id"),
        _chunks.attempt_token == bindparam("b_token"),
        _chunks.status == ChunkStatus.RUNNING.value,
    )
    .values(
        status=ChunkStatus.DONE.value,
        audio_path=bindparam("b_path"),
        duration=bindparam("b_duration"),
        audio_bytes=bindparam("b_bytes"),
        levels=bindparam("b_levels"),
        words=bindparam("b_words"),
        content_key=bindparam("b_key"),
        take_key=bindparam("b_take"),
        qa=bindparam("b_qa"),
        flagged=bindparam("b_flagged"),
        lease_until=None,
    )
)


@dataclass(frozen=True)
class Completion:
    """What a rendered (or reused) chunk's row gets when it is marked done."""

    chunk_id: int
    audio_path: str
    duration: float
    audio_bytes: int | None = None
    levels: dict[str, Any] | None = None
    words: list[list[float]] | None = None
    content_key: str | None = None
    reused: bool = False
    qa: dict[str, Any] | None = None
    flagged: bool = False
    rerendered: bool = False
    take_key: str | None = None  # a take chosen on request (worker.jobs.reuse)


def complete_chunk(
    session: Session,
    chunk_id: int,
    job_id: uuid.UUID,
    token: str,
    audio_path: str,
    duration: float,
    audio_bytes: int | None = None,
    levels: dict[str, Any] | None = None,
    words: list[list[float]] | None = None,
    *,
    content_key: str | None = None,
    reused: bool = False,
    qa: dict[str, Any] | None = None,
    flagged: bool = False,
    rerendered: bool = False,
) -> bool:
    """running -> done if ``token`` still holds the chunk; counts it once towards the job's progress
    (and towards its reused chunks when the audio came from an earlier render). ``levels`` are the
    chunk's measured loudness and levels (what mastering reads at the stitch)."""
    completion = Completion(
        chunk_id,
        audio_path,
        duration,
        audio_bytes,
        levels,
        words,
        content_key,
        reused,
        qa,
        flagged,
        rerendered,
    )
    return complete_chunks(session, job_id, token, [completion]).ids == [chunk_id]


@dataclass(frozen=True)
class Completed:
    """What :func:`complete_chunks` did: the ids of the chunks it completed, and how many of the job's
    chunks were still not done after it (``None`` when it completed none, so moved no counter)."""

    ids: list[int]
    left: int | None


def complete_chunks(
    session: Session, job_id: uuid.UUID, token: str, completions: Sequence[Completion]
) -> Completed:
    """:func:`complete_chunk` for each of ``completions`` (running -> done where ``token`` still holds the
    chunk), with the job's counters moved once for all of them; the ids of the chunks it completed.

    One UPDATE of the job row a batch instead of one a chunk: every worker's chunks would otherwise all
    update that one hot row. Same transaction, so the counters still
    move exactly with the chunks. The chunks' own UPDATEs go as one prepared statement executed for
    each (psycopg pipelines them: one round trip), not one ORM statement built a chunk; when fewer rows
    moved than asked (another attempt took some over), the ones this token completed are read back."""
    if not completions:
        return Completed([], None)
    result = session.execute(
        _COMPLETE,
        [
            {
                "b_id": c.chunk_id,
                "b_token": token,
                "b_path": c.audio_path,
                "b_duration": c.duration,
                "b_bytes": c.audio_bytes,
                "b_levels": c.levels,
                "b_words": c.words,
                "b_key": c.content_key,
                "b_take": c.take_key,
                "b_qa": c.qa,
                "b_flagged": c.flagged,
            }
            for c in completions
        ],
    )
    ids = [c.chunk_id for c in completions]
    if rows(result) == len(ids):
        moved_ids = set(ids)
    else:  # the token is this attempt's own: a done chunk under it was completed just now
        moved_ids = set(
            session.scalars(
                select(Chunk.id).where(
                    Chunk.id.in_(ids), Chunk.attempt_token == token, Chunk.status == ChunkStatus.DONE.value
                )
            )
        )
    done = [c.chunk_id for c in completions if c.chunk_id in moved_ids]
    counts = {
        "chunks_done": len(done),
        "chunks_reused": sum(c.reused for c in completions if c.chunk_id in moved_ids),
        "chunks_flagged": sum(c.flagged for c in completions if c.chunk_id in moved_ids),
        "chunks_rerendered": sum(c.rerendered for c in completions if c.chunk_id in moved_ids),
    }
    moved = {name: getattr(Job, name) + n for name, n in counts.items() if n}
    if not moved:
        return Completed(done, None)
    # The job row is locked from here to the commit: of two batches completing at once, the later one
    # reads the earlier one's counters, so the batch that completes the job's last chunks sees 0 left.
    left = session.scalar(
        update(Job).where(Job.id == job_id).values(**moved).returning(Job.chunks_total - Job.chunks_done)
    )
    return Completed(done, None if left is None else int(left))


def renew_leases(
    session: Session, chunk_ids: Sequence[int], token: str, lease: timedelta, now: datetime
) -> int:
    """Push the lease of the chunks ``token`` still holds to ``now + lease`` (a worker that takes longer
    than one lease, rendering new takes for QA, is not taken for dead); how many it still holds."""
    result = session.execute(
        update(Chunk)
        .where(
            Chunk.id.in_(list(chunk_ids)),
            Chunk.attempt_token == token,
            Chunk.status == ChunkStatus.RUNNING.value,
        )
        .values(lease_until=now + lease)
    )
    return rows(result)


def release_chunk(session: Session, chunk_id: int, token: str) -> bool:
    """Give a claimed chunk back (transient failure, cancellation) so another attempt can take it."""
    result = session.execute(
        update(Chunk)
        .where(Chunk.id == chunk_id, Chunk.attempt_token == token, Chunk.status == ChunkStatus.RUNNING.value)
        .values(status=ChunkStatus.PENDING.value, lease_until=None)
    )
    return rows(result) == 1


def fail_chunk(session: Session, chunk_id: int, token: str | None, error: str) -> bool:
    conditions = [
        Chunk.id == chunk_id,
        Chunk.status.in_([ChunkStatus.PENDING.value, ChunkStatus.RUNNING.value]),
    ]
    if token is not None:
        conditions.append(Chunk.attempt_token == token)
    result = session.execute(
        update(Chunk)
        .where(*conditions)
        .values(status=ChunkStatus.FAILED.value, error=error, lease_until=None)
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


def _chapters_unready() -> ColumnElement[bool]:
    """The job (in an UPDATE or query of jobs) has a chapter not stitched yet."""
    return exists().where(JobChapter.job_id == Job.id, JobChapter.status != ChapterStatus.READY.value)


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


def mark_enqueued(session: Session, job_id: uuid.UUID, seqs: list[int], now: datetime | None = None) -> None:
    session.execute(
        update(Chunk).where(Chunk.job_id == job_id, Chunk.seq.in_(seqs)).values(enqueued_at=now or utcnow())
    )


def unsend(session: Session, job_id: uuid.UUID, seqs: list[int]) -> None:
    """Forget that these chunks were sent: they wait for a voice, and its build re-sends them."""
    session.execute(update(Chunk).where(Chunk.job_id == job_id, Chunk.seq.in_(seqs)).values(enqueued_at=None))


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


# -- what the sweeper looks for --------------------------------------------------------------------------


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


# -- chapters, stitched as soon as their chunks are done ------------------------------------------------


def _chapter_complete(job_id: uuid.UUID, chapter: int) -> ColumnElement[bool]:
    """Every chunk of the chapter is done."""
    return ~exists().where(
        Chunk.job_id == job_id, Chunk.chapter == chapter, Chunk.status != ChunkStatus.DONE.value
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
            JobChapter.job_id == job_id,
            JobChapter.chapter == chapter,
            JobChapter.status == ChapterStatus.PENDING.value,
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
            JobChapter.job_id == job_id,
            JobChapter.chapter == chapter,
            JobChapter.status == ChapterStatus.STITCHING.value,
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
            JobChapter.job_id == job_id,
            JobChapter.chapter == chapter,
            JobChapter.status == ChapterStatus.STITCHING.value,
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


# What a chunk rendered again on request keeps aside (Chunk.previous) to be put back if its new take fails
# or is cancelled before it is published: what the chunk says, and the take it had (its audio file stays in
# the store until the new book is published, worker.jobs.stitch).
_KEPT_BY_RERENDER = (Chunk.text, Chunk.source_text, Chunk.rate, Chunk.seed, Chunk.qa, Chunk.flagged)
_TAKE = (
    Chunk.audio_path,
    Chunk.duration,
    Chunk.audio_bytes,
    Chunk.levels,
    Chunk.words,
    Chunk.content_key,
    Chunk.take_key,
)
_RESTORED = frozenset(column.key for column in (*_KEPT_BY_RERENDER, *_TAKE))


@dataclass(frozen=True)
class Edit:
    """A chunk's new text for a re-render: as the engine reads it, as written, and its speaking rate."""

    text: str
    source: str
    rate: float | None


def rerender_chunk(
    session: Session,
    job_id: uuid.UUID,
    seq: int,
    *,
    edit: Edit | None,
    seed: int,
    stale_chapters: Sequence[int],
    now: datetime,
    seconds: float = 0.0,
) -> bool:
    """succeeded -> running for one chunk rendered again (its ``edit``, or the same text) with ``seed``:
    the chunk back to pending, its chapter and ``stale_chapters`` (whose files are gone) to be stitched
    again, the revision counted, and the re-render recorded (``seconds``: its estimated speech, counted
    in its owner's usage). The book and files of the previous revision stay until the new ones are
    published. False if the job is not a finished, unexpired job with that chunk done."""
    chunk = session.execute(  # locked: an owner's accept of its flag waits, or comes first
        select(Chunk.chapter, *_KEPT_BY_RERENDER, *_TAKE)
        .where(Chunk.job_id == job_id, Chunk.seq == seq)
        .with_for_update()
    ).one_or_none()
    if chunk is None:
        return False
    moved = session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.status == JobStatus.SUCCEEDED.value,
            Job.expired_at.is_(None),
            exists().where(Chunk.job_id == job_id, Chunk.seq == seq, Chunk.status == ChunkStatus.DONE.value),
        )
        .values(
            status=JobStatus.RUNNING.value,
            chunks_done=Job.chunks_done - 1,
            chunks_flagged=Job.chunks_flagged - int(bool(chunk.flagged)),
            revision=Job.revision + 1,
            rerender={"seq": seq, "error": None},
            updated_at=now,
            webhook_delivered_at=None,
            webhook_attempts=0,
            webhook_next_at=None,
            webhook_error=None,
            flags_webhook_attempts=0,
            flags_webhook_delivered_at=None,
            flags_webhook_next_at=None,
        )
    )
    if rows(moved) != 1:
        return False
    owner = session.scalar(select(Job.owner).where(Job.id == job_id))
    session.add(JobRerender(job_id=job_id, owner=owner, seq=seq, seconds=seconds, created_at=now))
    values: dict[str, Any] = {
        "previous": {key: getattr(chunk, key) for key in sorted(_RESTORED)},
        "status": ChunkStatus.PENDING.value,
        "seed": seed,
        "attempts": 0,
        "attempt_token": None,
        "lease_until": None,
        "enqueued_at": None,
        "qa": None,
        "flagged": False,
        "error": None,
    }
    if edit is not None:
        values.update(text=edit.text, source_text=edit.source, rate=edit.rate)
    session.execute(update(Chunk).where(Chunk.job_id == job_id, Chunk.seq == seq).values(**values))
    session.execute(
        update(JobChapter)
        .where(JobChapter.job_id == job_id, JobChapter.chapter.in_([chunk.chapter, *stale_chapters]))
        .values(status=ChapterStatus.PENDING.value, token=None, lease_until=None, attempts=0)
    )
    return True


def accept_flag(session: Session, job_id: uuid.UUID, seq: int, now: datetime) -> bool:
    """A flagged chunk kept as it is on its owner's word: no longer flagged (the job's count drops), its
    QA record kept, saying when it was accepted (``accepted_at``). A re-render replaces the record, so
    the new take is judged afresh. False (nothing changed) unless the chunk is done and flagged: never
    flagged, accepted already, or being rendered again."""
    flagged = (
        Chunk.job_id == job_id,
        Chunk.seq == seq,
        Chunk.status == ChunkStatus.DONE.value,
        Chunk.flagged.is_(True),
    )
    qa = session.scalar(select(Chunk.qa).where(*flagged).with_for_update())  # a re-render waits
    if qa is None:
        return False
    accepted = {**(qa if isinstance(qa, dict) else {}), "accepted_at": now.isoformat()}
    if rows(session.execute(update(Chunk).where(*flagged).values(flagged=False, qa=accepted))) != 1:
        return False
    session.execute(
        update(Job).where(Job.id == job_id).values(chunks_flagged=Job.chunks_flagged - 1, updated_at=now)
    )
    return True


def _rerendering() -> ColumnElement[bool]:
    """A chunk rendered again on request whose new take is not published yet (pending, running, or stored
    and being stitched into its chapter and the book)."""
    return Chunk.previous.is_not(None)


_UNSTORED = (ChunkStatus.PENDING.value, ChunkStatus.RUNNING.value)


def keep_previous_take(
    session: Session,
    chunk_id: int,
    token: str | None,
    error: str,
    outcome: str = "refused",
    *,
    stored_too: bool = False,
) -> int | None:
    """A chunk rendered again on request whose new take failed or was cancelled (``error``) -> done again
    with the take it had, the job's ``rerender`` naming the error and the ``outcome`` (refused, or cancelled
    by its owner); the chunk's chapter, returned, is to be stitched again. The job goes back to running
    (a stitch of the new take in flight loses its token, so never publishes) with its counters as they
    were before the re-render. ``stored_too``: also a new take already stored and being stitched (a cancel
    does that; a failure only ever concerns an unstored take). The chunk loses its attempt token, so the
    attempt that was rendering it can no longer mark it done (nor count it twice). None (nothing changed)
    if the chunk is not such a re-render (under ``token``, when given)."""
    conditions = [Chunk.id == chunk_id, Chunk.audio_path.is_not(None), _rerendering()]
    if not stored_too:
        conditions.append(Chunk.status.in_(_UNSTORED))
    if token is not None:
        conditions.append(Chunk.attempt_token == token)
    # Locks: the chunk, then the job (complete_chunks and finish_stitch take them in that order too).
    chunk = session.execute(
        select(Chunk.job_id, Chunk.seq, Chunk.chapter, Chunk.previous, Chunk.status, Chunk.flagged)
        .where(*conditions)
        .with_for_update()
    ).one_or_none()
    if chunk is None or chunk.previous is None:
        return None
    if chunk.status == ChunkStatus.DONE and "audio_path" not in chunk.previous:
        return None  # a new take stored over a previous one whose audio was not kept aside
    running = session.scalar(
        select(Job.rerender)
        .where(Job.id == chunk.job_id, Job.status.in_([JobStatus.RUNNING.value, JobStatus.STITCHING.value]))
        .with_for_update()
    )
    if running is None:  # not an unpublished re-render (given up already, or a first render's chunk)
        return None
    kept = {key: value for key, value in chunk.previous.items() if key in _RESTORED}
    restored = session.execute(
        update(Chunk)
        .where(*conditions)
        .values(
            **kept,
            status=ChunkStatus.DONE.value,
            lease_until=None,
            attempt_token=None,
            previous=null(),  # SQL NULL, not JSON null: the chunk is no re-render any more
            error=error,
        )
    )
    if rows(restored) != 1:
        return None
    counted = chunk.status == ChunkStatus.DONE  # its new take was stored, and counted done then
    session.execute(
        update(Job)
        .where(Job.id == chunk.job_id)
        .values(
            status=JobStatus.RUNNING.value,
            stitch_token=None,
            lease_until=None,
            chunks_done=Job.chunks_done + (0 if counted else 1),
            chunks_flagged=Job.chunks_flagged + int(bool(kept.get("flagged"))) - int(bool(chunk.flagged)),
            rerender={**running, "seq": chunk.seq, "error": error, "outcome": outcome},
        )
    )
    session.execute(  # a stitch of the chapter in flight loses its token; the chapter is stitched again
        update(JobChapter)
        .where(JobChapter.job_id == chunk.job_id, JobChapter.chapter == chunk.chapter)
        .values(status=ChapterStatus.PENDING.value, token=None, lease_until=None, attempts=0)
    )
    return int(chunk.chapter)


def rerendering_chunks(session: Session, job_id: uuid.UUID) -> list[int]:
    """The ids of the job's chunks rendered again on request whose new take is not published yet."""
    return list(session.scalars(select(Chunk.id).where(Chunk.job_id == job_id, _rerendering())))

"""A finished book's chunk rendered again on request, a flag accepted, and a failed or cancelled
re-render's previous take put back."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import exists, null, select, update
from sqlalchemy.orm import Session

from models import (
    ChapterStatus,
    Chunk,
    ChunkStatus,
    Job,
    JobChapter,
    JobRerender,
    JobStatus,
)
from worker.jobs.state.common import _rerendering, rows

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

"""A chunk's transitions: claimed under an attempt token, completed (the job's counters moved once a
batch), its lease renewed, released, failed; and when it was sent to a worker."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.orm import Session

from models import (
    Chunk,
    ChunkStatus,
    Job,
    utcnow,
)
from worker.jobs.state.common import _running, claimable, new_token, rows


@dataclass(frozen=True)
class Claimed:
    id: int
    seq: int
    text: str
    voice_id: uuid.UUID
    attempts: int
    rate: float | None = None
    seed: int | None = None


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


def mark_enqueued(session: Session, job_id: uuid.UUID, seqs: list[int], now: datetime | None = None) -> None:
    session.execute(
        update(Chunk).where(Chunk.job_id == job_id, Chunk.seq.in_(seqs)).values(enqueued_at=now or utcnow())
    )


def unsend(session: Session, job_id: uuid.UUID, seqs: list[int]) -> None:
    """Forget that these chunks were sent: they wait for a voice, and its build re-sends them."""
    session.execute(update(Chunk).where(Chunk.job_id == job_id, Chunk.seq.in_(seqs)).values(enqueued_at=None))


def take_for_sending(session: Session, chunk_ids: Sequence[int], now: datetime) -> list[int]:
    """Mark the chunks of ``chunk_ids`` still pending and unsent as sent now; their seqs (a scheduler
    running at the same time takes the others)."""
    return list(
        session.execute(
            update(Chunk)
            .where(
                Chunk.id.in_(list(chunk_ids)),
                Chunk.enqueued_at.is_(None),
                Chunk.status == ChunkStatus.PENDING.value,
            )
            .values(enqueued_at=now)
            .returning(Chunk.seq)
        )
        .scalars()
        .all()
    )


def forget_audio(session: Session, job_id: uuid.UUID) -> None:
    """The job's chunks no longer name their audio (a speech job's, once streamed: the files go)."""
    session.execute(update(Chunk).where(Chunk.job_id == job_id).values(audio_path=None, audio_bytes=None))

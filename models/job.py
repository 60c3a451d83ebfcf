"""Jobs and their chunks. The database, not the broker, is the truth about their state."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UTCDateTime, new_id, utcnow


class JobStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    STITCHING = "stitching"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
ACTIVE = frozenset({JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.STITCHING})


class JobKind(enum.StrEnum):
    BOOK = "book"  # POST /v1/jobs: rendered, stitched into files, downloaded
    SPEECH = "speech"  # POST /v1/audio/speech: rendered in order and streamed, never stitched or stored


class ChunkStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("owner", "idempotency_key", name="uq_jobs_owner_idempotency_key"),
        Index("ix_jobs_owner_created_at", "owner", "created_at"),
        # Progress never counts a chunk twice nor goes below none (worker.jobs.state moves it).
        CheckConstraint("chunks_done >= 0 AND chunks_done <= chunks_total", name="chunks_done_bounds"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=new_id)
    owner: Mapped[str] = mapped_column(String(100), index=True)
    # What the job is for (JobKind): a speech job's chunks are read by the API as they finish
    # (worker.jobs.speech) and it is not listed among the owner's jobs.
    kind: Mapped[str] = mapped_column(
        String(12), default=JobKind.BOOK.value, server_default=JobKind.BOOK.value
    )
    status: Mapped[str] = mapped_column(String(12), default=JobStatus.QUEUED.value, index=True)
    title: Mapped[str] = mapped_column(String(200))
    script_format: Mapped[str] = mapped_column(String(12))
    voice_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("voices.id"))
    engine: Mapped[str] = mapped_column(String(50))
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    chapters: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    chunks_total: Mapped[int] = mapped_column(Integer)
    chunks_done: Mapped[int] = mapped_column(Integer, default=0)
    chunks_reused: Mapped[int] = mapped_column(Integer, default=0)  # done from an earlier render's audio
    chunks_flagged: Mapped[int] = mapped_column(Integer, default=0)  # kept though they failed QA
    chunks_rerendered: Mapped[int] = mapped_column(Integer, default=0)  # rendered again after failing QA
    # 0 for the first output; +1 each time a chunk of the finished job is rendered again on request
    # (its previous output stays downloadable until the new one is published)
    revision: Mapped[int] = mapped_column(Integer, default=0)
    # The last chunk rendered again on request (it counted ``revision``): {"seq", "error", "outcome"};
    # ``error`` names why the new take was refused or cancelled (``outcome``), in which case the chunk kept
    # its previous take (worker.jobs.rerender).
    rerender: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # Stitching is claimed like a chunk: a lease and a token; the sweeper re-issues an expired lease.
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    stitch_token: Mapped[str | None] = mapped_column(String(32), default=None)
    output_path: Mapped[str | None] = mapped_column(String(500), default=None)
    output_format: Mapped[str] = mapped_column(String(8))
    output_bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)
    output_duration: Mapped[float | None] = mapped_column(Float, default=None)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    expired_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    request_sha256: Mapped[str | None] = mapped_column(String(64), default=None)
    # Completion webhook: where to POST, and how delivery went (the sweeper retries undelivered ones).
    webhook_url: Mapped[str | None] = mapped_column(String(2000), default=None)
    webhook_attempts: Mapped[int] = mapped_column(Integer, default=0)
    webhook_delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    webhook_next_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    webhook_error: Mapped[str | None] = mapped_column(Text, default=None)
    # The ``job.flagged`` event (a job that succeeded with chunks kept though they failed QA): its own
    # delivery record, so that it is retried without sending the end event again.
    flags_webhook_attempts: Mapped[int] = mapped_column(Integer, default=0)
    flags_webhook_delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    flags_webhook_next_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    api_key_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, default=None)
    # Delivery into the owner's Audiobookshelf (worker.audiobookshelf), for a job that asked for it:
    # pending until the upload went through (delivered) or will not (failed); retried with backoff.
    abs_state: Mapped[str | None] = mapped_column(String(10), default=None)
    abs_attempts: Mapped[int] = mapped_column(Integer, default=0)
    abs_next_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    abs_error: Mapped[str | None] = mapped_column(Text, default=None)
    # The ``job.delivered`` / ``job.delivery_failed`` event once that delivery ended: its own record.
    delivery_webhook_attempts: Mapped[int] = mapped_column(Integer, default=0)
    delivery_webhook_delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    delivery_webhook_next_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # A long script waiting to be planned by a worker (worker.jobs.intake); None once planned. An EPUB
    # waiting is ``""`` here and its bytes in ``script_file`` (deferred: a status read never loads them).
    script: Mapped[str | None] = mapped_column(Text, default=None)
    script_file: Mapped[bytes | None] = mapped_column(LargeBinary, default=None, deferred=True)
    # The output's length estimated at submission (worker.jobs.limits): what the daily quota counts.
    estimated_seconds: Mapped[float | None] = mapped_column(Float, default=None)
    # Every artefact of the finished job but the book itself (chapter files, the ZIP of them, subtitles,
    # the manifest, the ACX report): name, kind, format, chapter, duration, bytes and the server's path.
    files: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    files_bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)  # counts against the owner


class Chunk(Base):
    __tablename__ = "chunks"
    __table_args__ = (
        UniqueConstraint("job_id", "seq", name="uq_chunks_job_id_seq"),
        Index("ix_chunks_status_lease", "status", "lease_until"),
        Index("ix_chunks_content_key", "content_key"),
        Index("ix_chunks_take_key", "take_key"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    chapter: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)  # what the engine reads: normalised, lexicons applied
    source_text: Mapped[str | None] = mapped_column(Text, default=None)  # as written (subtitles, preview)
    pause_after: Mapped[str] = mapped_column(String(10))
    pause_seconds: Mapped[float | None] = mapped_column(Float, default=None)  # a break: replaces pause_after
    rate: Mapped[float | None] = mapped_column(Float, default=None)  # speaking-rate multiplier; None: 1
    seed: Mapped[int | None] = mapped_column(Integer, default=None)  # a take asked for; None: from the text
    voice_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("voices.id"))
    # Who says it, in a job with a cast: a character's name, or "narrator"; None without a cast.
    speaker: Mapped[str | None] = mapped_column(String(200), default=None)
    status: Mapped[str] = mapped_column(String(10), default=ChunkStatus.PENDING.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    attempt_token: Mapped[str | None] = mapped_column(String(32), default=None)
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # What the chunk's audio depends on, hashed (worker.jobs.reuse): a later chunk of the same owner with
    # the same key takes this audio instead of rendering.
    content_key: Mapped[str | None] = mapped_column(String(64), default=None)
    # Set on a take chosen on request (a re-render's seed) and on chunks that took it: the content key
    # without the seed, so that a later job reading the same text takes the chosen take rather than the
    # one its text's seed gives (worker.jobs.reuse).
    take_key: Mapped[str | None] = mapped_column(String(64), default=None)
    audio_path: Mapped[str | None] = mapped_column(String(500), default=None)
    duration: Mapped[float | None] = mapped_column(Float, default=None)
    audio_bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)  # counts against the owner
    # Loudness and levels measured when the chunk was rendered (worker.audio.loudness.Levels as JSON):
    # the stitcher's per-chunk gain and the ACX predictions read these instead of the audio.
    levels: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    # Word times the engine reported (espeak does): [start s, end s, text start, text end] per word,
    # relative to the stored audio, offsets into ``text``; None when the engine reports none.
    words: Mapped[list[list[float]] | None] = mapped_column(JSON, default=None)
    # The chunk QA of the kept take (worker.qa: scores, reasons, flagged words, attempts), and whether it
    # was kept although it failed (the job's policy flags rather than fails).
    qa: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    flagged: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    # While the chunk is rendered again on request: what it was (text, source_text, seed, qa, flagged;
    # its audio columns are untouched until the new take is stored), restored if the new take fails.
    previous: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)


class ChapterStatus(enum.StrEnum):
    PENDING = "pending"  # some of its chunks are not rendered yet
    STITCHING = "stitching"  # one worker holds it (token and lease) and is building its files
    READY = "ready"  # its files are downloadable while later chapters render


class JobChapter(Base):
    """A chapter of a job, stitched and mastered as soon as its last chunk is done, so that it can be
    downloaded while later chapters still render; the book is then joined from these files. Claimed by
    compare-and-set like chunks: one worker per chapter, a lease the sweeper re-issues if it dies."""

    __tablename__ = "job_chapters"
    __table_args__ = (Index("ix_job_chapters_status_lease", "status", "lease_until"),)

    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    chapter: Mapped[int] = mapped_column(Integer, primary_key=True)  # the chunks' chapter index
    position: Mapped[int] = mapped_column(Integer)  # 1-based order in the book
    status: Mapped[str] = mapped_column(String(10), default=ChapterStatus.PENDING.value)
    token: Mapped[str | None] = mapped_column(String(32), default=None)
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # worker.jobs.deliver.ChapterBuild as JSON: its files, and where each chunk is inside them
    build: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)  # counts against the owner
    duration: Mapped[float | None] = mapped_column(Float, default=None)
    ready_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # the job.chapter_ready webhook of this chapter (the job's webhook_url), delivered at least once
    webhook_attempts: Mapped[int] = mapped_column(Integer, default=0)
    webhook_next_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    webhook_delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


class JobRerender(Base):
    """One accepted re-render of a finished job's chunk (POST .../chunks/{seq}/rerender): what it counts
    against its owner's daily audio quota and its job's hourly re-render limit (worker.jobs.usage)."""

    __tablename__ = "job_rerenders"
    __table_args__ = (
        Index("ix_job_rerenders_owner_created_at", "owner", "created_at"),
        Index("ix_job_rerenders_job_id_created_at", "job_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    owner: Mapped[str] = mapped_column(String(100))
    seq: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)  # the chunk's estimated speech, as a job's estimate
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

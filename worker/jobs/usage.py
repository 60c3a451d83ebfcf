"""What an owner uses and may use: stored bytes, unfinished jobs, audio in the last 24 hours, worker time
of voice prompt builds in the last 24 hours, each against its per-owner quota (``TOME_QUOTA_*``; 0 means
no limit). Read by ``GET /v1/usage`` and checked before a job or a voice is accepted. No Flask or Celery
imports.

Voice builds count the wall seconds each build that ran held a worker process and the reference
audio it encoded. Builds not yet ended reserve an estimate (:func:`build_estimate`) against
the quota, settled by the measured time when they end: an upload is refused while builds that ran and
those waiting or in flight reach it, and a waiting build is sent only while those that ran and those in
flight leave room (worker.voices.builds).

Stored bytes are the owner's reference recordings, chunk audio and outputs that still exist (expiry
removes chunks and outputs; they then stop counting). Audio in the last 24 hours is the estimated output
of every job submitted in that window (what it was accepted for; what it rendered if it failed or was
cancelled), plus the estimated speech of the chunks re-rendered on request then. A job's re-renders are
also limited per hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import String, case, cast, func, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from models import Chunk, Job, JobChapter, JobRerender, JobStatus, Voice, VoiceBuild
from models.job import ACTIVE
from worker.config import Settings
from worker.voices import state

WINDOW = timedelta(hours=24)
RERENDER_WINDOW = timedelta(hours=1)
# A build's worker seconds per second of reference audio while no build of the last 24 hours says better
# (a neural encoder on a GPU: 52-55 s for a 119 s reference on the slowest measured).
BUILD_SECONDS_PER_REFERENCE_SECOND = 0.5


@dataclass(frozen=True)
class Usage:
    stored_bytes: int
    unfinished_jobs: int
    audio_seconds_24h: float
    build_seconds_24h: float = 0.0  # worker seconds of the owner's voice prompt builds
    build_audio_seconds_24h: float = 0.0  # reference audio those builds encoded
    builds_24h: int = 0
    build_seconds_reserved: float = 0.0  # the estimates of its builds waiting or in flight


@dataclass(frozen=True)
class Quotas:
    stored_bytes: int
    unfinished_jobs: int
    audio_seconds_24h: float
    rerenders_per_job_hour: int = 0
    build_seconds_24h: float = 0.0

    @classmethod
    def of(cls, settings: Settings) -> Quotas:
        return cls(
            settings.quotas.storage_bytes,
            settings.quotas.unfinished_jobs,
            settings.quotas.audio_seconds_per_day,
            settings.limits.max_rerenders_per_job_hour,
            settings.quotas.build_seconds_per_day,
        )


class QuotaExceeded(Exception):
    """``code`` names the quota; ``retry_after`` is set when waiting can help (seconds)."""

    def __init__(self, code: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.retry_after = code, message, retry_after


def usage_of(session: Session, owner: str, now: datetime, *, shared_chunks: bool = False) -> Usage:
    """What ``owner`` uses now. ``shared_chunks``: chunk audio reused by later jobs is one file (hard links
    on one disk), weighed once; in a bucket every copy weighs."""
    unfinished = session.scalar(
        select(func.count()).where(Job.owner == owner, Job.status.in_([s.value for s in ACTIVE]))
    )
    builds, build_seconds, build_audio = session.execute(
        select(
            func.count(VoiceBuild.id),
            func.coalesce(func.sum(VoiceBuild.seconds), 0),
            func.coalesce(func.sum(VoiceBuild.audio_seconds), 0),
        ).where(VoiceBuild.owner == owner, VoiceBuild.created_at >= now - WINDOW)
    ).one()
    return Usage(
        _stored_bytes(session, owner, shared_chunks),
        int(unfinished or 0),
        _audio_seconds(session, owner, now),
        float(build_seconds or 0),
        float(build_audio or 0),
        int(builds or 0),
        reserved_build_seconds(session, owner, now, state.unended(now)),
    )


def build_estimate(session: Session, now: datetime) -> float:
    """Worker seconds a build is estimated to take per second of reference audio: what the builds of the
    last 24 hours took (every owner's), else :data:`BUILD_SECONDS_PER_REFERENCE_SECOND`."""
    seconds, audio = session.execute(
        select(func.sum(VoiceBuild.seconds), func.sum(VoiceBuild.audio_seconds)).where(
            VoiceBuild.created_at >= now - WINDOW, VoiceBuild.audio_seconds > 0
        )
    ).one()
    if not audio or seconds is None:
        return BUILD_SECONDS_PER_REFERENCE_SECOND
    return float(seconds) / float(audio)


def reserved_build_seconds(session: Session, owner: str, now: datetime, which: ColumnElement[bool]) -> float:
    """The estimated worker seconds of the owner's builds that ``which`` selects (not yet ended)."""
    audio = session.scalar(
        select(func.coalesce(func.sum(Voice.audio_duration), 0)).where(Voice.owner == owner, which)
    )
    return float(audio or 0) * build_estimate(session, now) if audio else 0.0


def build_seconds_ran(session: Session, owner: str, now: datetime) -> float:
    """The worker seconds of the owner's builds that ran in the last 24 hours."""
    seconds = session.scalar(
        select(func.coalesce(func.sum(VoiceBuild.seconds), 0)).where(
            VoiceBuild.owner == owner, VoiceBuild.created_at >= now - WINDOW
        )
    )
    return float(seconds or 0)


def build_room(ran: float, reserved: float, quotas: Quotas) -> bool:
    """Builds that ran (``ran`` worker seconds) and those reserved (estimated) leave room for another."""
    limit = quotas.build_seconds_24h
    return not limit or ran + reserved < limit


def _stored_bytes(session: Session, owner: str, shared_chunks: bool) -> int:
    """References, books and their files, chapters built early, and chunk audio."""
    references = session.scalar(
        select(
            func.coalesce(
                func.sum(
                    func.coalesce(Voice.audio_bytes, Voice.audio_duration * Voice.audio_sample_rate * 2)
                ),
                0,
            )
        ).where(Voice.owner == owner, Voice.deleted_at.is_(None))
    )
    outputs = session.scalar(  # the book and its files; a cover from submission on (files_bytes)
        select(
            func.coalesce(func.sum(func.coalesce(Job.output_bytes, 0) + func.coalesce(Job.files_bytes, 0)), 0)
        ).where(Job.owner == owner, or_(Job.output_path.is_not(None), Job.files_bytes.is_not(None)))
    )
    early_chapters = session.scalar(  # chapters built before the book (a finished job lists its own)
        select(func.coalesce(func.sum(JobChapter.bytes), 0))
        .join(Job, Job.id == JobChapter.job_id)
        .where(Job.owner == owner, Job.status != JobStatus.SUCCEEDED.value)
    )
    # One file a content key on one disk (reused chunks are hard links; a chunk without a key is its own
    # file); in a bucket every chunk is its own copy.
    file_of = func.coalesce(Chunk.content_key, cast(Chunk.id, String)) if shared_chunks else Chunk.id
    files = (
        select(func.max(Chunk.audio_bytes).label("size"))
        .join(Job, Job.id == Chunk.job_id)
        .where(Job.owner == owner, Chunk.audio_path.is_not(None))
        .group_by(file_of)
        .subquery()
    )
    chunks = session.scalar(select(func.coalesce(func.sum(files.c.size), 0)))
    return int(references or 0) + int(outputs or 0) + int(chunks or 0) + int(early_chapters or 0)


def _audio_seconds(session: Session, owner: str, now: datetime) -> float:
    """Audio of the last 24 hours: each job's estimate (what it rendered, if it ended early), re-renders."""
    ended_early = Job.status.in_([JobStatus.FAILED.value, JobStatus.CANCELLED.value])
    rendered = (
        select(func.coalesce(func.sum(Chunk.duration), 0)).where(Chunk.job_id == Job.id).scalar_subquery()
    )
    audio = session.scalar(
        select(
            func.coalesce(
                func.sum(case((ended_early, rendered), else_=func.coalesce(Job.estimated_seconds, 0))), 0
            )
        ).where(Job.owner == owner, Job.created_at >= now - WINDOW)
    )
    rerendered = session.scalar(
        select(func.coalesce(func.sum(JobRerender.seconds), 0)).where(
            JobRerender.owner == owner, JobRerender.created_at >= now - WINDOW
        )
    )
    return float(audio or 0) + float(rerendered or 0)


def check_new_voice(usage: Usage, quotas: Quotas) -> None:
    """Raise :class:`QuotaExceeded` (429, with when to retry) if the owner's voice builds of the last 24
    hours and the estimates of those waiting or in flight already reach the build quota's worker time: a
    new reference would need another build."""
    if not build_room(usage.build_seconds_24h, usage.build_seconds_reserved, quotas):
        raise QuotaExceeded(
            "quota_build_seconds_per_day",
            f"your voice prompt builds took {usage.build_seconds_24h:.0f} s of worker time in the last 24 "
            f"hours and those waiting or running are estimated at {usage.build_seconds_reserved:.0f} s; "
            f"the quota is {quotas.build_seconds_24h:.0f} s (TOME_QUOTA_BUILD_SECONDS_PER_DAY)",
            retry_after=3600,
        )


@dataclass(frozen=True)
class RecentRerenders:
    """A job's re-renders in the last hour: how many, and when the oldest of them was accepted."""

    count: int
    oldest: datetime | None

    @classmethod
    def of(cls, session: Session, job_id: object, now: datetime) -> RecentRerenders:
        count, oldest = session.execute(
            select(func.count(), func.min(JobRerender.created_at)).where(
                JobRerender.job_id == job_id, JobRerender.created_at >= now - RERENDER_WINDOW
            )
        ).one()
        return cls(int(count or 0), oldest)


def check_rerender(
    usage: Usage, quotas: Quotas, seconds: float, recent: RecentRerenders, now: datetime
) -> None:
    """Raise :class:`QuotaExceeded` (429, with when to retry) if a re-render of ``seconds`` estimated
    speech would exceed the job's hourly re-render limit or the owner's daily audio quota."""
    limit = quotas.rerenders_per_job_hour
    if limit and recent.count >= limit:
        frees = (recent.oldest or now) + RERENDER_WINDOW - now
        raise QuotaExceeded(
            "rerenders_per_hour",
            f"this job's chunks were rendered again {recent.count} times in the last hour; the limit is "
            f"{limit} (TOME_MAX_RERENDERS_PER_JOB_HOUR)",
            retry_after=max(1, int(frees.total_seconds()) + 1),
        )
    _check_audio_day(usage, quotas, seconds, "this re-render")


def _check_audio_day(usage: Usage, quotas: Quotas, seconds: float, what: str) -> None:
    """Raise :class:`QuotaExceeded` if ``what`` (``seconds`` of estimated speech) and the audio
    submitted in the last 24 hours exceed the owner's daily audio quota."""
    if quotas.audio_seconds_24h and usage.audio_seconds_24h + seconds > quotas.audio_seconds_24h:
        raise QuotaExceeded(
            "quota_audio_per_day",
            f"{what} (about {seconds:.0f} s) and the {usage.audio_seconds_24h:.0f} s of audio you "
            f"submitted in the last 24 hours exceed the quota of {quotas.audio_seconds_24h:.0f} s "
            "(TOME_QUOTA_AUDIO_SECONDS_PER_DAY)",
            retry_after=3600,
        )


def check_new_job(usage: Usage, quotas: Quotas, seconds: float, sample_rate: int) -> None:
    """Raise :class:`QuotaExceeded` if a job of ``seconds`` estimated output would exceed a quota. Its
    chunks, as WAV at ``sample_rate``, are what it will store."""
    if quotas.unfinished_jobs and usage.unfinished_jobs >= quotas.unfinished_jobs:
        raise QuotaExceeded(
            "quota_unfinished_jobs",
            f"you have {usage.unfinished_jobs} unfinished jobs; the quota is {quotas.unfinished_jobs} "
            "(TOME_QUOTA_UNFINISHED_JOBS): wait for some to end",
            retry_after=30,
        )
    _check_audio_day(usage, quotas, seconds, "this job")
    new_bytes = int(seconds * sample_rate * 2)
    check_storage(usage, quotas, new_bytes)


def check_storage(usage: Usage, quotas: Quotas, new_bytes: int) -> None:
    if quotas.stored_bytes and usage.stored_bytes + new_bytes > quotas.stored_bytes:
        raise QuotaExceeded(
            "quota_storage",
            f"you store {usage.stored_bytes} bytes; with about {new_bytes} more this would exceed the quota "
            f"of {quotas.stored_bytes} bytes (TOME_QUOTA_STORAGE_BYTES): delete voices or wait for "
            "outputs to expire",
        )

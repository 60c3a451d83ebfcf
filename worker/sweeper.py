"""The periodic sweep: the database is the truth, so whatever a lost message or a dead worker left
behind is found here and sent again. Re-sending is always safe: every task re-checks state by CAS."""

from __future__ import annotations

import contextlib
import logging
import shutil
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.engine import CursorResult

from models import (
    ACTIVE,
    CacheStatus,
    Chunk,
    ChunkStatus,
    Job,
    JobStatus,
    RateWindow,
    Voice,
    unit_of_work,
    utcnow,
)
from worker import state
from worker.filesystem_broker import PARTIAL_PREFIX, TAKEN_PREFIX
from worker.pipeline import (
    BUILD_VOICE,
    DELIVER_WEBHOOK,
    START_JOB,
    STITCH_JOB,
    Enqueue,
    enqueue_chunks,
    job_dir,
    maybe_begin_stitch,
)
from worker.runtime import Runtime
from worker.webhooks import due_filter

log = logging.getLogger(__name__)


TEMP_FILE_AGE = timedelta(hours=1)


@dataclass
class SweepReport:
    voices_resent: int = 0
    voices_marked_stale: int = 0
    temp_files_removed: int = 0
    outputs_expired: int = 0
    webhooks_sent: int = 0
    jobs_restarted: int = 0
    chunks_resent: int = 0
    chunks_failed: int = 0
    stitches_reissued: int = 0
    stitches_started: int = 0
    failed_jobs: list[str] = field(default_factory=list)


def sweep(rt: Runtime, enqueue: Enqueue, now: datetime | None = None) -> SweepReport:
    now = now or utcnow()
    settings = rt.settings
    report = SweepReport()
    _sweep_voices(rt, enqueue, now, report)
    report.outputs_expired = expire_outputs(rt, now)
    report.webhooks_sent = _resend_webhooks(rt, enqueue, now)
    report.temp_files_removed = remove_stale_temp_files(rt.settings.data_dir.resolve(), now - TEMP_FILE_AGE)

    # Queued jobs nobody started (lost message, or still waiting for a voice): start them again.
    grace = now - timedelta(seconds=settings.queued_grace_seconds)
    with unit_of_work(rt.sessions) as session:
        queued = list(
            session.scalars(
                select(Job.id).where(Job.status == JobStatus.QUEUED.value, Job.updated_at < grace)
            )
        )
        if queued:
            session.execute(update(Job).where(Job.id.in_(queued)).values(updated_at=now))
    for job_id in queued:
        enqueue(START_JOB, [str(job_id)])
    report.jobs_restarted = len(queued)

    # Chunks of running jobs whose lease expired (worker died) or whose message may be lost.
    requeue_before = now - timedelta(seconds=settings.pending_requeue_seconds)
    with rt.sessions() as session:
        rows = session.execute(
            select(Chunk.id, Chunk.job_id, Chunk.seq, Chunk.attempts, Chunk.status)
            .join(Job, Job.id == Chunk.job_id)
            .where(
                Job.status == JobStatus.RUNNING.value,
                or_(
                    and_(Chunk.status == ChunkStatus.RUNNING.value, Chunk.lease_until < now),
                    and_(
                        Chunk.status == ChunkStatus.PENDING.value,
                        or_(Chunk.enqueued_at.is_(None), Chunk.enqueued_at < requeue_before),
                    ),
                ),
            )
        ).all()
    resend: dict[uuid.UUID, list[int]] = defaultdict(list)
    for row in rows:
        if row.status == ChunkStatus.RUNNING and row.attempts >= settings.max_chunk_attempts:
            error = (
                f"chunk {row.seq} failed after {row.attempts} attempts "
                "(its worker was lost or timed out each time)"
            )
            with unit_of_work(rt.sessions) as session:
                if state.fail_chunk(session, row.id, None, error):
                    state.fail_job(session, row.job_id, error, now)
                    report.chunks_failed += 1
                    report.failed_jobs.append(str(row.job_id))
            continue
        resend[row.job_id].append(row.seq)
    for job_id, seqs in resend.items():
        enqueue_chunks(rt, job_id, seqs, enqueue)
        report.chunks_resent += len(seqs)

    # Running jobs whose last chunk finished but whose stitch was never started (worker died in between).
    with rt.sessions() as session:
        complete = list(
            session.scalars(
                select(Job.id).where(
                    Job.status == JobStatus.RUNNING.value, Job.chunks_done == Job.chunks_total
                )
            )
        )
        expired = list(
            session.scalars(
                select(Job.id).where(Job.status == JobStatus.STITCHING.value, Job.lease_until < now)
            )
        )
    for job_id in complete:
        report.stitches_started += maybe_begin_stitch(rt, job_id, enqueue)
    lease = timedelta(seconds=settings.stitch_lease_seconds)
    for job_id in expired:
        with unit_of_work(rt.sessions) as session:
            token = state.reissue_stitch(session, job_id, lease, now)
        if token is not None:
            enqueue(STITCH_JOB, [str(job_id), token])
            report.stitches_reissued += 1
    if any(value for value in vars(report).values() if isinstance(value, int)):
        log.info("sweep: %s", report)
    return report


def _sweep_voices(rt: Runtime, enqueue: Enqueue, now: datetime, report: SweepReport) -> None:
    """Prompts of an older engine become stale; builds whose worker died, and builds whose message was
    lost, are sent again. A stale voice that an unfinished job's chunks use is rebuilt."""
    engine = rt.engine()
    prefix = f"{engine.name}/{engine.version}/"
    grace = now - timedelta(seconds=rt.settings.queued_grace_seconds)
    live = Voice.deleted_at.is_(None)
    with unit_of_work(rt.sessions) as session:
        stale = session.execute(
            update(Voice)
            .where(
                live,
                Voice.cache_status == CacheStatus.READY,
                ~Voice.cache_key.startswith(prefix, autoescape=True),
            )
            .values(cache_status=CacheStatus.STALE)
        )
        assert isinstance(stale, CursorResult)
        report.voices_marked_stale = int(stale.rowcount)
        session.execute(
            update(Voice)
            .where(live, Voice.cache_status == CacheStatus.PROCESSING, Voice.cache_lease_until < now)
            .values(cache_status=CacheStatus.PENDING, cache_lease_until=None)
        )
        # A job needs the voices its chunks use (its script's voice directives), not just its own voice.
        needed = (
            select(Chunk.voice_id)
            .join(Job, Job.id == Chunk.job_id)
            .where(Job.status.in_([s.value for s in ACTIVE]))
            .distinct()
        )
        session.execute(
            update(Voice)
            .where(live, Voice.cache_status == CacheStatus.STALE, Voice.id.in_(needed))
            .values(cache_status=CacheStatus.PENDING)
        )
        waiting = list(
            session.scalars(
                select(Voice.id).where(
                    live, Voice.cache_status == CacheStatus.PENDING, Voice.updated_at < grace
                )
            )
        )
        if waiting:
            session.execute(update(Voice).where(Voice.id.in_(waiting)).values(updated_at=now))
    for voice_id in waiting:
        enqueue(BUILD_VOICE, [str(voice_id)])
    report.voices_resent = len(waiting)


def expire_outputs(rt: Runtime, now: datetime) -> int:
    """Remove the audio (output and chunks) of jobs past their expiry; the job row records when."""
    with rt.sessions() as session:
        due = list(
            session.scalars(select(Job.id).where(Job.expires_at < now, Job.expired_at.is_(None)).limit(500))
        )
    for job_id in due:
        with unit_of_work(rt.sessions) as session:
            session.execute(
                update(Job)
                .where(Job.id == job_id, Job.expired_at.is_(None))
                .values(expired_at=now, output_path=None)
            )
            session.execute(update(Chunk).where(Chunk.job_id == job_id).values(audio_path=None))
        shutil.rmtree(job_dir(rt, job_id), ignore_errors=True)
    with unit_of_work(rt.sessions) as session:  # rate-limit windows older than an hour
        session.execute(delete(RateWindow).where(RateWindow.window_start < int(now.timestamp()) - 3600))
    return len(due)


def _resend_webhooks(rt: Runtime, enqueue: Enqueue, now: datetime) -> int:
    with rt.sessions() as session:
        due = list(
            session.scalars(
                select(Job.id).where(due_filter(now, rt.settings.webhook_max_attempts)).limit(500)
            )
        )
    for job_id in due:
        enqueue(DELIVER_WEBHOOK, [str(job_id)])
    return len(due)


# Our own temp files (*.tmp, .prompt-*.tmp, upload-*, the embedded broker's messages being written or
# read) and safetensors' (it writes a ".tmpXXXXXX" next to the file it saves and renames it).
TEMP_PATTERNS = (".prompt-*.tmp", "*.tmp", ".tmp*", "upload-*", f"{PARTIAL_PREFIX}*", f"{TAKEN_PREFIX}*")
TEMP_FOLDERS = ("voices", "jobs", "uploads", "broker")


def remove_stale_temp_files(data_dir: Path, older_than: datetime) -> int:
    """Temp files left by a process killed mid-write (never loadable: they were never renamed)."""
    removed = 0
    cutoff = older_than.timestamp()
    for folder in (data_dir / name for name in TEMP_FOLDERS):
        if not folder.is_dir():
            continue
        for pattern in TEMP_PATTERNS:
            for path in folder.rglob(pattern):
                with contextlib.suppress(FileNotFoundError):
                    if path.is_file() and path.stat().st_mtime < cutoff:
                        path.unlink()
                        removed += 1
    return removed

"""The periodic sweep: the database is the truth, so whatever a lost message or a dead worker left
behind is found here and sent again. Re-sending is always safe: every task re-checks state by CAS."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import or_, select

from models import ACTIVE, Chunk, Job, JobChapter, Voice, unit_of_work, utcnow
from worker.audiobookshelf import due_filter as audiobookshelf_due
from worker.filesystem_broker import PARTIAL_PREFIX, TAKEN_PREFIX
from worker.jobs import actions, rerender
from worker.jobs import state as jobs
from worker.jobs.chapters import begin_chapter
from worker.jobs.expire import expire
from worker.jobs.preview import expire_previews, resend_queued_previews
from worker.jobs.scheduler import schedule
from worker.jobs.stitch import maybe_begin_stitch
from worker.runtime import Runtime
from worker.task_names import (
    DELIVER_AUDIOBOOKSHELF,
    DELIVER_CHAPTER_WEBHOOK,
    DELIVER_WEBHOOK,
    START_JOB,
    STITCH_CHAPTER,
    STITCH_JOB,
    Enqueue,
)
from worker.voices import state as voices
from worker.voices.builds import send_builds
from worker.webhooks import chapter_due_filter, delivery_event_due_filter, due_filter, flags_due_filter

log = logging.getLogger(__name__)


TEMP_FILE_AGE = timedelta(hours=1)
# How old an object in the bucket must be before it can be an orphan: longer than any upload-then-commit.
ORPHAN_GRACE = timedelta(hours=1)
# How often a sweeping process lists the bucket for orphans: a listing reads every key of every job and
# voice, too much for every 30-second pass, and nothing younger than ORPHAN_GRACE can be removed anyway.
ORPHAN_INTERVAL = timedelta(minutes=15)
# Ids asked of the database at once while looking for orphans.
_ID_BATCH = 500


@dataclass
class SweepReport:
    voices_resent: int = 0
    voices_marked_stale: int = 0
    temp_files_removed: int = 0
    stored_orphans_removed: int = 0
    outputs_expired: int = 0
    chunk_folders_removed: int = 0
    webhooks_sent: int = 0
    jobs_restarted: int = 0
    previews_removed: int = 0
    previews_resent: int = 0
    chunks_resent: int = 0
    render_tasks_scheduled: int = 0
    chunks_failed: int = 0
    stitches_reissued: int = 0
    stitches_started: int = 0
    chapters_started: int = 0
    chapters_reissued: int = 0
    failed_jobs: list[str] = field(default_factory=list)
    failed_steps: list[str] = field(default_factory=list)


# When this process last listed the bucket for orphans (per bucket and prefix).
_orphans_listed: dict[str, datetime] = {}


def sweep(rt: Runtime, enqueue: Enqueue, now: datetime | None = None) -> SweepReport:
    """One pass of every step below; each is safe to repeat and independent of the others, so a step
    that fails (a storage error, an object the bucket should not hold) is logged and named in the
    report, and the steps after it still run: lost messages are re-sent even when expiry cannot work."""
    now = now or utcnow()
    report = SweepReport()

    def step(name: str, run: Callable[[], int | None]) -> int:
        """``run()``'s count (0 for a step that fills the report itself, or fails)."""
        try:
            return run() or 0
        except Exception:
            log.exception("sweep: the step %r failed; the other steps still ran", name)
            report.failed_steps.append(name)
            return 0

    step("voices", lambda: _sweep_voices(rt, enqueue, now, report))
    step("expire", lambda: _expire(rt, now, report))
    report.webhooks_sent = step("webhooks", lambda: _resend_webhooks(rt, enqueue, now))
    report.temp_files_removed = step(
        "temp files", lambda: remove_stale_temp_files(rt.layout.root, now - TEMP_FILE_AGE)
    )
    report.stored_orphans_removed = step("stored orphans", lambda: _remove_orphans_when_due(rt, now))
    report.previews_removed = step("previews", lambda: expire_previews(rt, now))
    report.previews_resent = step("queued previews", lambda: resend_queued_previews(rt, enqueue, now))
    report.jobs_restarted = step("queued jobs", lambda: _restart_queued_jobs(rt, enqueue, now))
    step("overdue chunks", lambda: _resend_overdue_chunks(rt, enqueue, now, report))
    report.render_tasks_scheduled = step("schedule", lambda: schedule(rt, enqueue))
    step("chapters", lambda: _resume_chapters(rt, enqueue, now, report))
    step("stitches", lambda: _resume_stitches(rt, enqueue, now, report))
    if report.failed_steps or any(value for value in vars(report).values() if isinstance(value, int)):
        log.info("sweep: %s", report)
    return report


def _remove_orphans_when_due(rt: Runtime, now: datetime) -> int:
    """:func:`remove_stored_orphans` at most every ORPHAN_INTERVAL in this process."""
    if rt.storage.kind == "local":
        return 0
    storage = rt.settings.storage
    where = f"{storage.s3_endpoint_url}/{storage.s3_bucket}/{storage.s3_prefix}"
    last = _orphans_listed.get(where)
    if last is not None and timedelta(0) <= now - last < ORPHAN_INTERVAL:
        return 0
    _orphans_listed[where] = now
    return remove_stored_orphans(rt, now)


def _restart_queued_jobs(rt: Runtime, enqueue: Enqueue, now: datetime) -> int:
    """Queued jobs nobody started (a lost message, or a wait for a voice whose wake-up was lost)."""
    quiet_since = now - timedelta(seconds=rt.settings.tasks.queued_grace_seconds)
    with unit_of_work(rt.sessions) as session:
        queued = jobs.take_quiet_queued(session, quiet_since, now)
    for job_id in queued:
        enqueue(START_JOB, [str(job_id)])
    return len(queued)


def _resend_overdue_chunks(rt: Runtime, enqueue: Enqueue, now: datetime, report: SweepReport) -> None:
    """Chunks whose lease expired (their worker died) are sent again, or fail the job once they have used
    every attempt; pending chunks whose message may be lost are sent again."""
    settings = rt.settings
    sent_before = now - timedelta(seconds=settings.tasks.pending_requeue_seconds)
    with rt.sessions() as session:
        overdue = jobs.overdue_chunks(session, now, sent_before)
    resend: dict[uuid.UUID, list[int]] = defaultdict(list)
    for chunk in overdue:
        if chunk.running and chunk.attempts >= settings.tasks.max_chunk_attempts:
            error = (
                f"chunk {chunk.seq} failed after {chunk.attempts} attempts "
                "(its worker was lost or timed out each time)"
            )
            if rerender.fail_chunk(rt, chunk.job_id, (chunk.chunk_id, None), error, enqueue):
                report.chunks_failed += 1
                report.failed_jobs.append(str(chunk.job_id))
            continue
        resend[chunk.job_id].append(chunk.seq)
    for job_id, seqs in resend.items():
        actions.send_chunks(rt, job_id, seqs, enqueue)
        report.chunks_resent += len(seqs)


def _resume_stitches(rt: Runtime, enqueue: Enqueue, now: datetime, report: SweepReport) -> None:
    """Jobs whose last chunk finished but whose stitch never began, and stitches whose worker died."""
    with rt.sessions() as session:
        complete = jobs.unstitched_jobs(session)
        expired = jobs.expired_stitches(session, now)
    for job_id in complete:
        report.stitches_started += maybe_begin_stitch(rt, job_id, enqueue)
    lease = timedelta(seconds=rt.settings.tasks.stitch_lease_seconds)
    for job_id in expired:
        with unit_of_work(rt.sessions) as session:
            token = jobs.reissue_stitch(session, job_id, lease, now)
        if token is not None:
            enqueue(STITCH_JOB, [str(job_id), token])
            report.stitches_reissued += 1


def _resume_chapters(rt: Runtime, enqueue: Enqueue, now: datetime, report: SweepReport) -> None:
    """Chapters whose last chunk finished but whose stitch never began, and chapter stitches whose worker
    died: sent again, until a chapter has used every attempt (then the job fails, naming it)."""
    with rt.sessions() as session:
        unclaimed, expired = jobs.chapters_to_resume(session, now)
    for job_id, chapter in unclaimed:
        report.chapters_started += begin_chapter(rt, job_id, chapter, enqueue)
    lease = timedelta(seconds=rt.settings.tasks.stitch_lease_seconds)
    for job_id, chapter in expired:
        with unit_of_work(rt.sessions) as session:
            row = session.get(JobChapter, (job_id, chapter))
            used = row.attempts if row is not None else 0
            token = None
            if used < rt.settings.tasks.max_chunk_attempts:
                token = jobs.reissue_chapter(session, job_id, chapter, lease, now)
        if token is not None:
            enqueue(STITCH_CHAPTER, [str(job_id), chapter, token])
            report.chapters_reissued += 1
        elif used >= rt.settings.tasks.max_chunk_attempts:
            position = row.position if row is not None else chapter
            error = (
                f"chapter {position} could not be stitched in {used} attempts "
                "(its worker was lost or timed out each time)"
            )
            if actions.fail(rt, job_id, error, enqueue):
                report.failed_jobs.append(str(job_id))


def _expire(rt: Runtime, now: datetime, report: SweepReport) -> None:
    """Books, files and chunk audio that are due go (worker.jobs.expire)."""
    expired = expire(rt, now)
    report.outputs_expired = expired.outputs
    report.chunk_folders_removed = expired.chunk_folders


def _sweep_voices(rt: Runtime, enqueue: Enqueue, now: datetime, report: SweepReport) -> None:
    """Prompts of an older engine become stale; builds whose worker died, and builds whose message was
    lost, wait again; a stale voice that an unfinished job's chunks use waits for a rebuild; then the
    waiting builds with room are sent (worker.voices.builds)."""
    engine = rt.engine()
    # A job needs the voices its chunks use (its script's voice directives), not just its own voice.
    needed = (
        select(Chunk.voice_id)
        .join(Job, Job.id == Chunk.job_id)
        .where(Job.status.in_([s.value for s in ACTIVE]))
        .distinct()
    )
    with unit_of_work(rt.sessions) as session:
        report.voices_marked_stale = voices.mark_outdated_stale(session, engine.name, engine.version)
        voices.expire_build_leases(session, now)
        voices.wake_needed_stale(session, needed)
    report.voices_resent = send_builds(rt, enqueue)


def _resend_webhooks(rt: Runtime, enqueue: Enqueue, now: datetime) -> int:
    attempts = rt.settings.webhooks.max_attempts
    with rt.sessions() as session:
        due = list(
            session.scalars(
                select(Job.id)
                .where(
                    or_(
                        due_filter(now, attempts),
                        flags_due_filter(now, attempts),
                        delivery_event_due_filter(now, attempts),
                    )
                )
                .limit(500)
            )
        )
        chapters = session.execute(
            select(JobChapter.job_id, JobChapter.chapter).where(chapter_due_filter(now, attempts)).limit(500)
        ).all()
        uploads = list(
            session.scalars(
                select(Job.id)
                .where(audiobookshelf_due(now, rt.settings.audiobookshelf.max_attempts))
                .limit(500)
            )
        )
    for job_id in due:
        enqueue(DELIVER_WEBHOOK, [str(job_id)])
    for row in chapters:
        enqueue(DELIVER_CHAPTER_WEBHOOK, [str(row.job_id), row.chapter])
    for job_id in uploads:
        enqueue(DELIVER_AUDIOBOOKSHELF, [str(job_id)])
    return len(due) + len(chapters) + len(uploads)


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


def remove_stored_orphans(rt: Runtime, now: datetime, grace: timedelta = ORPHAN_GRACE) -> int:
    """In a bucket (the local data directory has :func:`remove_stale_temp_files`): objects older than
    ``grace`` under ``jobs/<id>`` or ``voices/<id>`` whose job no longer exists or whose voice was
    deleted (debris of a process killed between its upload and its commit, or of a delete that could
    not reach the bucket), and multipart uploads begun before then and never completed."""
    storage = rt.storage
    if storage.kind == "local":
        return 0
    cutoff = now - grace
    removed = storage.abort_stale_uploads(cutoff)
    for root, live in (("jobs", _live_jobs), ("voices", _live_voices)):
        old: dict[uuid.UUID, list[str]] = defaultdict(list)
        for stored in storage.list_objects(root):
            owner_id = _tome_id(stored.key)
            if owner_id is not None and stored.modified < cutoff:
                old[owner_id].append(stored.key)
        ids = list(old)
        alive: set[uuid.UUID] = set()
        for start in range(0, len(ids), _ID_BATCH):
            alive |= live(rt, ids[start : start + _ID_BATCH])
        for owner_id, keys in old.items():
            if owner_id in alive:
                continue
            for key in keys:
                storage.remove(rt.layout.root / key)
                removed += 1
    return removed


def _tome_id(key: str) -> uuid.UUID | None:
    """The job's or voice's id of a key Tome wrote (``jobs/<id>/...``, ``voices/<id>/...``, the id as
    Tome writes it); None for any other object (a folder marker, another program's file): never removed."""
    parts = key.split("/")
    if len(parts) < 3 or not parts[2]:
        return None
    try:
        found = uuid.UUID(parts[1])
    except ValueError:
        return None
    return found if str(found) == parts[1] else None


def _live_jobs(rt: Runtime, ids: list[uuid.UUID]) -> set[uuid.UUID]:
    with rt.sessions() as session:
        return set(session.scalars(select(Job.id).where(Job.id.in_(ids))))


def _live_voices(rt: Runtime, ids: list[uuid.UUID]) -> set[uuid.UUID]:
    with rt.sessions() as session:
        return set(session.scalars(select(Voice.id).where(Voice.id.in_(ids), Voice.deleted_at.is_(None))))

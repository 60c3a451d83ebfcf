"""How /v1/jobs shows a job: its JSON view (progress, chapters, output, QA, webhook and delivery), and
the caller's own job looked up by id, with the checks a download makes."""

from __future__ import annotations

import re
import uuid
from typing import Any

from flask import url_for
from sqlalchemy import select

from models import ACTIVE, ChapterStatus, Job, JobChapter, JobStatus, utcnow
from webapi.auth import current_principal
from webapi.errors import Conflict, Gone, NotFound
from webapi.extensions import tome
from webapi.schemas import (
    BuildWaitOut,
    ChapterOut,
    DeliveryOut,
    ErrorDetail,
    FileOut,
    JobOut,
    OutputOut,
    Progress,
    QaSummary,
    RerenderOut,
    WebhookOut,
)
from webapi.usage import build_wait
from webapi.validation import parse_id
from worker.audio import FORMATS
from worker.webhooks import delivery_out


def _eta(job: Job) -> float | None:
    if job.status != JobStatus.RUNNING or not job.started_at or job.chunks_done == 0:
        return None
    elapsed = (utcnow() - job.started_at).total_seconds()
    return round(elapsed / job.chunks_done * (job.chunks_total - job.chunks_done), 1)


def chapter_rows(job: Job) -> list[JobChapter]:
    """The job's chapters stitched one by one, in book order (none for a single-chapter book)."""
    query = select(JobChapter).where(JobChapter.job_id == job.id).order_by(JobChapter.position)
    return list(tome().sessions.scalars(query))


def early_files(job: Job, rows: list[JobChapter]) -> list[dict[str, object]]:
    """The files of the chapters ready so far, downloadable while the job renders or stitches."""
    if job.status not in (JobStatus.RUNNING, JobStatus.STITCHING):
        return []
    return [
        dict(f)
        for row in rows
        if row.status == ChapterStatus.READY and row.build
        for f in row.build.get("files", [])
        if tome().storage.exists(str(f.get("path")))  # a finished book's chapters may be gone (no split)
    ]


def file_out(job: Job, entry: dict[str, Any]) -> FileOut:
    """One listed file (a chapter file, the ZIP, subtitles ...) with its download path."""
    return FileOut(
        name=str(entry["name"]),
        kind=entry["kind"],
        format=str(entry["format"]),
        chapter=entry.get("chapter"),
        part=entry.get("part"),
        title=entry.get("title"),
        duration=entry.get("duration"),
        bytes=int(entry["bytes"]),
        url=url_for("job_files.get_file", job_id=str(job.id), name=str(entry["name"])),
    )


def _rerender_out(job: Job) -> RerenderOut | None:
    last = job.rerender if isinstance(job.rerender, dict) else None
    if last is None or not isinstance(last.get("seq"), int):
        return None
    error = last.get("error")
    if error:
        state = "cancelled" if last.get("outcome") == "cancelled" else "refused"
    elif job.status == JobStatus.SUCCEEDED:
        state = "published"
    else:  # rendering, or the job failed or was cancelled with it (the job's status says which)
        state = "rendering" if job.status in ACTIVE else str(job.status)
    return RerenderOut(
        seq=last["seq"],
        revision=job.revision,  # the last re-render is what counted the job's revision
        state=state,
        error=str(error) if error else None,
    )


def _chapters_out(job: Job, rows: list[JobChapter] | None) -> list[ChapterOut]:
    """The job's chapters; with ``rows`` (one job's view), each one's state and, while downloadable,
    its files: the early ones while the job renders, a split job's chapter files once it is done."""
    by_index = {row.chapter: row for row in rows or []}
    if job.status == JobStatus.SUCCEEDED and job.expired_at is None:
        listed = [f for f in job.files or [] if f.get("kind") == "chapter"]
    else:
        listed = early_files(job, rows or [])
    out = []
    for entry in job.chapters:
        chapter = ChapterOut.model_validate(entry)
        row = by_index.get(chapter.index)
        if row is not None:
            files = [file_out(job, f) for f in listed if f.get("chapter") == chapter.index]
            chapter.state = ChapterStatus(row.status).value
            chapter.duration = None if row.duration is None else round(row.duration, 3)
            chapter.files = files or None
            chapter.url = files[0].url if files else None
        out.append(chapter)
    return out


def job_out(job: Job, chapters: list[JobChapter] | None = None) -> JobOut:
    # a book is there once the job has succeeded, and stays while a chunk of it is rendered again
    done = job.output_path is not None and job.expired_at is None
    stored = job.options.get("delivery") if isinstance(job.options, dict) else None
    delivery: dict[str, object] = stored if isinstance(stored, dict) else {}
    return JobOut(
        id=job.id,
        title=job.title,
        status=JobStatus(job.status).value,
        voice_id=job.voice_id,
        voice_ids=_job_voice_ids(job),
        script_format=job.script_format,
        engine=job.engine,
        estimated_seconds=job.estimated_seconds,
        warnings=[str(w) for w in job.options.get("warnings", [])] if isinstance(job.options, dict) else [],
        progress=Progress(
            chunks_done=job.chunks_done,
            chunks_total=job.chunks_total,
            chunks_reused=job.chunks_reused or 0,
            percent=round(100.0 * job.chunks_done / job.chunks_total, 1) if job.chunks_total else 0.0,
            eta_seconds=_eta(job),
        ),
        error=job.error,
        waiting=_waiting(job),
        error_detail=ErrorDetail.model_validate(job.options["error_detail"])
        if isinstance(job.options, dict) and "error_detail" in job.options
        else None,
        output=OutputOut(
            format=job.output_format,
            duration=job.output_duration,
            bytes=job.output_bytes,
            url=url_for("jobs.job_audio", job_id=str(job.id)) if done else None,
            preset=str(delivery.get("preset", "none")),
            split=str(delivery.get("split", "none")),
            files_url=url_for("job_files.list_files", job_id=str(job.id)) if done else None,
            report_url=url_for("job_files.get_file", job_id=str(job.id), name="acx-report.json")
            if done and any(f.get("kind") == "report" for f in job.files or [])
            else None,
        ),
        revision=job.revision or 0,
        rerender=_rerender_out(job),
        chapters=_chapters_out(job, chapters),
        qa=QaSummary(
            chunks_flagged=job.chunks_flagged or 0,
            chunks_rerendered=job.chunks_rerendered or 0,
            url=url_for("job_qa.job_qa", job_id=str(job.id)),
        ),
        webhook=WebhookOut(
            url=job.webhook_url,
            delivered_at=job.webhook_delivered_at,
            attempts=job.webhook_attempts,
            error=job.webhook_error,
        )
        if job.webhook_url
        else None,
        delivery=DeliveryOut.model_validate(found) if (found := delivery_out(job)) else None,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        expires_at=job.expires_at,
        expired_at=job.expired_at,
    )


def _waiting(job: Job) -> BuildWaitOut | None:
    """Why an unfinished job does not move, where its owner's build quota holds a voice build back."""
    if job.status not in (JobStatus.QUEUED, JobStatus.RUNNING):
        return None
    return build_wait(job.owner, _job_voice_ids(job))


def _job_voice_ids(job: Job) -> list[uuid.UUID]:
    """The voices a job's chunks use, as recorded when it was created. Jobs from before voice directives
    have no record and only ever used their own voice."""
    recorded = job.options.get("voice_ids") if isinstance(job.options, dict) else None
    if not recorded:
        return [job.voice_id]
    return [uuid.UUID(str(voice_id)) for voice_id in recorded]


def owned_job(job_id: str) -> Job:
    jid = parse_id(job_id, "job")
    job = (
        tome()
        .sessions.scalars(select(Job).where(Job.id == jid, Job.owner == current_principal().owner))
        .first()
    )
    if job is None:
        raise NotFound(f"job {job_id} not found")
    return job


def finished_job(job_id: str, what: str) -> Job:
    """The caller's job, once it has succeeded and while its ``what`` (audio, files) has not expired:
    410 after expiry, 409 before success."""
    return require_finished(owned_job(job_id), what)


def require_finished(job: Job, what: str) -> Job:
    """``job`` itself if its ``what`` can be downloaded; else 410 after expiry, 409 before success."""
    if job.expired_at is not None:
        raise Gone(f"the {what} of this job expired at {job.expired_at:%Y-%m-%dT%H:%M:%SZ}", code="expired")
    if not job.output_path:  # a re-rendered job keeps serving its previous book until the new one is out
        raise Conflict(f"job is {job.status}; its {what} can be had once it has succeeded", code="not_ready")
    return job


def job_audio_name(job: Job) -> str:
    """The book's file name for a download: its title made safe, and the format's extension."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", job.title).strip("-") or "tome"
    kind = FORMATS.get(job.output_format)  # type: ignore[call-overload]
    return f"{slug}{kind.extension}" if kind else f"{slug}.{job.output_format}"

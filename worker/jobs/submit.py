"""Submitting a book (``POST /v1/jobs``): the job's row built from the checked request, its cover and the
EPUB a read-along needs stored in its folder, and the row inserted with its chunks (a script planned on
the request path) or with its script left for a worker to plan (worker.jobs.intake), once per
Idempotency-Key. The API checks the request and answers; :func:`submit` is the one entry."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models import Job
from worker.audio import Cover
from worker.jobs import job_plans, readalong, state
from worker.jobs.plan import ScriptPlan
from worker.storage.atomic import atomic_file
from worker.storage.backend import Storage
from worker.storage.layout import Layout


@dataclass(frozen=True)
class Submission(state.BookRow):
    """A checked request for a book: its row's fields (``options``: delivery, QA, pauses, metadata and
    the rest, as the job stores them), and what is stored or sent beside the row."""

    to_audiobookshelf: bool = False
    cover: Cover | None = None
    readalong: bool = False


@dataclass(frozen=True)
class Script:
    """What the job renders: ``plan``, planned on the request path; else ``source`` for a worker to plan,
    text (``estimated_seconds``: a rough figure before parsing) or an EPUB's bytes (``title_from_script``:
    the job takes the book's own title once planned)."""

    source: str | bytes
    plan: ScriptPlan | None = None
    estimated_seconds: float | None = None
    title_from_script: bool = False


@dataclass(frozen=True)
class Files:
    """Where a job's files go."""

    storage: Storage
    layout: Layout


def submit(
    files: Files, session: Session, submission: Submission, script: Script, replay: Callable[[], Job | None]
) -> tuple[Job, bool]:
    """The submitted job, and True when this call inserted it; False with the earlier job when a
    concurrent request with the same Idempotency-Key won the insert (``replay`` finds it; None: it raises
    the insert's error). The caller sends the job's start, or its plan, once it is inserted."""
    job = _new_job(files, submission)
    if submission.readalong:
        _keep_for_readalong(files, job, script.source)
    if script.plan is not None:
        job_plans.apply_plan(job, script.plan)
    else:
        _await_planning(job, submission, script)
    earlier = _insert(files, session, job, script.plan, replay)
    return (job, True) if earlier is None else (earlier, False)


def _new_job(files: Files, submission: Submission) -> Job:
    job_id = uuid.uuid4()
    options = dict(submission.options)
    if submission.cover is not None:
        options["cover"] = _store_cover(files, job_id, submission.cover)
    return state.book_job(
        submission,
        job_id=job_id,
        options=options,
        abs_state="pending" if submission.to_audiobookshelf else None,
        files_bytes=len(submission.cover.data) if submission.cover is not None else None,  # counts now
    )


def _await_planning(job: Job, submission: Submission, script: Script) -> None:
    voice_ids = {"voice_ids": [str(submission.voice_id)]}
    if isinstance(script.source, bytes):
        named = {"title_from_script": True} if script.title_from_script else {}
        options = {**job.options, **voice_ids, **named}
        state.await_planning(
            job, script="", script_file=script.source, estimated_seconds=None, options=options
        )
    else:
        estimate = None if script.estimated_seconds is None else round(script.estimated_seconds, 1)
        options = {**job.options, **voice_ids}
        state.await_planning(
            job, script=script.source, script_file=None, estimated_seconds=estimate, options=options
        )


def _store_cover(files: Files, job_id: uuid.UUID, cover: Cover) -> str:
    """The job's cover in its folder (checked already), under a name made of its digest."""
    digest = hashlib.sha256(cover.data).hexdigest()[:16]
    ext = "jpg" if cover.mime_type == "image/jpeg" else "png"
    path = files.layout.job_dir(job_id) / f"cover-{digest}.{ext}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        f.write(cover.data)
    files.storage.publish(path)
    return str(path)


def _keep_for_readalong(files: Files, job: Job, source: str | bytes) -> None:
    """A job that asks for a read-along records it; with an EPUB script, the book is kept in the job's
    folder (its pages are the read-along's text, built at the stitch)."""
    stored: str | None = None
    if isinstance(source, bytes):
        digest = hashlib.sha256(source).hexdigest()[:16]
        path = files.layout.job_dir(job.id) / f"script-{digest}.epub"
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(path) as tmp, open(tmp, "wb") as f:
            f.write(source)
        files.storage.publish(path)
        stored = str(path)
        state.note_stored_file(job, len(source))
    state.set_options(job, {**job.options, "readalong": readalong.stored_options(True, stored)})


def _discard_files(files: Files, job: Job) -> None:
    """A job that was not inserted (an idempotent replay won) leaves no cover (or kept EPUB) behind."""
    if job.options.get("cover") or readalong.source_path(job.options):
        files.storage.remove_folder(files.layout.job_dir(job.id))


def _insert(
    files: Files,
    session: Session,
    job: Job,
    script_plan: ScriptPlan | None,
    replay: Callable[[], Job | None],
) -> Job | None:
    """Insert the job and its chunks in one transaction. None when inserted; the earlier job when a
    concurrent request with the same Idempotency-Key won the insert."""
    try:
        if script_plan is None:
            state.add_job(session, job)
        else:
            state.insert_job(session, job, script_plan.specs, script_plan.chunk_voices)
        session.commit()
    except IntegrityError:
        session.rollback()
        _discard_files(files, job)  # this job was not inserted: its cover goes, whatever happens next
        earlier = replay()
        if earlier is None:
            raise
        return earlier
    return None

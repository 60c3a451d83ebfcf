"""/v1/jobs: submit a script, poll it, download the audio, cancel it. The checks of a submitted job are
in :mod:`webapi.job_requests`, its JSON view in :mod:`webapi.job_views`; the submission itself is the
submit use case (worker.jobs.submit)."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify
from sqlalchemy import select

from models import ACTIVE, Job, JobKind, Voice
from webapi import job_requests, scripts
from webapi.auth import current_principal, require_key
from webapi.errors import Conflict
from webapi.extensions import tome
from webapi.job_requests import check_tags, required_title
from webapi.job_views import chapter_rows, finished_job, job_audio_name, job_out, owned_job
from webapi.operations import Operation, operation
from webapi.schemas import JobCreate, JobForm, JobList, JobListQuery, JobOut
from webapi.stored_files import send_stored
from webapi.usage import require_room_for_job
from webapi.validation import query
from worker.audio import FORMATS
from worker.jobs import cancel, submit
from worker.logs import log_context
from worker.task_names import PLAN_JOB, START_JOB

log = logging.getLogger(__name__)
bp = Blueprint("jobs", __name__, url_prefix="/v1/jobs")
bp.before_request(require_key)


@bp.post("")
@operation(
    Operation(
        "Submit a script to render: JSON, or multipart/form-data with the script as the file `script` (an "
        "EPUB, or UTF-8 text) and the other fields as JSON in `job`. With an Idempotency-Key header, a "
        "retried request returns the same job.",
        {202: JobOut, 409: None, 413: None},
        body=JobCreate,
        form=JobForm,
        files=("script", "cover"),
        tags=("jobs",),
    )
)
def create_job() -> tuple[Response, int]:
    scripts.require_multipart_or_json()
    owner = current_principal().owner
    idempotency_key = job_requests.idempotency_key()
    submitted = scripts.read_job_request()
    body, request_sha = submitted.body, submitted.sha256
    if idempotency_key and (earlier := job_requests.idempotent_replay(owner, idempotency_key, request_sha)):
        return _accepted(earlier)
    job_requests.check_webhook(body.webhook_url)
    job_requests.check_deliver(owner, body.deliver)
    job_requests.check_script_size(submitted)
    voice = scripts.resolve_voice(owner, body.voice)
    title = scripts.script_title(submitted)
    if isinstance(submitted.source, bytes):
        return _accept_epub(submitted, title, voice, idempotency_key)
    if not scripts.plans_inline(submitted) or (body.cast is not None and body.cast.llm):
        check_tags(body, required_title(title))
        return _accept_for_planning(submitted, required_title(title), voice, idempotency_key)
    script_plan = scripts.plan_or_422(owner, submitted, voice)
    title = required_title(title or script_plan.info.title)
    check_tags(body, title)
    require_room_for_job(script_plan.size.total_seconds, tome().engine().sample_rate)
    job, inserted = _submit(
        submitted, title, voice, idempotency_key, submit.Script(submitted.source, script_plan)
    )
    if not inserted:
        return _accepted(job)
    tome().enqueue(START_JOB, [str(job.id)])
    with log_context(job_id=job.id, voice_id=voice.id):
        log.info(
            "job %s: accepted, %d chunks in %d chapters",
            job.id,
            len(script_plan.specs),
            len(script_plan.chapters),
        )
    return _accepted(job)


def _accept_for_planning(
    submitted: scripts.JobRequest, title: str, voice: Voice, idempotency_key: str | None
) -> tuple[Response, int]:
    """A long text script is planned by a worker (worker.jobs.intake): the request stays short whatever
    the script costs to parse, and a script error fails the job with the same code, line and column."""
    script = str(submitted.source)
    rough = len(script) / tome().settings.limits.speech_chars_per_second  # speech only, before parsing
    require_room_for_job(rough, tome().engine().sample_rate)
    job, inserted = _submit(
        submitted, title, voice, idempotency_key, submit.Script(script, estimated_seconds=rough)
    )
    return _to_plan(job, inserted, voice, f"{len(script)} characters")


def _accept_epub(
    submitted: scripts.JobRequest, title: str | None, voice: Voice, idempotency_key: str | None
) -> tuple[Response, int]:
    """An EPUB is planned by a worker (worker.jobs.intake): its text is known only once it is unpacked,
    and unpacking and parsing cost what the book costs. Without a title in the request the job takes the
    book's own once planned, and fails naming ``title`` if the book has none, as the inline path did."""
    data = submitted.source
    assert isinstance(data, bytes)
    named = required_title(title) if title else None
    check_tags(submitted.body, named or "untitled")
    require_room_for_job(0.0, tome().engine().sample_rate)  # its length is checked once unpacked
    script = submit.Script(data, title_from_script=not named)
    job, inserted = _submit(submitted, named or "(untitled EPUB)", voice, idempotency_key, script)
    return _to_plan(job, inserted, voice, f"an EPUB of {len(data)} bytes")


def _to_plan(job: Job, inserted: bool, voice: Voice, what: str) -> tuple[Response, int]:
    """202 for a job a worker plans, its plan sent once this request inserted it (a replay answers the
    earlier job as it stands)."""
    if inserted:
        tome().enqueue(PLAN_JOB, [str(job.id)])
        with log_context(job_id=job.id, voice_id=voice.id):
            log.info("job %s: accepted, %s to plan", job.id, what)
    return _accepted(job)


def _submit(
    submitted: scripts.JobRequest,
    title: str,
    voice: Voice,
    idempotency_key: str | None,
    script: submit.Script,
) -> tuple[Job, bool]:
    """The job submitted (True), or the earlier one of the same Idempotency-Key (False)."""
    book = job_requests.submission(
        submitted.body, title, voice, idempotency_key, submitted.sha256, submitted.cover
    )

    def replay() -> Job | None:
        if not idempotency_key:
            return None
        return job_requests.idempotent_replay(book.owner, idempotency_key, submitted.sha256)

    files = submit.Files(tome().storage, tome().settings.layout)
    return submit.submit(files, tome().sessions(), book, script, replay)


def _accepted(job: Job) -> tuple[Response, int]:
    response = jsonify(job_out(job).model_dump(mode="json"))
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    return response, 202


@bp.get("")
@operation(Operation("List your jobs, newest first", {200: JobList}, query=JobListQuery, tags=("jobs",)))
def list_jobs() -> Response:
    q = query(JobListQuery)
    # speech requests (POST /v1/audio/speech) are jobs too, for quotas; they are not listed among books
    stmt = select(Job).where(Job.owner == current_principal().owner, Job.kind == JobKind.BOOK.value)
    if q.status:
        stmt = stmt.where(Job.status == q.status)
    jobs = tome().sessions.scalars(
        stmt.order_by(Job.created_at.desc(), Job.id).limit(q.limit).offset(q.offset)
    )
    return jsonify(JobList(jobs=[job_out(j) for j in jobs]).model_dump(mode="json"))


@bp.get("/<job_id>")
@operation(Operation("Status, progress, chapters and output of a job", {200: JobOut}, tags=("jobs",)))
def get_job(job_id: str) -> Response:
    job = owned_job(job_id)
    return jsonify(job_out(job, chapter_rows(job)).model_dump(mode="json"))


@bp.get("/<job_id>/audio")
@operation(
    Operation(
        "Download the finished audio (Range requests supported)",
        {200: None, 206: None, 409: None, 416: None},
        tags=("jobs",),
        binary="application/octet-stream",
    )
)
def job_audio(job_id: str) -> Response:
    job = finished_job(job_id, "audio")
    kind = FORMATS.get(job.output_format)  # type: ignore[call-overload]
    return send_stored(
        str(job.output_path),
        kind.mime_type if kind else "application/octet-stream",
        job_audio_name(job),
        "the audio of this job was removed",
    )


@bp.post("/<job_id>/cancel")
@operation(Operation("Cancel a job that has not finished", {200: JobOut, 409: None}, tags=("jobs",)))
def cancel_job(job_id: str) -> Response:
    state = tome()
    job = owned_job(job_id)
    published = job.output_path is not None  # what is cancelled is its re-render, never the book
    cancelled = cancel.cancel(state.runtime, state.sessions(), job, state.enqueue)
    if published:
        return _rerender_cancelled(job, cancelled)
    if not cancelled:
        raise Conflict(f"job is already {job.status}", code="not_cancellable")
    state.sessions.refresh(job)
    log.info("job %s: cancelled by its owner", job.id)
    return jsonify(job_out(job).model_dump(mode="json"))


def _rerender_cancelled(job: Job, cancelled: bool) -> Response:
    """A finished book's re-render cancelled, rendering or stitching: its chunk keeps the previous take and
    the book is published again from it. A second cancel of the same re-render (concurrent, or after)
    answers the same; a book with no re-render to cancel is 409."""
    state = tome()
    state.sessions.expire_all()
    fresh = state.sessions.get(Job, job.id) or job
    last = fresh.rerender if isinstance(fresh.rerender, dict) else {}
    if not cancelled and not (fresh.status in ACTIVE and last.get("outcome") == "cancelled"):
        raise Conflict(
            f"job is {fresh.status} and renders no chunk again: there is nothing to cancel",
            code="not_cancellable",
        )
    if cancelled:
        log.info("job %s: its re-render cancelled by its owner", job.id)
    return jsonify(job_out(fresh).model_dump(mode="json"))

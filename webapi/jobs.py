"""/v1/jobs: submit a script, poll it, download the audio, cancel it."""

from __future__ import annotations

import hashlib
import logging
import math
import re
import uuid
from typing import Any

from flask import Blueprint, Response, jsonify, request, url_for
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from models import ACTIVE, ChapterStatus, Integration, Job, JobChapter, JobKind, JobStatus, Voice, utcnow
from webapi import scripts
from webapi.auth import current_principal, require_key
from webapi.controls import control_character, describe
from webapi.errors import Conflict, Gone, Invalid, NotFound
from webapi.extensions import tome
from webapi.operations import Operation, operation
from webapi.schemas import (
    ChapterOut,
    DeliverIn,
    DeliveryOut,
    ErrorDetail,
    FileOut,
    JobCreate,
    JobForm,
    JobList,
    JobListQuery,
    JobOut,
    OutputOut,
    Progress,
    QaSummary,
    RerenderOut,
    WebhookOut,
)
from webapi.stored_files import send_stored
from webapi.usage import require_room_for_job
from webapi.validation import parse_id, query
from worker.audio import FORMATS, BookTags, Cover
from worker.audio.presets import Delivery, DeliveryError, resolve
from worker.jobs import intake, library, readalong, rerender
from worker.jobs import state as jobs
from worker.jobs.plan import ScriptPlan
from worker.logs import log_context
from worker.qa.checks import QaPolicy
from worker.storage.atomic import atomic_file
from worker.task_names import DELIVER_WEBHOOK, PLAN_JOB, START_JOB
from worker.webhooks import WebhookRefused, check_url, delivery_out

log = logging.getLogger(__name__)
bp = Blueprint("jobs", __name__, url_prefix="/v1/jobs")
bp.before_request(require_key)

PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\r?\n(?=[ \t]*\S)")


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


def _idempotent_replay(owner: str, key: str, request_sha: str) -> Job | None:
    """The job an earlier request with this Idempotency-Key made; 409 if that request was different."""
    job = tome().sessions.scalars(select(Job).where(Job.owner == owner, Job.idempotency_key == key)).first()
    if job is not None and job.request_sha256 != request_sha:
        raise Conflict(
            "this Idempotency-Key was used with a different request body",
            code="idempotency_conflict",
            field="Idempotency-Key",
        )
    return job


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
    idempotency_key = _idempotency_key()
    submitted = scripts.read_job_request()
    body, request_sha = submitted.body, submitted.sha256
    if idempotency_key and (earlier := _idempotent_replay(owner, idempotency_key, request_sha)):
        return _accepted(earlier)
    _check_webhook(body.webhook_url)
    _check_deliver(owner, body.deliver)
    _check_script_size(submitted)
    voice = scripts.resolve_voice(owner, body.voice)
    title = scripts.script_title(submitted)
    if isinstance(submitted.source, bytes):
        return _accept_epub(submitted, title, voice, idempotency_key)
    if not scripts.plans_inline(submitted) or (body.cast is not None and body.cast.llm):
        _check_tags(body, _required_title(title))
        return _accept_for_planning(submitted, _required_title(title), voice, idempotency_key)
    script_plan = scripts.plan_or_422(owner, submitted, voice)
    title = _required_title(title or script_plan.info.title)
    _check_tags(body, title)
    require_room_for_job(script_plan.size.total_seconds, tome().engine().sample_rate)
    job = _new_job(body, title, voice, idempotency_key, request_sha, submitted.cover)
    _keep_for_readalong(job, body, submitted.source)
    intake.apply_plan(job, script_plan)
    earlier = _insert(job, script_plan, owner, idempotency_key, request_sha)
    if earlier is not None:
        return _accepted(earlier)
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
    body = submitted.body
    script = str(submitted.source)
    rough = len(script) / tome().settings.limits.speech_chars_per_second  # speech only, before parsing
    require_room_for_job(rough, tome().engine().sample_rate)
    job = _new_job(body, title, voice, idempotency_key, submitted.sha256, submitted.cover)
    _keep_for_readalong(job, body, script)
    job.script = script
    job.estimated_seconds = round(rough, 1)
    job.options = {**job.options, "voice_ids": [str(voice.id)]}
    earlier = _insert(job, None, job.owner, idempotency_key, submitted.sha256)
    if earlier is not None:
        return _accepted(earlier)
    tome().enqueue(PLAN_JOB, [str(job.id)])
    with log_context(job_id=job.id, voice_id=voice.id):
        log.info("job %s: accepted, %d characters to plan", job.id, len(script))
    return _accepted(job)


def _accept_epub(
    submitted: scripts.JobRequest, title: str | None, voice: Voice, idempotency_key: str | None
) -> tuple[Response, int]:
    """An EPUB is planned by a worker (worker.jobs.intake): its text is known only once it is unpacked,
    and unpacking and parsing cost what the book costs. Without a title in the request the job takes the
    book's own once planned, and fails naming ``title`` if the book has none, as the inline path did."""
    body, data = submitted.body, submitted.source
    assert isinstance(data, bytes)
    named = _required_title(title) if title else None
    _check_tags(body, named or "untitled")
    require_room_for_job(0.0, tome().engine().sample_rate)  # its length is checked once unpacked
    job = _new_job(
        body, named or "(untitled EPUB)", voice, idempotency_key, submitted.sha256, submitted.cover
    )
    _keep_for_readalong(job, body, data)
    job.script = ""  # waiting to be planned; the bytes are script_file
    job.script_file = data
    job.options = {
        **job.options,
        "voice_ids": [str(voice.id)],
        **({} if named else {"title_from_script": True}),
    }
    earlier = _insert(job, None, job.owner, idempotency_key, submitted.sha256)
    if earlier is not None:
        return _accepted(earlier)
    tome().enqueue(PLAN_JOB, [str(job.id)])
    with log_context(job_id=job.id, voice_id=voice.id):
        log.info("job %s: accepted, an EPUB of %d bytes to plan", job.id, len(data))
    return _accepted(job)


def _required_title(title: str | None) -> str:
    if not title:
        raise Invalid("give the job a title: the script names none", code="validation_error", field="title")
    return " ".join(title.split())[:200]


def _accepted(job: Job) -> tuple[Response, int]:
    response = jsonify(job_out(job).model_dump(mode="json"))
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    return response, 202


def _idempotency_key() -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is not None and not 1 <= len(key) <= 200:
        raise Invalid("Idempotency-Key must be 1 to 200 characters", field="Idempotency-Key")
    if key is not None and (found := control_character(key)) is not None:
        raise Invalid(
            f"Idempotency-Key contains the control character {describe(found[1])}",
            code="validation_error",
            field="Idempotency-Key",
        )
    return key


def _check_webhook(url: str | None) -> None:
    if url is None:
        return
    try:
        settings = tome().settings
        check_url(url, settings.webhooks.allow_private, allowed_ports=settings.webhooks.port_set)
    except WebhookRefused as exc:
        raise Invalid(str(exc), code="webhook_refused", field="webhook_url") from exc


def _check_deliver(owner: str, deliver: DeliverIn | None) -> None:
    """A delivery into Audiobookshelf needs the server's secret key and the owner's server, now."""
    if deliver is None or deliver.audiobookshelf is None:
        return
    if not tome().settings.security.secret_key:
        raise Conflict(
            "delivery into Audiobookshelf needs TOME_SECRET_KEY set on the server",
            code="secret_key_missing",
            field="deliver.audiobookshelf",
        )
    if tome().sessions.get(Integration, (owner, "audiobookshelf")) is None:
        raise Conflict(
            "no Audiobookshelf server is set: PUT /v1/integrations/audiobookshelf first",
            code="integration_missing",
            field="deliver.audiobookshelf",
        )


def _check_tags(body: JobCreate, title: str) -> None:
    """The tags the output will carry, checked as the stitcher will build them (language form, lengths)."""
    try:
        BookTags(title=title, **library.tag_values(body.metadata.model_dump()))
    except ValueError as exc:
        raise Invalid(str(exc), code="validation_error", field="metadata") from exc


def _check_script_size(submitted: scripts.JobRequest) -> None:
    """Refuse an over-long text script before the costly parse: by characters, and by paragraphs (every
    paragraph is at least one chunk). An EPUB is bounded by its reader."""
    script = submitted.source
    if not isinstance(script, str):
        return
    settings = tome().settings
    if len(script) > settings.limits.max_script_chars:
        raise Invalid(
            f"script has {len(script)} characters; the limit is {settings.limits.max_script_chars}",
            code="script_too_long",
            field="script",
        )
    paragraphs = len(PARAGRAPH_BREAK.findall(script)) + 1
    if paragraphs > settings.limits.max_chunks_per_job:
        raise Invalid(
            f"script has at least {paragraphs} paragraphs; "
            f"the limit is {settings.limits.max_chunks_per_job} chunks",
            code="script_too_long",
            field="script",
        )


def _delivery(body: JobCreate) -> Delivery:
    """The job's files as asked (format, preset, split, loudness), or a 422 naming the contradiction."""
    out = body.output
    try:
        return resolve(
            fmt=out.format,
            bitrate_kbps=out.bitrate_kbps,
            preset=out.preset,
            split=out.split,
            max_part_minutes=out.max_part_minutes,
            loudness=None if out.loudness is None else (out.loudness.target_lufs, out.loudness.true_peak_db),
            given=frozenset(out.model_fields_set),
        )
    except DeliveryError as exc:
        raise Invalid(str(exc), code="validation_error", field=exc.field) from exc


# Thresholds on a similarity in [0, 1]: above 1 no chunk could pass (every one re-rendered, then flagged).
_UNIT_THRESHOLDS = frozenset({"min_speaker_similarity"})


def _qa_options(body: JobCreate) -> dict[str, object]:
    """The job's QA policy as stored; thresholds must be known names and finite numbers (422 naming
    ``qa.thresholds`` otherwise)."""
    qa = body.qa.model_dump(exclude_none=True)
    thresholds = body.qa.thresholds or {}
    bad = sorted(name for name, value in thresholds.items() if not math.isfinite(value) or abs(value) > 1e6)
    if bad:
        raise Invalid(
            f"QA thresholds must be finite numbers within 1e6 of 0: {', '.join(bad)[:200]}",
            field="qa.thresholds",
        )
    defaults = QaPolicy()
    for name, value in thresholds.items():
        kind = type(getattr(defaults, name, None))
        if kind not in (int, float):
            known = ", ".join(n for n in defaults.to_json() if type(getattr(defaults, n)) in (int, float))
            raise Invalid(f"unknown QA threshold {name[:60]!r}; known: {known}", field="qa.thresholds")
        if kind is int and (value != int(value) or value < 0):
            raise Invalid(f"QA threshold {name} must be a whole number >= 0", field="qa.thresholds")
        if name in _UNIT_THRESHOLDS and not 0 <= value <= 1:
            raise Invalid(
                f"QA threshold {name} is a cosine similarity: between 0 (off) and 1", field="qa.thresholds"
            )
    if thresholds:
        qa["thresholds"] = {
            name: int(value) if isinstance(getattr(defaults, name), int) else float(value)
            for name, value in thresholds.items()
        }
    return qa


def _store_cover(job_id: uuid.UUID, cover: Cover) -> str:
    """The job's cover in its folder (checked already), under a name made of its digest."""
    digest = hashlib.sha256(cover.data).hexdigest()[:16]
    ext = "jpg" if cover.mime_type == "image/jpeg" else "png"
    path = tome().settings.layout.job_dir(job_id) / f"cover-{digest}.{ext}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        f.write(cover.data)
    tome().storage.publish(path)
    return str(path)


def _keep_for_readalong(job: Job, body: JobCreate, source: str | bytes) -> None:
    """A job that asks for a read-along records it; with an EPUB script, the book is kept in the job's
    folder (its pages are the read-along's text, built at the stitch)."""
    if not body.output.readalong:
        return
    stored: str | None = None
    if isinstance(source, bytes):
        digest = hashlib.sha256(source).hexdigest()[:16]
        path = tome().settings.layout.job_dir(job.id) / f"script-{digest}.epub"
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(path) as tmp, open(tmp, "wb") as f:
            f.write(source)
        tome().storage.publish(path)
        stored = str(path)
        job.files_bytes = (job.files_bytes or 0) + len(source)
    job.options = {**job.options, "readalong": readalong.stored_options(True, stored)}


def _discard_cover(job: Job) -> None:
    """A job that was not inserted (an idempotent replay won) leaves no cover (or kept EPUB) behind."""
    if job.options.get("cover") or readalong.source_path(job.options):
        tome().storage.remove_folder(tome().settings.layout.job_dir(job.id))


def _new_job(
    body: JobCreate,
    title: str,
    voice: Voice,
    idempotency_key: str | None,
    request_sha: str,
    cover: Cover | None = None,
) -> Job:
    principal = current_principal()
    delivery = _delivery(body)
    job_id = uuid.uuid4()
    options: dict[str, object] = {"delivery": delivery.to_json(), "qa": _qa_options(body)}
    if cover is not None:
        options["cover"] = _store_cover(job_id, cover)
    return Job(
        id=job_id,
        files_bytes=len(cover.data) if cover is not None else None,  # stored now: counts now
        owner=principal.owner,
        title=title,
        script_format=body.script_format,
        voice_id=voice.id,
        engine=tome().engine().name,
        options={
            **options,
            "bitrate_kbps": delivery.bitrate_kbps,
            "pauses": body.pauses.model_dump(),
            "metadata": body.metadata.model_dump(exclude_none=True),
            "speed": body.speed,
            "language": body.language,
            "lexicons": list(body.lexicons),
            "script_options": body.script_options.model_dump(),
            **({"cast": body.cast.model_dump()} if body.cast is not None else {}),
            **({"deliver": body.deliver.model_dump(exclude_none=True)} if body.deliver else {}),
        },
        chapters=[],
        chunks_total=0,
        output_format=delivery.format,
        idempotency_key=idempotency_key,
        request_sha256=request_sha,
        webhook_url=body.webhook_url,
        abs_state="pending" if body.deliver and body.deliver.audiobookshelf else None,
        api_key_id=uuid.UUID(principal.key_id),
    )


def _insert(
    job: Job, script_plan: ScriptPlan | None, owner: str, idempotency_key: str | None, request_sha: str
) -> Job | None:
    """Insert the job and its chunks in one transaction. None when inserted; the earlier job when a
    concurrent request with the same Idempotency-Key won the insert."""
    sessions = tome().sessions
    try:
        if script_plan is None:
            sessions.add(job)
        else:
            jobs.insert_job(sessions(), job, script_plan.specs, script_plan.chunk_voices)
        sessions.commit()
    except IntegrityError:
        sessions.rollback()
        _discard_cover(job)  # this job was not inserted: its cover goes, whatever happens next
        earlier = _idempotent_replay(owner, idempotency_key, request_sha) if idempotency_key else None
        if earlier is None:
            raise
        return earlier
    return None


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


@bp.post("/<job_id>/cancel")
@operation(Operation("Cancel a job that has not finished", {200: JobOut, 409: None}, tags=("jobs",)))
def cancel_job(job_id: str) -> Response:
    state = tome()
    job = owned_job(job_id)
    if job.output_path is not None:  # a published book: what is cancelled is its re-render, never the book
        return _cancel_rerender(job)
    if not jobs.cancel_job(state.sessions(), job.id, utcnow()):
        state.sessions.rollback()
        raise Conflict(f"job is already {job.status}", code="not_cancellable")
    state.sessions.commit()
    state.enqueue(DELIVER_WEBHOOK, [str(job.id)])
    state.sessions.refresh(job)
    log.info("job %s: cancelled by its owner", job.id)
    return jsonify(job_out(job).model_dump(mode="json"))


def _cancel_rerender(job: Job) -> Response:
    """Cancel a finished book's re-render, rendering or stitching: its chunk keeps the previous take and
    the book is published again from it. A second cancel of the same re-render (concurrent, or after)
    answers the same; a book with no re-render to cancel is 409."""
    state = tome()
    cancelled = rerender.cancel(state.runtime, job.id, state.enqueue)
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

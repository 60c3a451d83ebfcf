"""A job's script as the client sends it (JSON, or multipart with the script as a file), and
``POST /v1/scripts/preview``: what a job would read, chunk by chunk, without queueing anything."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Response, jsonify, request

from models import Voice
from webapi import previews
from webapi.auth import current_principal, require_key
from webapi.errors import Invalid, TooLarge, UnsupportedMediaType
from webapi.extensions import tome
from webapi.operations import Operation, operation
from webapi.schemas import (
    JobCreate,
    JobForm,
    PreviewOut,
    PreviewPending,
)
from webapi.validation import json_body, validate
from worker.audio import MAX_COVER_BYTES, Cover, CoverError, Pauses, load_cover
from worker.cast_llm import LlmSettings
from worker.jobs import limits
from worker.jobs.job_plans import cast_request
from worker.jobs.plan import PlanError, PlanRequest, ScriptPlan, live_voices, plan
from worker.jobs.preview import PreviewAsk, preview_body
from worker.script import ReadOptions
from worker.script.markdown import leading_front_matter

bp = Blueprint("scripts", __name__, url_prefix="/v1/scripts")
bp.before_request(require_key)

# What a file's name says about its kind, when the multipart job does not say.
_KINDS = {".epub": "epub", ".md": "markdown", ".markdown": "markdown", ".ssml": "ssml", ".xml": "ssml"}
_EPUB_MAGIC = b"PK\x03\x04"


@dataclass(frozen=True)
class JobRequest:
    """A job's fields, its script (text, or an EPUB's bytes) and the request's digest (idempotency)."""

    body: JobCreate
    source: str | bytes
    sha256: str
    cover: Cover | None = None  # multipart only: the file field ``cover`` (JPEG or PNG), checked


def read_job_request() -> JobRequest:
    """The job in the request: a JSON body (an EPUB base64-encoded in ``script``), or multipart/form-data
    with the JSON fields in ``job`` and the script as the file ``script``. 4xx naming the problem."""
    if request.mimetype == "multipart/form-data":
        return _multipart()
    body = json_body(JobCreate)
    digest = hashlib.sha256(body.model_dump_json().encode()).hexdigest()
    if body.script_format != "epub":
        return JobRequest(body, body.script, digest)
    return JobRequest(body, _base64(body.script), digest)


def _base64(text: str) -> bytes:
    limit = tome().settings.limits.max_upload_bytes
    if len(text) > limit * 4 // 3 + 4:
        raise TooLarge(f"the EPUB is larger than {limit} bytes", code="script_too_large", field="script")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise Invalid(
            "an EPUB in a JSON body must be base64-encoded (or upload it as multipart/form-data)",
            code="script_invalid",
            field="script",
        ) from exc


def _multipart() -> JobRequest:
    form = validate(JobForm, {k: v for k, v in request.form.items() if k == "job"} | _extra_fields())
    try:
        fields = json.loads(form.job)
    except (ValueError, RecursionError) as exc:
        raise Invalid("the field 'job' must be a JSON object", code="invalid_json", field="job") from exc
    if not isinstance(fields, dict):
        raise Invalid("the field 'job' must be a JSON object", code="invalid_json", field="job")
    if "script" in fields:
        raise Invalid("send the script as the file 'script', not inside 'job'", field="job.script")
    upload = request.files.get("script")
    if upload is None:
        raise Invalid("upload the script as the file field 'script'", code="validation_error", field="script")
    data = _read_upload(upload.stream)
    cover = _read_cover()
    fields.setdefault("script_format", _kind(upload.filename or "", data))
    body = validate(JobCreate, {**fields, "script": "(uploaded)"}, prefix="job.")
    digest = hashlib.sha256(
        body.model_dump_json().encode()
        + hashlib.sha256(data).digest()
        + (hashlib.sha256(cover.data).digest() if cover else b"")
    ).hexdigest()
    if body.script_format == "epub":
        return JobRequest(body, data, digest, cover)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Invalid(
            f"the script is not valid UTF-8 (byte {exc.start})", code="script_invalid", field="script"
        ) from exc
    return JobRequest(body.model_copy(update={"script": text}), text, digest, cover)


def _read_cover() -> Cover | None:
    """The optional file field ``cover``: a JPEG or PNG of at most MAX_COVER_BYTES, its header checked
    (worker.audio.cover); 413 or 422 naming ``cover`` otherwise."""
    upload = request.files.get("cover")
    if upload is None:
        return None
    data = upload.stream.read(MAX_COVER_BYTES + 1)
    if len(data) > MAX_COVER_BYTES:
        raise TooLarge(
            f"the cover is larger than {MAX_COVER_BYTES} bytes", code="cover_too_large", field="cover"
        )
    try:
        return load_cover(data)
    except CoverError as exc:
        raise Invalid(exc.message, code=exc.code, field="cover") from exc


def _extra_fields() -> dict[str, str]:
    """Form fields other than ``job`` (refused by the strict form model, naming them)."""
    return {k: v for k, v in request.form.items() if k != "job"}


def _read_upload(stream: Any) -> bytes:
    limit = tome().settings.limits.max_upload_bytes
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(
            f"the script file is larger than {limit} bytes", code="script_too_large", field="script"
        )
    if not data:
        raise Invalid("the script file is empty", code="script_invalid", field="script")
    return bytes(data)


def _kind(filename: str, data: bytes) -> str:
    lowered = filename.lower()
    for suffix, kind in _KINDS.items():
        if lowered.endswith(suffix):
            return kind
    return "epub" if data.startswith(_EPUB_MAGIC) else "plain"


def require_multipart_or_json() -> None:
    if request.mimetype not in ("application/json", "multipart/form-data"):
        raise UnsupportedMediaType("send the job as JSON, or as multipart/form-data with the file 'script'")


def plan_request(owner: str, job: JobRequest, voice: Voice, *, attribute: bool = False) -> PlanRequest:
    body = job.body
    options = body.script_options
    return PlanRequest(
        owner=owner,
        voice=voice,
        script=job.source,
        script_format=body.script_format,
        pauses=Pauses(**body.pauses.model_dump()),
        max_chunk_chars=tome().engine().max_chunk_chars,
        job_limits=limits.JobLimits.of(tome().settings),
        language=body.language,
        read_options=ReadOptions(
            options.front_matter,
            options.back_matter,
            options.footnotes,
            tome().settings.limits.max_script_chars,
        ),
        lexicons=tuple(body.lexicons),
        engine=tome().engine().name,
        split_chapters=body.output.split == "chapter" and body.output.preset != "acx",
        attribute=attribute,
        cast=cast_request(body.cast.model_dump() if body.cast is not None else None),
        llm=LlmSettings.of(tome().settings),
    )


def resolve_voice(owner: str, ref: str) -> Voice:
    voice = live_voices(tome().sessions(), owner, [ref]).get(ref)
    if voice is None:
        raise Invalid(f"you have no voice with id or name {ref!r}", code="unknown_voice", field="voice")
    return voice


def plan_or_422(owner: str, job: JobRequest, voice: Voice, *, attribute: bool = False) -> ScriptPlan:
    try:
        return plan(tome().sessions(), plan_request(owner, job, voice, attribute=attribute))
    except PlanError as exc:
        raise Invalid(exc.message, code=exc.code, field=exc.field, line=exc.line, column=exc.column) from exc


def script_title(job: JobRequest) -> str | None:
    """The job's title: the request's, else what a Markdown script's front matter names (read cheaply:
    a long script is planned later, by a worker). EPUB titles come from the plan."""
    if job.body.title is not None:
        return job.body.title
    if job.body.script_format == "markdown" and isinstance(job.source, str):
        return leading_front_matter(job.source).title
    return None


@bp.post("/preview")
@operation(
    Operation(
        "What a job with this body would read: chapters, chunks (written and spoken), the rules and lexicon "
        "entries that fired, warnings and estimated durations. Nothing is queued. A text script of at most "
        "TOME_INLINE_PLAN_MAX_CHARS characters is answered at once (200); an EPUB or a longer script is "
        "planned by a worker: 202 with the preview's id and `Location`, then GET /v1/previews/{id}.",
        {200: PreviewOut, 202: PreviewPending, 413: None},
        body=JobCreate,
        form=JobForm,
        files=("script", "cover"),
        tags=("jobs",),
    )
)
def preview() -> Response | tuple[Response, int]:
    require_multipart_or_json()
    owner = current_principal().owner
    job = read_job_request()
    check_script_size(job)
    voice = resolve_voice(owner, job.body.voice)
    if not plans_inline(job):
        return previews.accept(job, voice)
    script_plan = plan_or_422(owner, job, voice, attribute=True)
    return jsonify(preview_body(preview_ask(job), script_plan))


def plans_inline(job: JobRequest) -> bool:
    """Whether the request's script is planned while the client waits: text of at most
    TOME_INLINE_PLAN_MAX_CHARS characters. An EPUB's text is known only once it is unpacked, so it always
    goes to a worker."""
    return isinstance(job.source, str) and len(job.source) <= tome().settings.limits.inline_plan_max_chars


def preview_ask(job: JobRequest) -> PreviewAsk:
    return PreviewAsk(
        title=job.body.title,
        pauses=Pauses(**job.body.pauses.model_dump()),
        speed=job.body.speed,
        with_cast=job.body.cast is not None,
        chars_per_second=tome().settings.limits.speech_chars_per_second,
        max_chunk_chars=tome().engine().max_chunk_chars,
    )


def check_script_size(job: JobRequest) -> None:
    """Refuse an over-long text script before the costly parse (EPUBs are bounded by their reader)."""
    settings = tome().settings
    if isinstance(job.source, str) and len(job.source) > settings.limits.max_script_chars:
        raise TooLarge(
            f"script has {len(job.source)} characters; the limit is {settings.limits.max_script_chars}",
            code="script_too_long",
            field="script",
        )

"""A job's script as the client sends it (JSON, or multipart with the script as a file), and
``POST /v1/scripts/preview``: what a job would read, chunk by chunk, without queueing anything."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Response, jsonify, request

from models import Voice
from webapi.auth import current_principal, require_key
from webapi.errors import Invalid, TooLarge, UnsupportedMediaType
from webapi.extensions import tome
from webapi.operations import Operation, operation
from webapi.schemas import (
    CastMemberOut,
    CastOut,
    FiredOut,
    JobCreate,
    JobForm,
    LineOut,
    PreviewChapter,
    PreviewChunk,
    PreviewMetadata,
    PreviewOut,
)
from webapi.validation import json_body, validate
from worker.audio import MAX_COVER_BYTES, Cover, CoverError, Pauses, load_cover
from worker.cast_llm import LlmSettings
from worker.jobs import limits
from worker.jobs.intake import cast_request
from worker.jobs.plan import PlanError, PlanRequest, ScriptPlan, live_voices, plan
from worker.script import ReadOptions
from worker.script.attribution import NARRATOR
from worker.script.language_id import script_language_warnings
from worker.script.markdown import leading_front_matter
from worker.script.warnings import plan_warnings

bp = Blueprint("scripts", __name__, url_prefix="/v1/scripts")
# The most lines of dialogue a preview lists (each is a small object; a long novel has tens of thousands).
MAX_PREVIEW_LINES = 20_000
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
    limit = tome().settings.max_upload_bytes
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
    limit = tome().settings.max_upload_bytes
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
            options.front_matter, options.back_matter, options.footnotes, tome().settings.max_script_chars
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
        "entries that fired, warnings and estimated durations. Nothing is queued.",
        {200: PreviewOut, 413: None},
        body=JobCreate,
        form=JobForm,
        files=("script", "cover"),
        tags=("jobs",),
    )
)
def preview() -> Response:
    require_multipart_or_json()
    owner = current_principal().owner
    job = read_job_request()
    check_script_size(job)
    voice = resolve_voice(owner, job.body.voice)
    script_plan = plan_or_422(owner, job, voice, attribute=True)
    return jsonify(_preview(job, script_plan).model_dump(mode="json"))


def check_script_size(job: JobRequest) -> None:
    """Refuse an over-long text script before the costly parse (EPUBs are bounded by their reader)."""
    settings = tome().settings
    if isinstance(job.source, str) and len(job.source) > settings.max_script_chars:
        raise TooLarge(
            f"script has {len(job.source)} characters; the limit is {settings.max_script_chars}",
            code="script_too_long",
            field="script",
        )


def _preview(job: JobRequest, script_plan: ScriptPlan) -> PreviewOut:
    settings = tome().settings
    pauses = Pauses(**job.body.pauses.model_dump())
    speed = job.body.speed
    chunks: list[PreviewChunk] = []
    rules: Counter[str] = Counter()
    per_chapter: dict[int, list[float]] = {}
    for spec, voice_id in zip(script_plan.specs, script_plan.chunk_voices, strict=True):
        fired = [_fired(f) for f in spec.fired]
        rules.update(f.rule for f in fired)
        pause = pauses.seconds(spec.pause_after if spec.pause_seconds is None else spec.pause_seconds)
        chunks.append(
            PreviewChunk(
                seq=spec.seq,
                chapter=spec.chapter,
                text=spec.text,
                written=spec.written,
                voice_id=voice_id,
                rate=round(speed * (spec.rate or 1.0), 4),
                pause_after=pause,
                fired=fired,
                speaker=(spec.speaker or NARRATOR) if job.body.cast is not None else None,
            )
        )
        seconds = len(spec.text) / settings.speech_chars_per_second / speed / (spec.rate or 1.0) + pause
        per_chapter.setdefault(spec.chapter, [0, 0, 0.0])
        totals = per_chapter[spec.chapter]
        totals[0] += 1
        totals[1] += len(spec.text)
        totals[2] += seconds
    chapters = [
        PreviewChapter(
            index=index,
            title=chapter.title,
            chunks=int(per_chapter.get(index, [0, 0, 0.0])[0]),
            characters=int(per_chapter.get(index, [0, 0, 0.0])[1]),
            estimated_seconds=round(per_chapter.get(index, [0, 0, 0.0])[2], 1),
        )
        for index, chapter in enumerate(script_plan.chapters)
    ]
    info = script_plan.info
    return PreviewOut(
        title=job.body.title or info.title,
        language=script_plan.language,
        metadata=PreviewMetadata(title=info.title, author=info.author, language=info.language),
        estimated_seconds=round(sum(c.estimated_seconds for c in chapters), 1),
        chapters=chapters,
        chunks=chunks,
        rules=dict(rules.most_common()),
        warnings=[
            *script_plan.warnings,
            *script_language_warnings(script_plan.chapters, script_plan.language),
            *_chunk_warnings(script_plan),
            *_lines_warning(script_plan),
        ],
        cast=_cast_out(script_plan),
        lines=_lines_out(job, script_plan),
    )


def _cast_out(script_plan: ScriptPlan) -> CastOut:
    cast = script_plan.cast
    members = cast.characters if cast is not None else ()
    return CastOut(
        characters=[
            CastMemberOut(
                name=m.name,
                aliases=list(m.aliases),
                lines=m.lines,
                words=m.words,
                confidence=m.confidence,
                sample=m.sample,
            )
            for m in members
        ]
    )


def _lines_out(job: JobRequest, script_plan: ScriptPlan) -> list[LineOut]:
    """Every line (at most MAX_PREVIEW_LINES), with the speaker after the job's corrections."""
    if script_plan.cast is None:
        return []
    corrected = script_plan.corrected
    return [
        LineOut(
            index=line.index,
            text=line.text,
            speaker=script_plan.line_speakers.get(line.index, line.speaker),
            attribution="corrected" if line.index in corrected else line.attribution,
            confidence=1.0 if line.index in corrected else line.confidence,
            chunk=script_plan.line_chunks.get(line.index),
        )
        for line in script_plan.cast.lines[:MAX_PREVIEW_LINES]
    ]


def _lines_warning(script_plan: ScriptPlan) -> list[str]:
    count = len(script_plan.cast.lines) if script_plan.cast is not None else 0
    if count <= MAX_PREVIEW_LINES:
        return []
    return [f"the script has {count} lines of dialogue; the preview lists the first {MAX_PREVIEW_LINES}"]


def _fired(fired: object) -> FiredOut:
    return FiredOut(
        rule=str(getattr(fired, "rule", "")),
        written=str(getattr(fired, "written", "")),
        spoken=str(getattr(fired, "spoken", "")),
    )


def _chunk_warnings(script_plan: ScriptPlan) -> list[str]:
    return plan_warnings(script_plan.chapters, script_plan.specs, tome().engine().max_chunk_chars)

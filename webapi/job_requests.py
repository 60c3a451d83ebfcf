"""What /v1/jobs checks in a submitted job before anything is stored (each refusal a 4xx naming the
field), and the submission it makes of it for the submit use case (worker.jobs.submit)."""

from __future__ import annotations

import math
import re
import uuid

from flask import request
from sqlalchemy import select

from models import Integration, Job, Voice
from webapi import scripts
from webapi.auth import current_principal
from webapi.controls import control_character, describe
from webapi.errors import Conflict, Invalid
from webapi.extensions import tome
from webapi.schemas import DeliverIn, JobCreate
from worker.audio import BookTags, Cover
from worker.audio.presets import Delivery, DeliveryError, resolve
from worker.jobs import library
from worker.jobs.submit import Submission
from worker.qa.checks import QaPolicy
from worker.webhooks import WebhookRefused, check_url

PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\r?\n(?=[ \t]*\S)")


def idempotent_replay(owner: str, key: str, request_sha: str) -> Job | None:
    """The job an earlier request with this Idempotency-Key made; 409 if that request was different."""
    job = tome().sessions.scalars(select(Job).where(Job.owner == owner, Job.idempotency_key == key)).first()
    if job is not None and job.request_sha256 != request_sha:
        raise Conflict(
            "this Idempotency-Key was used with a different request body",
            code="idempotency_conflict",
            field="Idempotency-Key",
        )
    return job


def required_title(title: str | None) -> str:
    if not title:
        raise Invalid("give the job a title: the script names none", code="validation_error", field="title")
    return " ".join(title.split())[:200]


def idempotency_key() -> str | None:
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


def check_webhook(url: str | None) -> None:
    if url is None:
        return
    try:
        settings = tome().settings
        check_url(url, settings.webhooks.allow_private, allowed_ports=settings.webhooks.port_set)
    except WebhookRefused as exc:
        raise Invalid(str(exc), code="webhook_refused", field="webhook_url") from exc


def check_deliver(owner: str, deliver: DeliverIn | None) -> None:
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


def check_tags(body: JobCreate, title: str) -> None:
    """The tags the output will carry, checked as the stitcher will build them (language form, lengths)."""
    try:
        BookTags(title=title, **library.tag_values(body.metadata.model_dump()))
    except ValueError as exc:
        raise Invalid(str(exc), code="validation_error", field="metadata") from exc


def check_script_size(submitted: scripts.JobRequest) -> None:
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


def submission(
    body: JobCreate,
    title: str,
    voice: Voice,
    idempotency_key: str | None,
    request_sha: str,
    cover: Cover | None,
) -> Submission:
    """The checked request as the submit use case takes it (a 422 naming a contradiction in its output
    options or QA thresholds)."""
    principal = current_principal()
    delivery = _delivery(body)
    return Submission(
        owner=principal.owner,
        api_key_id=uuid.UUID(principal.key_id),
        title=title,
        script_format=body.script_format,
        voice_id=voice.id,
        engine=tome().engine().name,
        options={
            "delivery": delivery.to_json(),
            "qa": _qa_options(body),
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
        output_format=delivery.format,
        idempotency_key=idempotency_key,
        request_sha256=request_sha,
        webhook_url=body.webhook_url,
        to_audiobookshelf=bool(body.deliver and body.deliver.audiobookshelf),
        cover=cover,
        readalong=body.output.readalong,
    )

"""/v1/previews: previews planned by a worker (``POST /v1/scripts/preview`` of an EPUB or of a script over
the inline cap answers 202 with one), read back by their owner until they expire."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

from flask import Blueprint, Response, jsonify, url_for
from sqlalchemy import select
from sqlalchemy.orm import undefer

from models import Preview, PreviewStatus, Voice, utcnow
from webapi.auth import current_principal, require_key
from webapi.errors import Gone, NotFound
from webapi.extensions import tome
from webapi.operations import Operation, operation
from webapi.schemas import PreviewOut, PreviewPending
from webapi.validation import parse_id
from worker.task_names import PREVIEW_SCRIPT

if TYPE_CHECKING:  # webapi.scripts imports this module
    from webapi.scripts import JobRequest

bp = Blueprint("previews", __name__, url_prefix="/v1/previews")
bp.before_request(require_key)

POLL_SECONDS = 1  # the Retry-After of a preview still being planned


def accept(job: JobRequest, voice: Voice) -> tuple[Response, int]:
    """Store the request as a preview for a worker to plan and answer 202 with where to poll it."""
    body = job.body
    settings = tome().settings
    now = utcnow()
    preview = Preview(
        id=uuid.uuid4(),
        owner=current_principal().owner,
        status=PreviewStatus.QUEUED.value,
        voice_id=voice.id,
        engine=tome().engine().name,
        script_format=body.script_format,
        options={
            "title": body.title,
            "delivery": {"split": body.output.split, "preset": body.output.preset},
            "pauses": body.pauses.model_dump(),
            "speed": body.speed,
            "language": body.language,
            "lexicons": list(body.lexicons),
            "script_options": body.script_options.model_dump(),
            **({"cast": body.cast.model_dump()} if body.cast is not None else {}),
        },
        script=job.source if isinstance(job.source, str) else None,
        script_file=job.source if isinstance(job.source, bytes) else None,
        created_at=now,
        expires_at=now + timedelta(seconds=settings.storage.preview_ttl_seconds),
    )
    sessions = tome().sessions
    sessions.add(preview)
    sessions.commit()
    tome().enqueue(PREVIEW_SCRIPT, [str(preview.id)])
    return _pending(preview)


def _pending(preview: Preview) -> tuple[Response, int]:
    url = url_for("previews.get_preview", preview_id=str(preview.id))
    out = PreviewPending(
        preview=preview.id,
        status="running" if preview.status == PreviewStatus.RUNNING else "queued",
        url=url,
        created_at=preview.created_at,
        expires_at=preview.expires_at,
    )
    response = jsonify(out.model_dump(mode="json"))
    response.headers["Location"] = url
    response.headers["Retry-After"] = str(POLL_SECONDS)
    return response, 202


@bp.get("/<preview_id>")
@operation(
    Operation(
        "A preview planned by a worker: 202 while it is planned; then the preview (200, the body "
        "POST /v1/scripts/preview answers for a short script) or the error the request would have had "
        "(413, 422); 410 once expired.",
        {200: PreviewOut, 202: PreviewPending, 410: None, 413: None, 422: None},
        tags=("jobs",),
    )
)
def get_preview(preview_id: str) -> Response | tuple[Response, int]:
    pid = parse_id(preview_id, "preview")
    owner = current_principal().owner
    sessions = tome().sessions
    preview = sessions.scalars(
        select(Preview).where(Preview.id == pid, Preview.owner == owner).options(undefer(Preview.result))
    ).first()
    if preview is None:
        raise NotFound(f"preview {preview_id} not found")
    if preview.expires_at <= utcnow():
        raise Gone(f"the preview expired at {preview.expires_at:%Y-%m-%dT%H:%M:%SZ}", code="expired")
    if preview.status == PreviewStatus.READY and preview.result is not None:
        return Response(preview.result, status=200, mimetype="application/json")
    if preview.status == PreviewStatus.FAILED and preview.error is not None:
        return jsonify(preview.error["body"]), int(preview.error["status"])
    return _pending(preview)

"""A job's chunk QA: ``GET /v1/jobs/{id}/qa`` lists every chunk's checks (scores, takes, flagged words),
``GET /v1/jobs/{id}/chunks/{seq}/audio`` plays one chunk, so that a producer can listen to what QA
flagged without downloading the book, ``POST .../chunks/{seq}/accept`` keeps a flagged take on the
owner's word and ``POST .../chunks/{seq}/rerender`` renders one again."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from flask import Blueprint, Response, jsonify, request, url_for
from sqlalchemy import select

from models import Chunk, ChunkStatus, Job, JobKind, JobStatus, Voice, unit_of_work, utcnow
from webapi.auth import require_key
from webapi.errors import Conflict, Gone, Invalid, NotFound, Unavailable
from webapi.extensions import tome
from webapi.job_views import chapter_rows, job_out, owned_job
from webapi.operations import Operation, operation
from webapi.schemas import ChunkQaOut, JobOut, JobQaOut, JobQaQuery, QaCheckOut, RerenderIn
from webapi.stored_files import send_stored
from webapi.usage import require_room_for_rerender
from webapi.validation import json_body, query
from worker.jobs import state
from worker.jobs.job_plans import plan_request
from worker.jobs.plan import PlanError, plan
from worker.storage.backend import StorageError
from worker.task_names import RENDER_CHUNKS, STITCH_CHAPTER

bp = Blueprint("job_qa", __name__, url_prefix="/v1/jobs")
bp.before_request(require_key)

# A chunk's sequence number is a 32-bit column: a larger one in a URL names no chunk (and must never reach
# the database, where it does not fit in the parameter).
MAX_SEQ = 2**31 - 1


def _seq_in_range(job_id: str, seq: int) -> int:
    if seq > MAX_SEQ:
        raise NotFound(f"job {job_id} has no chunk {str(seq)[:24]}: sequence numbers stop at {MAX_SEQ}")
    return seq


def _words(qa: Mapping[str, Any], key: str) -> list[str]:
    details = qa.get("details")
    transcript = details.get("transcript") if isinstance(details, Mapping) else None
    words = transcript.get(key) if isinstance(transcript, Mapping) else None
    return [str(w) for w in words] if isinstance(words, list) else []


def _chunk_out(job_id: str, chunk: Chunk) -> ChunkQaOut:
    qa: Mapping[str, Any] = chunk.qa if isinstance(chunk.qa, Mapping) else {}
    checks = [QaCheckOut.model_validate(c) for c in qa.get("checks", []) if isinstance(c, Mapping)]
    return ChunkQaOut(
        seq=chunk.seq,
        chapter=chunk.chapter,
        text=chunk.text,
        status=chunk.status,
        passed=qa.get("passed") if qa else None,
        flagged=bool(chunk.flagged),
        renders=qa.get("renders") if qa else None,
        reasons=[str(r) for r in qa.get("reasons", [])],
        checks=checks,
        missing_words=_words(qa, "missing"),
        extra_words=_words(qa, "extra"),
        audio_url=url_for("job_qa.chunk_audio", job_id=job_id, seq=chunk.seq) if chunk.audio_path else None,
        error=chunk.error,
        accepted_at=qa.get("accepted_at"),
    )


@bp.get("/<job_id>/qa")
@operation(
    Operation(
        "Every chunk's quality checks: scores, takes, reasons, flagged words, its audio",
        {200: JobQaOut},
        query=JobQaQuery,
        tags=("jobs",),
    )
)
def job_qa(job_id: str) -> Response:
    job = owned_job(job_id)
    q = query(JobQaQuery)
    stmt = select(Chunk).where(Chunk.job_id == job.id)
    if q.flagged:
        stmt = stmt.where(Chunk.flagged.is_(True))
    chunks = tome().sessions.scalars(stmt.order_by(Chunk.seq).limit(q.limit).offset(q.offset))
    out = JobQaOut(
        job_id=job.id,
        chunks_flagged=job.chunks_flagged or 0,
        chunks_rerendered=job.chunks_rerendered or 0,
        chunks=[_chunk_out(str(job.id), c) for c in chunks],
    )
    return jsonify(out.model_dump(mode="json"))


@bp.get("/<job_id>/chunks/<int:seq>/audio")
@operation(
    Operation(
        "One rendered chunk's audio (WAV, Range requests supported)",
        {200: None, 206: None, 404: None, 410: None, 416: None},
        tags=("jobs",),
        binary="audio/wav",
    )
)
def chunk_audio(job_id: str, seq: int) -> Response:
    job = owned_job(job_id)
    seq = _seq_in_range(job_id, seq)
    chunk = tome().sessions.scalars(select(Chunk).where(Chunk.job_id == job.id, Chunk.seq == seq)).first()
    if chunk is None:
        raise NotFound(f"job {job_id} has no chunk {seq}")
    if not chunk.audio_path:
        raise NotFound(f"chunk {seq} has no audio (not rendered yet, or removed)", code="no_audio")
    return send_stored(
        chunk.audio_path, "audio/wav", f"chunk-{seq:06d}.wav", "the audio of this chunk was removed"
    )


@bp.post("/<job_id>/chunks/<int:seq>/accept")
@operation(
    Operation(
        "Accept one flagged chunk as it is: no longer flagged (the job's count drops), its QA record kept "
        "with when it was accepted; a later re-render judges its new take afresh",
        {200: ChunkQaOut, 404: None, 409: None},
        tags=("jobs",),
    )
)
def accept_chunk(job_id: str, seq: int) -> Response:
    job = owned_job(job_id)
    seq = _seq_in_range(job_id, seq)
    with unit_of_work(tome().runtime.sessions) as session:
        accepted = state.accept_flag(session, job.id, seq, utcnow())
    sessions = tome().sessions
    sessions.expire_all()
    chunk = sessions.scalars(select(Chunk).where(Chunk.job_id == job.id, Chunk.seq == seq)).first()
    if chunk is None:
        raise NotFound(f"job {job_id} has no chunk {seq}")
    if not accepted:
        raise Conflict(_why_not_flagged(chunk), code="not_flagged")
    return jsonify(_chunk_out(str(job.id), chunk).model_dump(mode="json"))


def _why_not_flagged(chunk: Chunk) -> str:
    qa: Mapping[str, Any] = chunk.qa if isinstance(chunk.qa, Mapping) else {}
    if chunk.status != ChunkStatus.DONE:
        return f"chunk {chunk.seq} is being rendered; only a flagged take can be accepted"
    if qa.get("accepted_at"):
        return f"chunk {chunk.seq} was accepted already, at {qa['accepted_at']}"
    if not qa:
        return f"chunk {chunk.seq} was not checked (QA was off): there is no flag to accept"
    return f"chunk {chunk.seq} passed its checks: there is no flag to accept"


@bp.post("/<job_id>/chunks/<int:seq>/rerender")
@operation(
    Operation(
        "Render one chunk of a finished job again (a new take, or edited text); its chapter and the book "
        "are stitched again, the previous output downloadable until the new one is published",
        {202: JobOut, 404: None, 409: None, 410: None, 422: None, 429: None},
        body=RerenderIn,
        tags=("jobs",),
    )
)
def rerender_chunk(job_id: str, seq: int) -> tuple[Response, int]:
    job = owned_job(job_id)
    seq = _seq_in_range(job_id, seq)
    asked = json_body(RerenderIn) if request.content_length else RerenderIn()
    if job.kind == JobKind.SPEECH:
        raise Conflict(
            "a speech request's audio was streamed to its client and not kept: send the request again",
            code="not_rerenderable",
        )
    if job.expired_at is not None:
        raise Gone(f"the audio of this job expired at {job.expired_at:%Y-%m-%dT%H:%M:%SZ}", code="expired")
    if job.status != JobStatus.SUCCEEDED:
        raise Conflict(
            f"job is {job.status}; a chunk can be rendered again once the job has succeeded", code="not_ready"
        )
    sessions = tome().sessions
    chunk = sessions.scalars(select(Chunk).where(Chunk.job_id == job.id, Chunk.seq == seq)).first()
    if chunk is None or chunk.status != ChunkStatus.DONE:
        raise NotFound(f"job {job_id} has no rendered chunk {seq}")
    voice = sessions.get(Voice, chunk.voice_id)
    if voice is None or voice.deleted_at is not None:
        raise Conflict(
            "the chunk's voice was deleted: a new take needs it (the book stays as it is)",
            code="voice_deleted",
        )
    edit = None if asked.text is None else _read(job, chunk, voice, asked.text)
    seconds = len(chunk.text if edit is None else edit.text) / tome().settings.limits.speech_chars_per_second
    require_room_for_rerender(job.id, seconds)
    try:
        stale = [
            row.chapter
            for row in chapter_rows(job)
            if row.chapter != chunk.chapter
            and not all(tome().storage.exists(str(f.get("path"))) for f in (row.build or {}).get("files", []))
        ]
    except StorageError as exc:  # the bucket does not answer: nothing was changed
        raise Unavailable(f"the file store cannot be reached: {exc}", code="storage_unavailable") from exc
    seed = asked.seed if asked.seed is not None else secrets.randbelow(2**31)
    with unit_of_work(tome().runtime.sessions) as session:
        moved = state.rerender_chunk(
            session, job.id, seq, edit=edit, seed=seed, stale_chapters=stale, now=utcnow(), seconds=seconds
        )
    if not moved:
        raise Conflict("the job changed meanwhile; GET it and try again", code="not_ready")
    rt = tome().runtime
    for chapter in stale:  # their chunks are all done: stitched again at once
        with unit_of_work(rt.sessions) as session:
            token = state.claim_chapter(session, job.id, chapter, _lease(), utcnow())
        if token is not None:
            tome().enqueue(STITCH_CHAPTER, [str(job.id), chapter, token])
    with unit_of_work(rt.sessions) as session:
        state.mark_enqueued(session, job.id, [seq])
    tome().enqueue(RENDER_CHUNKS, [str(job.id), [seq]])
    sessions.expire_all()
    fresh = sessions.get(Job, job.id)
    assert fresh is not None
    response = jsonify(job_out(fresh, chapter_rows(fresh)).model_dump(mode="json"))
    response.headers["Location"] = f"/v1/jobs/{fresh.id}"
    return response, 202


def _lease() -> timedelta:
    return timedelta(seconds=tome().settings.tasks.stitch_lease_seconds)


def _read(job: Job, chunk: Chunk, voice: Voice, text: str) -> state.Edit:
    """``text`` as the engine will read it (normalised, the job's and the voice's lexicons applied, as
    the script was) and as written; 422 naming ``text`` unless it makes exactly one chunk.

    Read in the job's own markup: a Markdown job's edit as Markdown (its emphasis is not read out), an
    SSML job's edit that holds markup as SSML (a fragment is wrapped in ``<speak>``), and then its
    prosody rate is the chunk's new rate; plain text keeps the chunk's rate (it may sit inside a
    ``<prosody>`` of the script)."""
    sessions = tome().sessions
    markup = job.script_format == "ssml" and "<" in text
    if markup:
        fmt, script = "ssml", text if text.lstrip().startswith("<speak") else f"<speak>{text}</speak>"
    else:
        fmt, script = ("markdown" if job.script_format == "markdown" else "plain"), text
    asked = replace(plan_request(tome().runtime, job, voice, script), script_format=fmt, split_chapters=False)
    try:
        specs = plan(sessions(), asked).specs
    except PlanError as exc:
        raise Invalid(exc.message, code=exc.code, field="text") from exc
    if len(specs) != 1:
        raise Invalid(
            f"the new text reads as {len(specs)} chunks; a re-render replaces one chunk: shorten it",
            field="text",
        )
    spec = specs[0]
    return state.Edit(spec.text, spec.source or text, spec.rate if markup else chunk.rate)

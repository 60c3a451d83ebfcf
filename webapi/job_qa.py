"""A job's chunk QA: ``GET /v1/jobs/{id}/qa`` lists every chunk's checks (scores, takes, flagged words)
and ``GET /v1/jobs/{id}/chunks/{seq}/audio`` plays one chunk, so that a producer can listen to what QA
flagged without downloading the book."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask import Blueprint, Response, jsonify, send_file, url_for
from sqlalchemy import select

from models import Chunk
from webapi.auth import require_key
from webapi.errors import Gone, NotFound
from webapi.extensions import tome
from webapi.jobs import owned_job, serve_multi_range_whole
from webapi.openapi import Operation, operation
from webapi.schemas import ChunkQaOut, JobQaOut, JobQaQuery, QaCheckOut
from webapi.validation import query

bp = Blueprint("job_qa", __name__, url_prefix="/v1/jobs")
bp.before_request(require_key)


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
        {200: None, 206: None, 404: None, 410: None},
        tags=("jobs",),
        binary="audio/wav",
    )
)
def chunk_audio(job_id: str, seq: int) -> Response:
    job = owned_job(job_id)
    chunk = tome().sessions.scalars(select(Chunk).where(Chunk.job_id == job.id, Chunk.seq == seq)).first()
    if chunk is None:
        raise NotFound(f"job {job_id} has no chunk {seq}")
    if not chunk.audio_path:
        raise NotFound(f"chunk {seq} has no audio (not rendered yet, or removed)", code="no_audio")
    path = Path(chunk.audio_path)
    if not path.is_file():
        raise Gone("the audio of this chunk was removed", code="expired")
    serve_multi_range_whole()
    return send_file(
        path, mimetype="audio/wav", as_attachment=True, download_name=f"chunk-{seq:06d}.wav", conditional=True
    )

"""A finished job's files beside the book: ``GET /v1/jobs/{id}/files`` lists them (chapter files, their
ZIP, subtitles, the manifest, the ACX report), ``GET /v1/jobs/{id}/files/{name}`` downloads one (Range
requests work). They expire with the job's audio."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, url_for

from models import Job
from webapi.auth import require_key
from webapi.errors import NotFound
from webapi.jobs import (
    chapter_rows,
    early_files,
    file_out,
    job_audio_name,
    owned_job,
    require_finished,
)
from webapi.openapi import Operation, operation
from webapi.schemas import FileList, FileOut
from webapi.stored_files import send_stored
from worker.audio import FORMATS

bp = Blueprint("job_files", __name__, url_prefix="/v1/jobs")
bp.before_request(require_key)

_MIME = {
    "srt": "application/x-subrip",
    "vtt": "text/vtt",
    "json": "application/json",
    "zip": "application/zip",
    "epub": "application/epub+zip",
}


def _book(job: Job) -> FileOut:
    return FileOut(
        name=job_audio_name(job),
        kind="book",
        format=job.output_format,
        duration=job.output_duration,
        bytes=job.output_bytes or 0,
        url=url_for("jobs.job_audio", job_id=str(job.id)),
    )


def _files_of(job_id: str) -> tuple[Job, list[dict[str, Any]], bool]:
    """The caller's job, the files it can download now, and whether the book is among them: a finished
    job's files until they expire (410 then); while it renders, its chapters ready so far; 409 when
    there is nothing yet."""
    job = owned_job(job_id)
    if not job.output_path or job.expired_at is not None:  # not finished (a re-rendering job is)
        early = early_files(job, chapter_rows(job))
        if early:
            return job, early, False
    require_finished(job, "files")  # 410 after expiry, 409 before any file exists
    return job, list(job.files or []), True


@bp.get("/<job_id>/files")
@operation(
    Operation(
        "Every file of a finished job (the book, chapter files, ZIP, subtitles, manifest, ACX report, "
        "read-along EPUB); "
        "while it renders, the files of its chapters ready so far",
        {200: FileList, 409: None, 410: None},
        tags=("jobs",),
    )
)
def list_files(job_id: str) -> Response:
    job, entries, finished = _files_of(job_id)
    files = [*([_book(job)] if finished else []), *(file_out(job, f) for f in entries)]
    return jsonify(FileList(files=files).model_dump(mode="json"))


@bp.get("/<job_id>/files/<name>")
@operation(
    Operation(
        "Download one of a job's files (Range requests supported), a chapter's as soon as it is ready",
        {200: None, 206: None, 404: None, 409: None, 410: None, 416: None},
        tags=("jobs",),
        binary="application/octet-stream",
    )
)
def get_file(job_id: str, name: str) -> Response:
    _, entries, _ = _files_of(job_id)
    entry = next((f for f in entries if f.get("name") == name), None)
    if entry is None:
        raise NotFound(f"this job has no file named {name[:100]!r}; GET its /files for the list")
    fmt = str(entry["format"])
    kind = FORMATS.get(fmt)  # type: ignore[call-overload]
    mime = kind.mime_type if kind else _MIME.get(fmt, "application/octet-stream")
    return send_stored(str(entry["path"]), mime, str(entry["name"]), "this file of the job was removed")

"""A finished job's files beside the book: ``GET /v1/jobs/{id}/files`` lists them (chapter files, their
ZIP, subtitles, the manifest, the ACX report), ``GET /v1/jobs/{id}/files/{name}`` downloads one, the book
too by its listed name (Range requests work). They expire with the job's audio. :mod:`webapi.file_links`
serves the same files through signed links."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Response, jsonify, url_for

from models import Job
from webapi.auth import require_key
from webapi.errors import NotFound
from webapi.job_views import (
    chapter_rows,
    early_files,
    file_out,
    job_audio_name,
    owned_job,
    require_finished,
)
from webapi.operations import Operation, operation
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


def files_of(job: Job) -> tuple[list[dict[str, Any]], bool]:
    """The files ``job`` can download now, and whether the book is among them: a finished job's files
    until they expire (410 then); while it renders, its chapters ready so far; 409 when there is nothing
    yet."""
    if not job.output_path or job.expired_at is not None:  # not finished (a re-rendering job is)
        early = early_files(job, chapter_rows(job))
        if early:
            return early, False
    require_finished(job, "files")  # 410 after expiry, 409 before any file exists
    return list(job.files or []), True


@dataclass(frozen=True)
class JobFile:
    """One downloadable file of a job: where it is stored, its media type, its name and what a 410 says
    when it is gone."""

    stored: str
    mimetype: str
    name: str
    gone: str


def job_file(job: Job, name: str) -> JobFile:
    """The file of ``job`` named ``name`` (the book by its listed name too; a name is only ever looked up
    among the job's own entries, never used as a path); 404 naming it if the job has none, 409 or 410 as
    the listing answers."""
    entries, finished = files_of(job)
    if finished and name == job_audio_name(job):
        kind = FORMATS.get(job.output_format)  # type: ignore[call-overload]
        mime = kind.mime_type if kind else "application/octet-stream"
        return JobFile(str(job.output_path), mime, name, "the audio of this job was removed")
    entry = next((f for f in entries if f.get("name") == name), None)
    if entry is None:
        raise NotFound(f"this job has no file named {name[:100]!r}; GET its /files for the list")
    fmt = str(entry["format"])
    kind = FORMATS.get(fmt)  # type: ignore[call-overload]
    mime = kind.mime_type if kind else _MIME.get(fmt, "application/octet-stream")
    return JobFile(str(entry["path"]), mime, str(entry["name"]), "this file of the job was removed")


def send_job_file(found: JobFile) -> Response:
    """``found`` with Range, ETag and 416 as every download answers them (webapi/stored_files.py)."""
    return send_stored(found.stored, found.mimetype, found.name, found.gone)


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
    job = owned_job(job_id)
    entries, finished = files_of(job)
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
    return send_job_file(job_file(owned_job(job_id), name))

"""A finished job's files beside the book: ``GET /v1/jobs/{id}/files`` lists them (chapter files, their
ZIP, subtitles, the manifest, the ACX report), ``GET /v1/jobs/{id}/files/{name}`` downloads one (Range
requests work). They expire with the job's audio."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Blueprint, Response, jsonify, send_file, url_for

from models import Job
from webapi.auth import require_key
from webapi.errors import Gone, NotFound
from webapi.jobs import finished_job, job_audio_name, serve_multi_range_whole
from webapi.openapi import Operation, operation
from webapi.schemas import FileList, FileOut
from worker.audio import FORMATS

bp = Blueprint("job_files", __name__, url_prefix="/v1/jobs")
bp.before_request(require_key)

_MIME = {
    "srt": "application/x-subrip",
    "vtt": "text/vtt",
    "json": "application/json",
    "zip": "application/zip",
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


def _listed(job: Job, entry: dict[str, Any]) -> FileOut:
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


@bp.get("/<job_id>/files")
@operation(
    Operation(
        "Every file of a finished job: the book, chapter files, ZIP, subtitles, manifest, ACX report",
        {200: FileList, 409: None, 410: None},
        tags=("jobs",),
    )
)
def list_files(job_id: str) -> Response:
    job = finished_job(job_id, "files")
    files = [_book(job), *(_listed(job, f) for f in job.files or [])]
    return jsonify(FileList(files=files).model_dump(mode="json"))


@bp.get("/<job_id>/files/<name>")
@operation(
    Operation(
        "Download one of a finished job's files (Range requests supported)",
        {200: None, 206: None, 404: None, 409: None, 410: None},
        tags=("jobs",),
        binary="application/octet-stream",
    )
)
def get_file(job_id: str, name: str) -> Response:
    job = finished_job(job_id, "files")
    entry = next((f for f in job.files or [] if f.get("name") == name), None)
    if entry is None:
        raise NotFound(f"this job has no file named {name[:100]!r}; GET its /files for the list")
    path = Path(str(entry["path"]))
    if not path.is_file():
        raise Gone("this file of the job was removed", code="expired")
    serve_multi_range_whole()
    fmt = str(entry["format"])
    kind = FORMATS.get(fmt)  # type: ignore[call-overload]
    mime = kind.mime_type if kind else _MIME.get(fmt, "application/octet-stream")
    return send_file(path, mimetype=mime, as_attachment=True, download_name=name, conditional=True)

"""Serving a stored file (the book, a job's file, a chunk) with Range support, on either backend.

Local data directory: Flask's ``send_file`` (conditional requests, one range). S3: the API asks the
bucket for the same byte range and streams it back a block at a time (``TOME_S3_PRESIGN_SECONDS=0``,
the default), or answers a 302 to a URL presigned for that many seconds, which the client then fetches
from the bucket itself (Range included).
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from flask import Response, redirect, request, send_file
from werkzeug.exceptions import RequestedRangeNotSatisfiable

from webapi.errors import Gone, Unavailable
from webapi.extensions import tome
from worker.storage.backend import StorageError, StoredFileMissing


def serve_multi_range_whole() -> None:
    """A request for several ranges gets the whole file (200), as RFC 9110 allows and most servers do;
    Werkzeug would answer 416, which players and download managers treat as an error."""
    if "," in request.headers.get("Range", ""):
        request.environ.pop("HTTP_RANGE", None)
        request.__dict__.pop("range", None)  # Werkzeug caches the parsed header


def send_stored(stored: str, mimetype: str, download_name: str, gone: str) -> Response:
    """The stored file as an attachment named ``download_name``; 410 with ``gone`` if it is not there."""
    storage = tome().storage
    serve_multi_range_whole()
    if storage.kind == "local":
        path = Path(stored)
        if not path.is_file():
            raise Gone(gone, code="expired")
        return send_file(path, mimetype=mimetype, as_attachment=True, download_name=download_name,
                         conditional=True)  # fmt: skip
    try:
        total = storage.size(stored)
    except StoredFileMissing as exc:
        raise Gone(gone, code="expired") from exc
    except StorageError as exc:  # the bucket does not answer: say so (and /healthz says it too)
        raise Unavailable(f"the file store cannot be reached: {exc}", code="storage_unavailable") from exc
    seconds = tome().settings.storage.s3_presign_seconds
    if seconds > 0:
        url = storage.presigned_url(stored, seconds, download_name, mimetype)
        if url is not None:
            answer = cast(Response, redirect(url, 302))
            answer.headers["Cache-Control"] = "private, no-store"  # the URL expires; do not keep it
            return answer
    return _proxied(stored, total, mimetype, download_name)


def _proxied(stored: str, total: int, mimetype: str, download_name: str) -> Response:
    storage = tome().storage
    wanted = request.range
    span = None
    if wanted is not None and wanted.units == "bytes" and len(wanted.ranges) == 1:
        span = wanted.range_for_length(total)
        if span is None:  # answered as send_file answers it: the JSON error, Content-Range: bytes */total
            raise RequestedRangeNotSatisfiable(length=total)
    start, end = (span[0], span[1] - 1) if span is not None else (None, None)
    try:
        download = storage.open_range(stored, start, end)
    except StoredFileMissing as exc:
        raise Gone("the file was removed", code="expired") from exc
    except StorageError as exc:
        raise Unavailable(f"the file store cannot be reached: {exc}", code="storage_unavailable") from exc
    answer = Response(download.body, status=206 if span else 200, mimetype=mimetype, direct_passthrough=True)
    answer.headers["Content-Length"] = str(download.length)
    answer.headers["Accept-Ranges"] = "bytes"
    if span is not None:
        answer.headers["Content-Range"] = (
            f"bytes {download.start}-{download.start + download.length - 1}/{total}"
        )
    answer.headers["Content-Disposition"] = f'attachment; filename="{download_name}"'
    if download.etag:
        answer.set_etag(download.etag)
    answer.last_modified = download.modified
    return answer

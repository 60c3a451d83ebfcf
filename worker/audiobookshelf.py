"""Delivery into an owner's Audiobookshelf: once a job that asked for it succeeds, its book goes up
through the server's ``POST /api/upload`` (multipart, in worker.jobs.library's folder layout), then
``POST /api/libraries/{library_id}/scan`` asks the library to find it.

The owner's server URL and API token are stored once, the token sealed with ``TOME_SECRET_KEY``
(worker.sealed); a job only ever uses its own owner's. The URL follows the webhook address rules
(worker.webhooks, with ``TOME_AUDIOBOOKSHELF_ALLOW_PRIVATE``), and each attempt connects to the
addresses it checked.

Each attempt is claimed and counted in one conditional update, so two workers never both upload. A 5xx
answer, a timeout or a failed connection is tried again after a wait that doubles, up to
``TOME_AUDIOBOOKSHELF_MAX_ATTEMPTS``; any other answer ends the delivery as failed. The scan is asked
once: its failure is noted on a delivered book, whose files the library finds by itself. Delivery never
changes the job's status. What the job shows is generic ("HTTP 503", "timed out"); the token is never
logged, stored in the clear or shown. See docs/api.md, "Delivery into Audiobookshelf".
"""

from __future__ import annotations

import http.client
import logging
import re
import secrets
import ssl
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import and_, or_

from models import Integration, Job, JobStatus, unit_of_work, utcnow
from worker.audio.cover import Cover, CoverError, as_jpeg, load_cover
from worker.config import Settings
from worker.jobs import state
from worker.jobs.files import stored_files
from worker.jobs.library import COVER_NAME, LibraryBook
from worker.runtime import Runtime
from worker.sealed import SealError, unseal
from worker.storage.backend import StoredFileMissing
from worker.webhooks import Resolver, WebhookRefused, check_url, open_connection, resolve

log = logging.getLogger(__name__)

KIND = "audiobookshelf"
PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
# Audiobookshelf's ids: UUIDs, or the older lib_xxx / fol_xxx; never a path.
ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
_ID = re.compile(ID_PATTERN)
BLOCK_BYTES = 256 * 1024
_RESPONSE_BYTES = 4096  # read of an answer's body (never shown: only the status counts)


class ServerRefused(ValueError):
    """An Audiobookshelf URL Tome will not call (syntax, port, or an address it may not reach)."""


def check_server_url(url: str, settings: Settings) -> None:
    """Refuse a server URL: not http(s), credentials, a query or fragment, or the webhook address rules
    (with ``audiobookshelf_allow_private``)."""
    if "?" in url or "#" in url:
        raise ServerRefused("url must not have a query or a fragment")
    try:
        check_url(url, settings.audiobookshelf.allow_private, allowed_ports=settings.webhooks.port_set)
    except WebhookRefused as exc:
        raise ServerRefused(str(exc).replace("webhook_url", "url")) from exc


def due_filter(now: Any, max_attempts: int) -> Any:
    """Succeeded jobs whose delivery is pending, has attempts left and is due."""
    return and_(
        Job.abs_state == PENDING,
        Job.status == JobStatus.SUCCEEDED.value,
        Job.abs_attempts < max_attempts,
        or_(Job.abs_next_at.is_(None), Job.abs_next_at <= now),
    )


def retry_delay(settings: Settings, attempts: int) -> float:
    """Seconds before the attempt after ``attempts`` (the first retry after retry_seconds, then doubling)."""
    return float(settings.audiobookshelf.retry_seconds * 2 ** max(attempts - 1, 0))


@dataclass(frozen=True)
class Result:
    """What one call did: ``outcome`` (not_due, delivered, failed or retry) and, for a retry, when."""

    outcome: str
    retry_in: float | None = None

    @property
    def ended(self) -> bool:
        return self.outcome in (DELIVERED, FAILED)

    def to_json(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "retry_in": self.retry_in}


@dataclass(frozen=True)
class _Work:
    """What an attempt needs, read in the claim's transaction."""

    url: str
    token: str
    library_id: str
    folder_id: str
    book: LibraryBook
    output_path: str
    extension: str
    cover_path: str | None


class _Ended(Exception):
    """The delivery cannot go on: ``error`` for the job; ``retry`` when trying again may help."""

    def __init__(self, error: str, *, retry: bool = False) -> None:
        super().__init__(error)
        self.error = error
        self.retry = retry


def deliver(rt: Runtime, job_id: uuid.UUID, *, resolver: Resolver = resolve) -> Result:
    """Claim the job's delivery if it is due, upload once, scan, and record the outcome on the job."""
    settings = rt.settings
    now = utcnow()
    claim_for = settings.audiobookshelf.upload_seconds + 2 * settings.audiobookshelf.timeout_seconds + 60
    with unit_of_work(rt.sessions) as session:
        due = due_filter(now, settings.audiobookshelf.max_attempts)
        if not state.claim_upload(session, job_id, due, now + timedelta(seconds=claim_for)):
            return Result("not_due")
        job = session.get(Job, job_id)
        assert job is not None
        attempts = job.abs_attempts
        work: _Work | _Ended
        try:
            work = _work(session.get(Integration, (job.owner, KIND)), job, settings.security.secret_key)
        except _Ended as exc:
            work = exc
    try:
        if isinstance(work, _Ended):
            raise work
        note = _upload_and_scan(rt, work, resolver)
    except _Ended as exc:
        return _record(rt, job_id, attempts, exc)
    except Exception as exc:  # still a counted attempt, retried: never a delivery stuck as pending
        log.warning("job %s: audiobookshelf attempt %d failed unexpectedly", job_id, attempts, exc_info=True)
        return _record(rt, job_id, attempts, _Ended("delivery failed", retry=True), cause=exc)
    with unit_of_work(rt.sessions) as session:
        state.record_upload(session, job_id, DELIVERED, note, None)
    log.info(
        "job %s: delivered to audiobookshelf (attempt %d)%s", job_id, attempts, f": {note}" if note else ""
    )
    return Result(DELIVERED)


def _work(integration: Integration | None, job: Job, secret_key: str) -> _Work:
    if integration is None:
        raise _Ended("no Audiobookshelf server is configured for this owner")
    try:
        token = unseal(secret_key, integration.token_sealed)
    except SealError as exc:
        raise _Ended("the stored token does not open with TOME_SECRET_KEY: set the server again") from exc
    target = (job.options.get("deliver") or {}).get(KIND) or {}
    if not job.output_path:
        raise _Ended("the book is no longer stored")
    return _Work(
        url=integration.url,
        token=token,
        library_id=str(target.get("library_id", "")),
        folder_id=str(target.get("folder_id", "")),
        book=LibraryBook.of(job.title, job.options.get("metadata") or {}),
        output_path=job.output_path,
        extension=Path(job.output_path).suffix,
        cover_path=str(job.options["cover"]) if job.options.get("cover") else None,
    )


def _record(
    rt: Runtime, job_id: uuid.UUID, attempts: int, ended: _Ended, cause: BaseException | None = None
) -> Result:
    settings = rt.settings
    retry = ended.retry and attempts < settings.audiobookshelf.max_attempts
    delay = retry_delay(settings, attempts) if retry else None
    retry_at = None if delay is None else utcnow() + timedelta(seconds=delay)
    with unit_of_work(rt.sessions) as session:
        state.record_upload(session, job_id, FAILED if delay is None else None, ended.error, retry_at)
    detail = f" ({cause!r})" if cause is not None else ""
    log.warning(
        "job %s: audiobookshelf attempt %d failed: %s%s; %s",
        job_id,
        attempts,
        ended.error,
        detail,
        f"trying again in {delay:g} s" if delay is not None else "giving up",
    )
    return Result("retry", delay) if delay is not None else Result(FAILED)


def _upload_and_scan(rt: Runtime, work: _Work, resolver: Resolver) -> str | None:
    """Upload, then scan; the note a delivered book keeps (a scan that failed), or None."""
    if not (_ID.fullmatch(work.library_id) and _ID.fullmatch(work.folder_id)):
        raise _Ended("the job's library_id or folder_id is not an Audiobookshelf id")
    settings = rt.settings
    cover = _cover(rt, work.cover_path)
    book = work.book
    fields = {
        "title": book.title_folder,
        "author": book.author_folder or "",
        "series": book.series_folder or "",
        "library": work.library_id,
        "folder": work.folder_id,
    }
    deadline = time.monotonic() + settings.audiobookshelf.upload_seconds
    try:
        with stored_files(rt.storage).local(work.output_path) as local:
            files: list[tuple[str, str, bytes | Path]] = [
                (book.book_name(work.extension), "application/octet-stream", Path(local))
            ]
            if cover is not None:
                files.append((COVER_NAME, cover.mime_type, cover.data))
            files += [(name, "text/plain; charset=utf-8", data) for name, data in book.texts().items()]
            status = _call(rt, work, "/api/upload", _multipart(fields, files), deadline, resolver)
    except StoredFileMissing as exc:
        raise _Ended("the book is no longer stored") from exc
    if not 200 <= status < 300:
        raise _Ended(_status_error(status), retry=status >= 500)
    try:
        scan = _call(
            rt,
            work,
            f"/api/libraries/{work.library_id}/scan",
            _Body([], None),
            time.monotonic() + 2 * settings.audiobookshelf.timeout_seconds,
            resolver,
        )
    except _Ended as exc:
        return f"uploaded; the library scan failed: {exc.error}"
    return None if 200 <= scan < 300 else f"uploaded; the library scan failed: {_status_error(scan)}"


def _status_error(status: int) -> str:
    if status == 401:
        return "HTTP 401: the server refused the token"
    if status == 403:
        return "HTTP 403: the token's user may not do this (upload needs the upload permission)"
    return f"HTTP {status}"


def _cover(rt: Runtime, path: str | None) -> Cover | None:
    if not path:
        return None
    try:
        return as_jpeg(load_cover(b"".join(rt.storage.open_range(path, None, None).body)))
    except (StoredFileMissing, CoverError):
        return None


@dataclass(frozen=True)
class _Body:
    """A request body as pieces (bytes, or a file sent a block at a time) and its content type."""

    pieces: Sequence[bytes | Path]
    content_type: str | None

    @property
    def length(self) -> int:
        return sum(p.stat().st_size if isinstance(p, Path) else len(p) for p in self.pieces)

    def blocks(self) -> Iterator[bytes]:
        for piece in self.pieces:
            if isinstance(piece, bytes):
                yield piece
                continue
            with open(piece, "rb") as f:
                while block := f.read(BLOCK_BYTES):
                    yield block


def _multipart(fields: dict[str, str], files: Sequence[tuple[str, str, bytes | Path]]) -> _Body:
    """multipart/form-data as a browser's FormData sends it (UTF-8 names and values): the fields, then
    the files as parts ``0``, ``1``, ... (Audiobookshelf ignores the part names and keeps the file names).
    Every value and file name here is a cleaned path component or an id: no CR, LF or quote."""
    boundary = f"----tome{secrets.token_hex(16)}"
    pieces: list[bytes | Path] = []
    for name, value in fields.items():
        pieces.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        )
    for index, (filename, content_type, content) in enumerate(files):
        head = (
            f"--{boundary}\r\nContent-Disposition: form-data; "
            f'name="{index}"; filename="{filename}"\r\nContent-Type: {content_type}\r\n\r\n'
        )
        pieces += [head.encode(), content, b"\r\n"]
    pieces.append(f"--{boundary}--\r\n".encode())
    return _Body(pieces, f"multipart/form-data; boundary={boundary}")


def _call(rt: Runtime, work: _Work, path: str, body: _Body, deadline: float, resolver: Resolver) -> int:
    """POST ``body`` to the server's ``path`` with the bearer token; the answer's status. Failures that
    may pass (timeouts, connections) raise a retryable :class:`_Ended`; a refused URL one that is not."""
    settings = rt.settings
    timeout = settings.audiobookshelf.timeout_seconds
    try:
        connection, base = open_connection(
            work.url,
            settings.audiobookshelf.allow_private,
            settings.webhooks.port_set,
            timeout=timeout,
            resolver=resolver,
        )
    except WebhookRefused as exc:
        raise _Ended(f"refused: {exc.reason}") from exc
    try:
        return _send(connection, base.rstrip("/") + path, work.token, body, deadline, timeout)
    except TimeoutError as exc:
        raise _Ended("timed out", retry=True) from exc
    except ssl.SSLError as exc:
        raise _Ended("TLS failed", retry=True) from exc
    except http.client.HTTPException as exc:
        raise _Ended("invalid response", retry=True) from exc
    except OSError as exc:
        raise _Ended("connection failed", retry=True) from exc
    finally:
        connection.close()


def _send(
    connection: http.client.HTTPConnection,
    path: str,
    token: str,
    body: _Body,
    deadline: float,
    timeout: float,
) -> int:
    def budget() -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the upload took longer than TOME_AUDIOBOOKSHELF_UPLOAD_SECONDS")
        if connection.sock is not None:
            connection.sock.settimeout(min(timeout, left))

    connection.putrequest("POST", path, skip_accept_encoding=True)
    if body.content_type is not None:
        connection.putheader("Content-Type", body.content_type)
    for name, value in (
        ("Authorization", f"Bearer {token}"),
        ("Content-Length", str(body.length)),
        ("User-Agent", "Tome-Delivery/1"),
        ("Connection", "close"),
    ):
        connection.putheader(name, value)
    budget()
    connection.endheaders()
    for block in body.blocks():
        budget()
        connection.send(block)
    budget()
    response = connection.getresponse()
    response.read(_RESPONSE_BYTES)
    return response.status

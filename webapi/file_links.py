"""Short-lived signed URLs for a job's files, for clients that cannot send the API key: an ``<audio>``
element streams the book with Range requests from such a URL, no key attached.

``POST /v1/jobs/{id}/files/{name}/link`` (with the key, owner-checked as the download is) answers
``{"url", "expires_at"}``; ``GET`` of that URL serves the file exactly as ``GET /v1/jobs/{id}/files/{name}``
does (Range, ETag, 416; on S3 the same proxy or presigned redirect).

As S3's query-string authentication does, the path names the resource (``/v1/links/{job_id}/{name}``) and
the query carries the expiry, the id of the API key that asked for the link and an HMAC-SHA256 signature
over the job, name, expiry, key id and key owner, under a key derived from ``TOME_SECRET_KEY`` for this use
alone. Serving a link checks the expiry (not passed, not further ahead than ``TOME_FILE_LINK_SECONDS``),
the signature (constant-time), that the key is not revoked, then the job as the owner's download would.
The URL is a path of this API: nothing in a request chooses where an answer points (no open redirect).
See docs/api.md, "Signed file links".
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import uuid
from datetime import UTC, datetime

from flask import Blueprint, Response, jsonify, request, url_for
from sqlalchemy import select

from models import ApiKey, Job
from webapi.auth import current_principal, require_key
from webapi.errors import Conflict, Forbidden, NotFound
from webapi.extensions import tome
from webapi.job_files import job_file, send_job_file
from webapi.job_views import owned_job
from webapi.operations import Operation, operation
from webapi.ratelimit import check_rate
from webapi.schemas import FileLinkOut

bp = Blueprint("file_links", __name__, url_prefix="/v1/jobs")
bp.before_request(require_key)
public = Blueprint("file_link_serving", __name__, url_prefix="/v1/links")  # the signature is the key

_PURPOSE = b"tome/file-link/v1"
_SIGNATURE_CHARS = 43  # base64url of 32 bytes, unpadded
_MAX_EXPIRES_DIGITS = 12


def _signing_key(secret: str) -> bytes:
    return hmac.new(secret.encode(), _PURPOSE, hashlib.sha256).digest()


def sign(secret: str, job_id: str, name: str, expires: int, key_id: str, owner: str) -> str:
    """The link's signature (base64url, unpadded) over its fields."""
    fields = (job_id, name, str(expires), key_id, owner)
    message = b"".join(b"%d:%s" % (len(f.encode()), f.encode()) for f in fields)
    digest = hmac.new(_signing_key(secret), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _secret() -> str:
    secret = tome().settings.security.secret_key
    if not secret:
        raise Conflict(
            "signed file links need TOME_SECRET_KEY (at least 32 characters; `make run` makes one): "
            "download with the API key instead",
            code="secret_key_missing",
        )
    return secret


@bp.post("/<job_id>/files/<name>/link")
@operation(
    Operation(
        "A short-lived URL of one of a job's files that needs no API key (for an <audio> element)",
        {200: FileLinkOut, 404: None, 409: None, 410: None},
        tags=("jobs",),
    )
)
def make_link(job_id: str, name: str) -> Response:
    job = owned_job(job_id)
    found = job_file(job, name)  # 404/409/410 as the download answers them
    secret = _secret()
    principal = current_principal()
    expires = int(time.time()) + tome().settings.security.file_link_seconds
    signature = sign(secret, str(job.id), found.name, expires, principal.key_id, principal.owner)
    url = url_for(
        "file_link_serving.open_link",
        job_id=str(job.id),
        name=found.name,
        expires=expires,
        key=principal.key_id,
        signature=signature,
    )
    answer = jsonify(
        FileLinkOut(url=url, expires_at=datetime.fromtimestamp(expires, UTC)).model_dump(mode="json")
    )
    answer.headers["Cache-Control"] = "private, no-store"  # a credential for the link's lifetime
    return answer


def _invalid(what: str) -> Forbidden:
    return Forbidden(
        f"this file link is not valid ({what}); ask for a new one: POST /v1/jobs/{{id}}/files/{{name}}/link",
        code="invalid_link",
    )


def _checked_expiry(raw: str, now: int) -> int:
    if not raw.isascii() or not raw.isdigit() or len(raw) > _MAX_EXPIRES_DIGITS:
        raise _invalid("'expires' must be Unix seconds")
    expires = int(raw)
    if expires <= now:
        at = datetime.fromtimestamp(expires, UTC)
        raise Forbidden(
            f"this file link expired at {at:%Y-%m-%dT%H:%M:%SZ}; ask for a new one: "
            "POST /v1/jobs/{id}/files/{name}/link",
            code="link_expired",
        )
    if expires - now > tome().settings.security.file_link_seconds:
        raise _invalid("it would outlive TOME_FILE_LINK_SECONDS")
    return expires


def _checked_key(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise _invalid("'key' must be the id of an API key") from None


@public.get("/<job_id>/<name>")
@operation(
    Operation(
        "Download a job's file through a signed link (Range requests supported; no API key)",
        {200: None, 206: None, 403: None, 404: None, 409: None, 410: None, 416: None},
        auth=False,
        tags=("jobs",),
        binary="application/octet-stream",
    )
)
def open_link(job_id: str, name: str) -> Response:
    secret = _secret()
    expires = _checked_expiry(request.args.get("expires", ""), int(time.time()))
    key_id = _checked_key(request.args.get("key", ""))
    given = request.args.get("signature", "")
    if len(given) != _SIGNATURE_CHARS or not given.isascii():
        raise _invalid("'signature' is missing or malformed")
    sessions = tome().sessions
    key = sessions.get(ApiKey, key_id)
    owner = key.owner if key is not None else ""
    expected = sign(secret, job_id, name, expires, str(key_id), owner)
    if not hmac.compare_digest(expected.encode(), given.encode()) or key is None:
        raise _invalid("the signature does not match")
    if key.revoked_at is not None:
        raise Forbidden("the API key that made this file link was revoked", code="link_revoked")
    check_rate(str(key_id))  # the key's budget, as its own downloads count
    job = sessions.scalars(select(Job).where(Job.id == uuid.UUID(job_id), Job.owner == owner)).first()
    if job is None:
        raise NotFound(f"job {job_id} not found")
    response = send_job_file(job_file(job, name))
    response.headers["Referrer-Policy"] = "no-referrer"
    return response

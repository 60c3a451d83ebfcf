"""Completion webhooks: signed with the submitting key's secret, delivered at least once, retried with
exponential backoff, never sent to private, loopback or link-local addresses (unless configured), and
never following redirects (every hop would need the same check). No Flask or Celery imports."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import socket
import time
import urllib.error
import urllib.request
import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import and_, or_, select, update
from sqlalchemy.engine import CursorResult

from models import TERMINAL, ApiKey, Job, unit_of_work, utcnow
from worker.runtime import Runtime

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Tome-Signature"
TIMEOUT_SECONDS = 10.0
CLAIM = timedelta(seconds=60)


class WebhookRefused(ValueError):
    """The URL is not one Tome will call (scheme, host, or an address it may not reach)."""


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>``; receivers recompute and compare."""
    digest = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify(secret: str, body: bytes, header: str, tolerance_s: int = 300, now: float | None = None) -> bool:
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((now or time.time()) - timestamp) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, body, timestamp), header)


def check_url(url: str, allow_private: bool) -> None:
    """Refuse anything but http(s) to a public address (all resolved addresses are checked)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookRefused("webhook_url must be an http or https URL with a host")
    if parts.username or parts.password:
        raise WebhookRefused("webhook_url must not carry credentials")
    if allow_private:
        return
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or 443, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise WebhookRefused(f"webhook host {parts.hostname!r} does not resolve") from exc
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global:
            raise WebhookRefused(f"webhook host {parts.hostname!r} resolves to a non-public address")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def payload(job: Job) -> dict[str, Any]:
    return {
        "event": f"job.{job.status}",
        "job": {
            "id": str(job.id),
            "status": job.status,
            "title": job.title,
            "error": job.error,
            "output": {
                "format": job.output_format,
                "duration": job.output_duration,
                "bytes": job.output_bytes,
            },
            "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        },
    }


def backoff(attempts: int) -> timedelta:
    return timedelta(seconds=min(10 * 2 ** max(attempts - 1, 0), 3600))


def due_filter(now: Any, max_attempts: int) -> Any:
    return and_(
        Job.webhook_url.is_not(None),
        Job.webhook_delivered_at.is_(None),
        Job.status.in_([s.value for s in TERMINAL]),
        Job.webhook_attempts < max_attempts,
        or_(Job.webhook_next_at.is_(None), Job.webhook_next_at <= now),
    )


def deliver(rt: Runtime, job_id: uuid.UUID) -> str:
    """Claim the delivery (so two workers don't both send), POST once, record the outcome."""
    settings = rt.settings
    now = utcnow()
    with unit_of_work(rt.sessions) as session:
        claimed = session.execute(
            update(Job)
            .where(Job.id == job_id, due_filter(now, settings.webhook_max_attempts))
            .values(webhook_next_at=now + CLAIM)
        )
        assert isinstance(claimed, CursorResult)
        if claimed.rowcount != 1:
            return "not_due"
        job = session.get(Job, job_id)
        assert job is not None
        assert job.webhook_url
        secret = session.scalar(select(ApiKey.webhook_secret).where(ApiKey.id == job.api_key_id))
        body = json.dumps(payload(job), separators=(",", ":")).encode()
        url, attempts = job.webhook_url, job.webhook_attempts + 1
    error = _post(url, body, secret or "", settings.webhook_allow_private)
    with unit_of_work(rt.sessions) as session:
        values: dict[str, Any] = {"webhook_attempts": attempts, "webhook_error": error}
        if error is None:
            values["webhook_delivered_at"] = utcnow()
        else:
            values["webhook_next_at"] = utcnow() + backoff(attempts)
        session.execute(update(Job).where(Job.id == job_id).values(**values))
    if error:
        log.warning("job %s: webhook attempt %d failed: %s", job_id, attempts, error)
        return "failed"
    log.info("job %s: webhook delivered", job_id)
    return "delivered"


def _post(url: str, body: bytes, secret: str, allow_private: bool) -> str | None:
    try:
        check_url(url, allow_private)
    except WebhookRefused as exc:
        return str(exc)
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("User-Agent", "Tome-Webhook/1")
    request.add_header(SIGNATURE_HEADER, sign(secret, body, int(time.time())))
    opener = urllib.request.build_opener(_NoRedirect())
    try:
        with opener.open(request, timeout=TIMEOUT_SECONDS) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if 200 <= status < 300 else f"HTTP {status}"

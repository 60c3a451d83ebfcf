"""Completion webhooks: signed with the submitting key's secret, delivered at least once, retried with
exponential backoff, and never following redirects (every hop would need the same check). No Flask or
Celery imports.

A webhook URL is http or https with a host and no credentials, whitespace or control characters; its port
is the scheme's default, 80 or 443 (``allowed_ports`` widens that; ``allow_private`` allows any port). Its
host must resolve to globally routable unicast addresses only, and any IPv4 address an IPv6 address carries
(IPv4-mapped or -compatible, NAT64, 6to4, Teredo) must be one too; ``allow_private`` (tests, LANs) lifts
the address rule, nothing else.

Delivery resolves the host once, checks every address, and connects to a checked one itself (the Host
header and the TLS server name stay the URL's host), so a DNS answer that changes after the check (DNS
rebinding) is never used. Each attempt is counted when it is claimed, and a failure is recorded on the job
in generic words ("HTTP 503", "timed out", "connection failed"); the remote's own words go to the log only.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import ipaddress
import json
import logging
import re
import socket
import ssl
import time
import unicodedata
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Any
from urllib.parse import quote, urlsplit

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from models import TERMINAL, ApiKey, ChapterStatus, Chunk, Job, JobChapter, JobStatus, unit_of_work, utcnow
from worker.jobs import state
from worker.runtime import Runtime

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Tome-Signature"
TIMEOUT_SECONDS = 10.0  # to connect, and for each read or write
MAX_CONNECT_ADDRESSES = 3
CLAIM = timedelta(seconds=60)
FLAGGED_EVENT = "job.flagged"
MAX_FLAGGED_LISTED = 100  # chunks named in one job.flagged event; the QA report lists them all
DEFAULT_PORTS = frozenset({80, 443})
SCHEME_PORTS = {"http": 80, "https": 443}

IPAddress = IPv4Address | IPv6Address
# (host, port) -> the addresses it resolves to; ``resolve`` (the system resolver) unless a test injects one.
Resolver = Callable[[str, int], Sequence[str]]

# Special-purpose ranges (IANA registries), refused whatever ``is_global`` says: it lets some through.
_V4_REFUSED = tuple(
    IPv4Network(n)
    for n in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",
        "100.64.0.0/10",  # shared address space (carrier-grade NAT)
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation (TEST-NET-1)
        "192.88.99.0/24",  # 6to4 relay anycast
        "192.168.0.0/16",
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation (TEST-NET-2)
        "203.0.113.0/24",  # documentation (TEST-NET-3)
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the broadcast address
    )
)
_V6_GLOBAL_UNICAST = IPv6Network("2000::/3")
_V6_REFUSED = tuple(
    IPv6Network(n)
    for n in (
        "2001::/23",  # IETF protocol assignments: Teredo (2001::/32), benchmarking, ORCHID
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation
    )
)
_NAT64 = IPv6Network("64:ff9b::/96")  # the well-known NAT64 prefix: the low 32 bits are the IPv4 address
_PRINTABLE_ASCII = "".join(chr(c) for c in range(0x21, 0x7F))
_NOT_PUBLIC = "webhook_url host must resolve, and only to public addresses"
_NO_PUBLIC = "no public address"
_UNEXPECTED = "delivery failed"
_HOST_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?")


class WebhookRefused(ValueError):
    """The URL is not one Tome will call (scheme, host, port, or an address it may not reach).

    ``reason`` is a short fixed phrase, safe to show in a delivery error."""

    def __init__(self, message: str, reason: str = "invalid URL") -> None:
        super().__init__(message)
        self.reason = reason


def _tome_digest(secret: str, body: bytes, timestamp: int) -> str:
    return hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int, *more_secrets: str) -> str:
    """``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>``, one ``v1`` per secret (during a
    rotation's overlap: the new secret's first, then the old one's); receivers recompute and compare."""
    digests = ",".join(f"v1={_tome_digest(s, body, timestamp)}" for s in (secret, *more_secrets))
    return f"t={timestamp},{digests}"


def verify(secret: str, body: bytes, header: str, tolerance_s: int = 300, now: float | None = None) -> bool:
    """Whether one of the header's ``v1`` signatures is ``secret``'s, within ``tolerance_s`` of now."""
    pairs = [p.split("=", 1) for p in header.split(",") if "=" in p]
    stamps = [value for key, value in pairs if key == "t"]
    try:
        timestamp = int(stamps[0]) if len(stamps) == 1 else None
    except ValueError:
        return False
    if timestamp is None or abs((now or time.time()) - timestamp) > tolerance_s:
        return False
    expected = _tome_digest(secret, body, timestamp)
    return any(hmac.compare_digest(expected, value) for key, value in pairs if key == "v1")


# Standard Webhooks (https://www.standardwebhooks.com): webhook-id, webhook-timestamp and
# webhook-signature = space-separated "v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">". The HMAC key
# is the secret's bytes, which a receiver's library takes as ``whsec_`` + base64 of them
# (:func:`standard_secret`).
STANDARD_SECRET_PREFIX = "whsec_"


def standard_secret(secret: str) -> str:
    """The key's webhook secret in the form Standard Webhooks libraries take: ``whsec_<base64>``."""
    return STANDARD_SECRET_PREFIX + base64.b64encode(secret.encode()).decode("ascii")


def standard_signature(secrets: Sequence[str], message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one ``v1,<base64>`` per secret, space-separated."""
    content = f"{message_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(s.encode(), content, hashlib.sha256).digest()).decode("ascii")
        for s in secrets
    )


def message_id(job_id: uuid.UUID, event: str, revision: int, chapter: int | None = None) -> str:
    """The event's ``webhook-id``: the same for every attempt of one event (receivers dedupe on it), and
    another for another event, chapter or re-render of the job."""
    name = f"{job_id}:{event}:{revision}:{'' if chapter is None else chapter}"
    return f"msg_{uuid.uuid5(uuid.NAMESPACE_URL, 'tome:' + name).hex}"


def signing_secrets(key: ApiKey | None, now: datetime) -> list[str]:
    """The secrets a key's deliveries are signed with: its current one, and the one a rotation replaced
    while its overlap lasts."""
    if key is None:
        return [""]
    found = [key.webhook_secret]
    until = key.webhook_secret_previous_until
    if key.webhook_secret_previous and until is not None and until > now:
        found.append(key.webhook_secret_previous)
    return found


def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to for TCP, in the system resolver's order, without repeats."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def embedded_ipv4(address: IPv6Address) -> list[IPv4Address]:
    """The IPv4 addresses an IPv6 address carries: IPv4-mapped, IPv4-compatible, NAT64, 6to4 and Teredo
    (its server and its client) forms."""
    found: list[IPv4Address] = []
    low32 = IPv4Address(int(address) & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if int(address) >> 32 == 0 or address in _NAT64:
        found.append(low32)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    return found


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is globally routable unicast, and so is every IPv4 address it carries."""
    if isinstance(address, IPv4Address):
        return address.is_global and not address.is_multicast and not any(address in n for n in _V4_REFUSED)
    if address.scope_id:
        return False  # a zone index makes it link-scoped whatever the bits say
    if address.ipv4_mapped is not None:
        return is_public(address.ipv4_mapped)  # a dual-stack socket connects to the IPv4 address itself
    if not all(is_public(inner) for inner in embedded_ipv4(address)):
        return False
    if address in _NAT64:
        return True  # a translator reaches the (public) IPv4 address checked above
    return (
        address in _V6_GLOBAL_UNICAST
        and address.is_global
        and not address.is_reserved
        and not any(address in n for n in _V6_REFUSED)
    )


def port_allowed(scheme: str, port: int, allowed_ports: Collection[int] | None, allow_private: bool) -> bool:
    """The scheme's default port always; otherwise ``allowed_ports``, or when that is None: 80 and 443,
    or any port with ``allow_private``."""
    if not 0 < port < 65536:
        return False
    if port == SCHEME_PORTS[scheme]:
        return True
    if allowed_ports is None:
        return allow_private or port in DEFAULT_PORTS
    return port in allowed_ports


def check_url(
    url: str,
    allow_private: bool,
    *,
    allowed_ports: Collection[int] | None = None,
    resolver: Resolver = resolve,
) -> None:
    """Refuse a URL Tome will not call: its syntax, its port, and (unless ``allow_private``) every address
    its host resolves to now. Delivery checks again, on the addresses it then connects to."""
    target = _Target.parse(url, allowed_ports, allow_private)
    if not allow_private:
        target.addresses(allow_private, resolver)


@dataclass(frozen=True)
class _Target:
    """Where a webhook URL points: scheme, ASCII host (IDNA name or bare IP literal), port, request path."""

    scheme: str
    host: str
    port: int
    path: str

    @classmethod
    def parse(cls, url: str, allowed_ports: Collection[int] | None, allow_private: bool) -> _Target:
        # urlsplit silently drops tabs and newlines, and http.client refuses them later: refuse them now.
        if any(ch.isspace() or unicodedata.category(ch).startswith("C") for ch in url):
            raise WebhookRefused("webhook_url must not contain whitespace or control characters")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise WebhookRefused("webhook_url is not a valid URL") from exc
        if parts.scheme not in SCHEME_PORTS or not parts.hostname:
            raise WebhookRefused("webhook_url must be an http or https URL with a host")
        if "@" in parts.netloc:
            raise WebhookRefused("webhook_url must not carry credentials")
        host = _ascii_host(parts.hostname)
        port = SCHEME_PORTS[parts.scheme] if port is None else port
        if not port_allowed(parts.scheme, port, allowed_ports, allow_private):
            raise WebhookRefused(f"webhook_url port {port} is not allowed", reason="port not allowed")
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(parts.scheme, host, port, quote(path, safe=_PRINTABLE_ASCII))

    def addresses(self, allow_private: bool, resolver: Resolver) -> list[IPAddress]:
        """Resolve the host once; every address must be public unless ``allow_private``."""
        found = _ip_literal(self.host)
        if not found:
            try:
                found = [ipaddress.ip_address(a) for a in resolver(self.host, self.port)]
            except (OSError, UnicodeError, ValueError):
                found = []
        if not found:
            # One message for "does not resolve" and "resolves privately": no probe of internal DNS.
            raise WebhookRefused(_NOT_PUBLIC, reason="host did not resolve" if allow_private else _NO_PUBLIC)
        if not allow_private and not all(is_public(a) for a in found):
            raise WebhookRefused(_NOT_PUBLIC, reason=_NO_PUBLIC)
        return found


def _ip_literal(host: str) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        return []


def _ascii_host(hostname: str) -> str:
    if ":" in hostname:  # an IPv6 literal (urlsplit took it out of its brackets)
        if "%" in hostname:
            raise WebhookRefused("webhook_url must not name a link-local zone")
        try:
            ipaddress.IPv6Address(hostname)
        except ValueError as exc:
            raise WebhookRefused("webhook_url has an invalid IPv6 address") from exc
        return hostname
    try:
        ascii_host = hostname.encode("idna").decode("ascii")
    except UnicodeError as exc:
        raise WebhookRefused("webhook_url host is not a valid host name") from exc
    if len(ascii_host) > 254 or not _HOST_NAME.fullmatch(ascii_host):
        raise WebhookRefused("webhook_url host is not a valid host name")
    return ascii_host


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
            "qa": {
                "chunks_flagged": job.chunks_flagged or 0,
                "chunks_rerendered": job.chunks_rerendered or 0,
            },
            # 0 for the first book; after a re-render on request, which chunk and, if its new take was
            # refused (the chunk kept its previous one), why
            "revision": job.revision or 0,
            "rerender": job.rerender,
        },
    }


def chapter_payload(job: Job, chapter: JobChapter) -> dict[str, Any]:
    """The ``job.chapter_ready`` event: the chapter and its files, each with its download path."""
    build = chapter.build or {}
    return {
        "event": "job.chapter_ready",
        "job": {"id": str(job.id), "status": job.status, "title": job.title},
        "chapter": {
            "index": chapter.chapter,
            "position": chapter.position,
            "title": build.get("title"),
            "duration": chapter.duration,
            "bytes": chapter.bytes,
            "files": [
                {
                    "name": f["name"],
                    "url": f"/v1/jobs/{job.id}/files/{quote(str(f['name']))}",
                    "duration": f.get("duration"),
                    "bytes": f.get("bytes"),
                }
                for f in build.get("files", [])
            ],
        },
    }


def chapter_due_filter(now: Any, max_attempts: int) -> Any:
    """Ready chapters of jobs with a webhook whose event is not delivered yet and is due."""
    with_hook = select(Job.id).where(Job.webhook_url.is_not(None))
    return and_(
        JobChapter.status == ChapterStatus.READY.value,
        JobChapter.webhook_delivered_at.is_(None),
        JobChapter.webhook_attempts < max_attempts,
        or_(JobChapter.webhook_next_at.is_(None), JobChapter.webhook_next_at <= now),
        JobChapter.job_id.in_(with_hook),
    )


def deliver_chapter(rt: Runtime, job_id: uuid.UUID, chapter: int, *, resolver: Resolver = resolve) -> str:
    """As :func:`deliver`, for one chapter's ``job.chapter_ready`` event (its own attempts and backoff)."""

    def event(session: Session, job: Job) -> tuple[bytes, int, str]:
        row = session.get(JobChapter, (job_id, chapter))
        assert row is not None
        body = json.dumps(chapter_payload(job, row), separators=(",", ":")).encode()
        return body, row.webhook_attempts, message_id(job_id, "job.chapter_ready", job.revision, chapter)

    def claim(session: Session) -> bool:
        due = chapter_due_filter(utcnow(), rt.settings.webhooks.max_attempts)
        return state.claim_chapter_webhook(session, job_id, chapter, due, utcnow() + CLAIM)

    def outcome(session: Session, error: str | None, attempts: int) -> None:
        state.record_chapter_webhook(session, job_id, chapter, error, _retry_at(attempts))

    return _deliver_claimed(rt, job_id, f"chapter {chapter} webhook", claim, event, outcome, resolver)


def flagged_payload(job: Job, flagged: Sequence[Chunk]) -> dict[str, Any]:
    """The ``job.flagged`` event: a job that succeeded with chunks kept although they failed QA (its
    policy flags rather than fails), the first of them with why and where to listen to each."""
    base = f"/v1/jobs/{job.id}"
    return {
        "event": FLAGGED_EVENT,
        "job": {"id": str(job.id), "status": job.status, "title": job.title, "revision": job.revision or 0},
        "qa": {
            "chunks_flagged": job.chunks_flagged or 0,
            "url": f"{base}/qa?flagged=true",
            "chunks": [
                {
                    "seq": c.seq,
                    "chapter": c.chapter,
                    "reasons": [str(r) for r in (c.qa or {}).get("reasons", [])],
                    "audio_url": f"{base}/chunks/{c.seq}/audio",
                }
                for c in flagged
            ],
        },
    }


def flags_due_filter(now: Any, max_attempts: int) -> Any:
    """Succeeded jobs with flagged chunks and a webhook whose end event is delivered (so the receiver hears
    ``job.succeeded`` first) and whose ``job.flagged`` event is not yet, and is due."""
    return and_(
        Job.webhook_url.is_not(None),
        Job.status == JobStatus.SUCCEEDED.value,
        Job.chunks_flagged > 0,
        Job.webhook_delivered_at.is_not(None),
        Job.flags_webhook_delivered_at.is_(None),
        Job.flags_webhook_attempts < max_attempts,
        or_(Job.flags_webhook_next_at.is_(None), Job.flags_webhook_next_at <= now),
    )


def deliver_flags(rt: Runtime, job_id: uuid.UUID, *, resolver: Resolver = resolve) -> str:
    """As :func:`deliver`, for the ``job.flagged`` event (its own attempts and backoff)."""

    def event(session: Session, job: Job) -> tuple[bytes, int, str]:
        flagged = session.scalars(
            select(Chunk)
            .where(Chunk.job_id == job_id, Chunk.flagged.is_(True))
            .order_by(Chunk.seq)
            .limit(MAX_FLAGGED_LISTED)
        ).all()
        body = json.dumps(flagged_payload(job, flagged), separators=(",", ":")).encode()
        return body, job.flags_webhook_attempts, message_id(job_id, FLAGGED_EVENT, job.revision)

    due = flags_due_filter(utcnow(), rt.settings.webhooks.max_attempts)
    claim, outcome = _job_event(job_id, state.FLAGGED_EVENT, due)
    return _deliver_claimed(rt, job_id, "flagged webhook", claim, event, outcome, resolver)


DELIVERED_EVENT = "job.delivered"
DELIVERY_FAILED_EVENT = "job.delivery_failed"


def delivery_out(job: Job) -> dict[str, Any] | None:
    """The job's ``delivery``: ``{"audiobookshelf": {"state", "attempts", "error"}}``, or None when the
    job asked for none."""
    if job.abs_state is None:
        return None
    if job.abs_state == "pending" and job.status in (JobStatus.FAILED, JobStatus.CANCELLED):
        # never attempted: there is no book to deliver
        return {"audiobookshelf": {"state": "failed", "attempts": 0, "error": f"the job {job.status}"}}
    return {"audiobookshelf": {"state": job.abs_state, "attempts": job.abs_attempts, "error": job.abs_error}}


def delivery_payload(job: Job) -> dict[str, Any]:
    """The ``job.delivered`` or ``job.delivery_failed`` event: the job as its end event has it, and its
    ``delivery``."""
    event = DELIVERED_EVENT if job.abs_state == "delivered" else DELIVERY_FAILED_EVENT
    return {"event": event, "job": payload(job)["job"], "delivery": delivery_out(job)}


def delivery_event_due_filter(now: Any, max_attempts: int) -> Any:
    """Jobs with a webhook whose delivery ended (delivered or failed) and whose end event is delivered
    (the receiver hears ``job.succeeded`` first), the delivery event not yet, and due."""
    return and_(
        Job.webhook_url.is_not(None),
        Job.abs_state.in_(("delivered", "failed")),
        Job.webhook_delivered_at.is_not(None),
        Job.delivery_webhook_delivered_at.is_(None),
        Job.delivery_webhook_attempts < max_attempts,
        or_(Job.delivery_webhook_next_at.is_(None), Job.delivery_webhook_next_at <= now),
    )


def deliver_delivery_event(rt: Runtime, job_id: uuid.UUID, *, resolver: Resolver = resolve) -> str:
    """As :func:`deliver`, for the ``job.delivered`` / ``job.delivery_failed`` event (its own attempts)."""

    def event(session: Session, job: Job) -> tuple[bytes, int, str]:
        data = delivery_payload(job)
        body = json.dumps(data, separators=(",", ":")).encode()
        return body, job.delivery_webhook_attempts, message_id(job_id, str(data["event"]), job.revision)

    due = delivery_event_due_filter(utcnow(), rt.settings.webhooks.max_attempts)
    claim, outcome = _job_event(job_id, state.DELIVERY_EVENT, due)
    return _deliver_claimed(rt, job_id, "delivery webhook", claim, event, outcome, resolver)


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


def deliver(rt: Runtime, job_id: uuid.UUID, *, resolver: Resolver = resolve) -> str:
    """Claim the delivery of the job's end event (so two workers don't both send), POST once, record the
    outcome on the job."""

    def event(session: Session, job: Job) -> tuple[bytes, int, str]:
        body = json.dumps(payload(job), separators=(",", ":")).encode()
        return body, job.webhook_attempts, message_id(job_id, f"job.{job.status}", job.revision)

    claim, outcome = _job_event(
        job_id, state.END_EVENT, due_filter(utcnow(), rt.settings.webhooks.max_attempts)
    )
    return _deliver_claimed(rt, job_id, "webhook", claim, event, outcome, resolver)


def _retry_at(attempts: int) -> datetime:
    return utcnow() + backoff(attempts)


Claim = Callable[[Session], bool]
Outcome = Callable[[Session, str | None, int], None]


def _job_event(job_id: uuid.UUID, columns: state.WebhookColumns, due: Any) -> tuple[Claim, Outcome]:
    """How an event carried on the job's row (``columns``) is claimed when ``due``, and its outcome
    recorded."""

    def claim(session: Session) -> bool:
        return state.claim_webhook(session, job_id, columns, due, utcnow() + CLAIM)

    def outcome(session: Session, error: str | None, attempts: int) -> None:
        state.record_webhook(session, job_id, columns, error, _retry_at(attempts))

    return claim, outcome


def _deliver_claimed(
    rt: Runtime,
    job_id: uuid.UUID,
    what: str,
    claim: Claim,
    event: Callable[[Session, Job], tuple[bytes, int, str]],
    outcome: Outcome,
    resolver: Resolver,
) -> str:
    """Run ``claim`` (a conditional UPDATE that matches the event's row only when it is due, and counts
    the attempt), POST the body ``event`` builds in the same transaction, then run
    ``outcome(session, error, attempts)``.

    The claim also pushes the next try CLAIM ahead and counts the attempt in the same write, so two workers
    never both send, and every attempt is counted whatever happens next (an error of any kind, or the
    worker killed mid-POST): retries always end."""
    settings = rt.settings
    with unit_of_work(rt.sessions) as session:
        if not claim(session):
            return "not_due"
        job = session.get(Job, job_id)
        assert job is not None
        assert job.webhook_url
        key = session.get(ApiKey, job.api_key_id) if job.api_key_id is not None else None
        secrets = signing_secrets(key, utcnow())
        body, attempts, msg_id = event(session, job)
        url = job.webhook_url
    error, cause = _attempt(
        url,
        _Message(body, secrets, msg_id),
        settings.webhooks.allow_private,
        settings.webhooks.port_set,
        resolver,
    )
    with unit_of_work(rt.sessions) as session:
        outcome(session, error, attempts)
    if error:
        # The detail (what the remote said) stays here, in the worker log.
        detail = f" ({cause!r})" if cause is not None else ""
        trace = cause if error == _UNEXPECTED else None
        log.warning(
            "job %s: %s attempt %d failed: %s%s", job_id, what, attempts, error, detail, exc_info=trace
        )
        return "failed"
    log.info("job %s: %s delivered", job_id, what)
    return "delivered"


class PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to one of ``addresses`` (resolved and checked already) instead of resolving ``host`` again,
    so a DNS answer that changes after the check is never used; ``host`` still names the server in the
    Host header."""

    def __init__(self, host: str, port: int, addresses: Sequence[IPAddress], *, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.addresses = tuple(addresses)

    def connect(self) -> None:
        self.sock = _connect(self.addresses, self.port, self.timeout)


class PinnedHTTPSConnection(http.client.HTTPSConnection):
    """As PinnedHTTPConnection, over TLS: the server name sent (SNI) and the name the certificate must hold
    are ``host``, not the address connected to."""

    def __init__(
        self,
        host: str,
        port: int,
        addresses: Sequence[IPAddress],
        *,
        timeout: float,
        context: ssl.SSLContext | None = None,
    ) -> None:
        self.tls = context or ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self.tls)
        self.addresses = tuple(addresses)

    def connect(self) -> None:
        sock = _connect(self.addresses, self.port, self.timeout)
        try:
            self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise


def open_connection(
    url: str,
    allow_private: bool,
    allowed_ports: Collection[int] | None,
    *,
    timeout: float,
    resolver: Resolver = resolve,
) -> tuple[http.client.HTTPConnection, str]:
    """A connection (not yet opened) to ``url``'s host under the webhook address rules, pinned to the
    addresses resolved and checked now, and ``url``'s path; :class:`WebhookRefused` if Tome may not call
    it. For other outgoing calls that follow these rules (an Audiobookshelf server)."""
    target = _Target.parse(url, allowed_ports, allow_private)
    addresses = target.addresses(allow_private, resolver)
    connection: http.client.HTTPConnection
    if target.scheme == "https":
        connection = PinnedHTTPSConnection(target.host, target.port, addresses, timeout=timeout)
    else:
        connection = PinnedHTTPConnection(target.host, target.port, addresses, timeout=timeout)
    return connection, target.path


def _connect(addresses: Sequence[IPAddress], port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to the first of ``addresses`` that answers (only the first few are tried: a host
    with many silent addresses must not hold a worker for minutes)."""
    error = OSError("no address to connect to")
    for address in addresses[:MAX_CONNECT_ADDRESSES]:
        try:
            return socket.create_connection((str(address), port), timeout)
        except OSError as exc:
            error = exc
    raise error


@dataclass(frozen=True)
class _Message:
    """What one attempt sends: the body, the secrets it is signed with (current first), its webhook-id."""

    body: bytes
    secrets: Sequence[str]
    id: str

    def headers(self, now: int) -> dict[str, str]:
        return {
            SIGNATURE_HEADER: sign(self.secrets[0], self.body, now, *self.secrets[1:]),
            "webhook-id": self.id,
            "webhook-timestamp": str(now),
            "webhook-signature": standard_signature(self.secrets, self.id, now, self.body),
        }


def _attempt(
    url: str,
    message: _Message,
    allow_private: bool,
    allowed_ports: Collection[int] | None,
    resolver: Resolver,
) -> tuple[str | None, BaseException | None]:
    """POST once: resolve the host once, check every address, connect to a checked one. Returns None on a
    2xx answer, else a generic error for the job (the status code, or what kind of failure, never the
    remote's words: a webhook must not work as a port or banner probe), with the exception for the log."""
    try:
        target = _Target.parse(url, allowed_ports, allow_private)
        addresses = target.addresses(allow_private, resolver)
        status = _send(target, addresses, message)
    except WebhookRefused as exc:
        return f"refused: {exc.reason}", exc
    except TimeoutError as exc:
        return "timed out", exc
    except ssl.SSLError as exc:  # certificate verification failures included
        return "TLS failed", exc
    except http.client.HTTPException as exc:
        return "invalid response", exc
    except OSError as exc:
        return "connection failed", exc
    except Exception as exc:  # still a failed attempt (counted, retried later), never a stuck delivery
        return _UNEXPECTED, exc
    return (None, None) if 200 <= status < 300 else (f"HTTP {status}", None)


def _send(target: _Target, addresses: Sequence[IPAddress], message: _Message) -> int:
    """POST ``body`` to ``target`` through ``addresses``; the answer's status (redirects are not followed)."""
    connection: http.client.HTTPConnection
    if target.scheme == "https":
        connection = PinnedHTTPSConnection(target.host, target.port, addresses, timeout=TIMEOUT_SECONDS)
    else:
        connection = PinnedHTTPConnection(target.host, target.port, addresses, timeout=TIMEOUT_SECONDS)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Tome-Webhook/1",
        "Connection": "close",
        **message.headers(int(time.time())),
    }
    try:
        connection.request("POST", target.path, body=message.body, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()

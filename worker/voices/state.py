"""Every change of a voice's speaker-prompt cache state, each a conditional UPDATE (compare-and-set).

The one answer to "where does ``cache_status`` change" (as :mod:`worker.jobs.state` is for jobs and
chunks); the transitions are drawn in docs/how-it-works.md, "The speaker-prompt cache". A pending voice
waits until :mod:`worker.voices.builds` has room for its build and marks it sent (``cache_sent_until``); a
lost message counts as waiting again once that time passes. Only one build per voice runs at a time:
``claim_build`` takes a lease and a build token, and only its holder may publish or fail the build;
publishing re-checks the voice, so one deleted or re-uploaded meanwhile keeps its new state."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import and_, literal, or_, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from models import CacheStatus, Voice, utcnow
from worker.qa.reference import TRANSCRIPT_CODES, without


class BuildOutcome(StrEnum):
    BUILT = "built"
    ALREADY_READY = "already_ready"
    BUSY = "busy"  # another process holds the build lease
    GONE = "gone"  # the voice was deleted
    DISCARDED = "discarded"  # the voice changed during the build; the result was thrown away
    FAILED = "failed"


@dataclass(frozen=True)
class BuildClaim:
    """What a build saw when it took the lease: the prompt it publishes must still match this."""

    voice_id: uuid.UUID
    token: str
    key: str
    audio_path: str
    audio_sha256: str
    ref_text: str


def _rows(result: object) -> int:
    assert isinstance(result, CursorResult)
    return int(result.rowcount)


def _live() -> ColumnElement[bool]:
    return Voice.deleted_at.is_(None)


def is_current(voice: Voice, key: str) -> bool:
    """The voice has a ready prompt for ``key`` (the engine, recording and transcript it was built for)."""
    return voice.cache_status == CacheStatus.READY and voice.cache_key == key


def claim_build(
    session: Session, voice: Voice, key: str, *, force: bool, lease: timedelta, now: datetime
) -> BuildClaim | BuildOutcome:
    """pending | failed | stale, processing on an expired lease, or ready for another key (or forced)
    -> processing, under a new build token; otherwise say why not."""
    if not force and is_current(voice, key):
        return BuildOutcome.ALREADY_READY
    token = uuid.uuid4().hex
    claimable = or_(
        Voice.cache_status.in_([CacheStatus.PENDING, CacheStatus.FAILED, CacheStatus.STALE]),
        and_(Voice.cache_status == CacheStatus.PROCESSING, Voice.cache_lease_until < now),
        and_(Voice.cache_status == CacheStatus.READY, or_(Voice.cache_key != key, literal(force))),
    )
    result = session.execute(
        update(Voice)
        .where(
            Voice.id == voice.id,
            _live(),
            Voice.audio_sha256 == voice.audio_sha256,
            Voice.ref_text == voice.ref_text,
            claimable,
        )
        .values(
            cache_status=CacheStatus.PROCESSING,
            cache_lease_until=now + lease,
            cache_build_token=token,
            cache_error=None,
            cache_sent_until=None,
        )
    )
    if _rows(result) != 1:
        return BuildOutcome.BUSY
    return BuildClaim(voice.id, token, key, voice.audio_path, voice.audio_sha256, voice.ref_text)


def publish_build(
    session: Session,
    claim: BuildClaim,
    engine_label: str,
    path: str,
    transcript_warnings: Sequence[dict[str, Any]] | None = None,
) -> bool:
    """processing -> ready, if the claim still holds and the voice is still the one that was encoded.

    ``transcript_warnings`` (None: not checked) replace the voice's earlier transcript warnings; its
    upload's signal warnings stay. Any change of the recording, transcript or language resets the voice
    to pending, so the conditional UPDATE also keeps a stale check from being published."""
    values: dict[str, Any] = {}
    if transcript_warnings is not None:
        current = session.scalar(select(Voice.warnings).where(Voice.id == claim.voice_id)) or []
        values["warnings"] = without(current, TRANSCRIPT_CODES) + [dict(w) for w in transcript_warnings]
    result = session.execute(
        update(Voice)
        .where(
            Voice.id == claim.voice_id,
            _live(),
            Voice.cache_status == CacheStatus.PROCESSING,
            Voice.cache_build_token == claim.token,
            Voice.audio_sha256 == claim.audio_sha256,
            Voice.ref_text == claim.ref_text,
        )
        .values(
            cache_status=CacheStatus.READY,
            cache_key=claim.key,
            cache_engine=engine_label,
            cache_path=path,
            cache_error=None,
            cache_lease_until=None,
            cache_built_at=utcnow(),
            **values,
        )
    )
    return _rows(result) == 1


def fail_build(session: Session, claim: BuildClaim, reason: str) -> bool:
    """processing -> failed, if the claim still holds."""
    result = session.execute(
        update(Voice)
        .where(
            Voice.id == claim.voice_id,
            Voice.cache_status == CacheStatus.PROCESSING,
            Voice.cache_build_token == claim.token,
        )
        .values(cache_status=CacheStatus.FAILED, cache_error=reason, cache_lease_until=None)
    )
    return _rows(result) == 1


def release_build(session: Session, claim: BuildClaim) -> bool:
    """processing -> pending, if the claim still holds: its worker stops before the build ended (another
    one may claim it at once instead of after the lease)."""
    result = session.execute(
        update(Voice)
        .where(
            Voice.id == claim.voice_id,
            Voice.cache_status == CacheStatus.PROCESSING,
            Voice.cache_build_token == claim.token,
        )
        .values(cache_status=CacheStatus.PENDING, cache_lease_until=None)
    )
    return _rows(result) == 1


def request_build(session: Session, voice: Voice, key: str, *, force: bool) -> bool:
    """ready | failed | stale -> pending (an admin's rebuild). False if a build is already pending or
    running, or the ready prompt is current and ``force`` is not set."""
    if is_current(voice, key) and not force:
        return False
    result = session.execute(
        update(Voice)
        .where(
            Voice.id == voice.id,
            _live(),
            Voice.cache_status.in_([CacheStatus.READY, CacheStatus.FAILED, CacheStatus.STALE]),
        )
        .values(cache_status=CacheStatus.PENDING, cache_error=None, cache_sent_until=None)
    )
    return _rows(result) == 1


def reset_for_new_reference(voice: Voice) -> None:
    """Any state -> pending, on the voice's own row: its recording or transcript was replaced. A build
    still running for the old one will find the voice changed and discard its result."""
    voice.cache_status = CacheStatus.PENDING.value
    voice.cache_error = None
    voice.cache_lease_until = None
    voice.cache_sent_until = None


def publish_now(voice: Voice, *, key: str, engine: str, path: str, now: datetime) -> None:
    """Any state -> ready, on the voice's own row, with no build: a prompt written on the request path (an
    embedding voice's prompt is the embedding itself)."""
    voice.cache_status = CacheStatus.READY.value
    voice.cache_key = key
    voice.cache_engine = engine
    voice.cache_path = path
    voice.cache_built_at = now


def mark_stale(session: Session, voice_id: uuid.UUID, key: str | None, error: str | None = None) -> bool:
    """ready (with prompt ``key``) -> stale: the engine changed, or the prompt file is damaged."""
    values: dict[str, object] = {"cache_status": CacheStatus.STALE}
    if error is not None:
        values["cache_error"] = error
    result = session.execute(
        update(Voice)
        .where(Voice.id == voice_id, Voice.cache_key == key, Voice.cache_status == CacheStatus.READY)
        .values(**values)
    )
    return _rows(result) == 1


# -- what the sweeper changes, for every voice at once ---------------------------------------------------


def mark_outdated_stale(session: Session, engine_name: str, engine_version: str) -> int:
    """ready -> stale for every prompt built by another engine or engine version."""
    prefix = f"{engine_name}/{engine_version}/"
    result = session.execute(
        update(Voice)
        .where(
            _live(),
            Voice.cache_status == CacheStatus.READY,
            ~Voice.cache_key.startswith(prefix, autoescape=True),
        )
        .values(cache_status=CacheStatus.STALE)
    )
    return _rows(result)


def expire_build_leases(session: Session, now: datetime) -> int:
    """processing on an expired lease (its worker died) -> pending."""
    result = session.execute(
        update(Voice)
        .where(_live(), Voice.cache_status == CacheStatus.PROCESSING, Voice.cache_lease_until < now)
        .values(cache_status=CacheStatus.PENDING, cache_lease_until=None)
    )
    return _rows(result)


def wake_needed_stale(session: Session, needed: object) -> int:
    """stale -> pending for the voices in ``needed`` (a subquery of voice ids unfinished jobs use)."""
    result = session.execute(
        update(Voice)
        .where(_live(), Voice.cache_status == CacheStatus.STALE, Voice.id.in_(needed))  # type: ignore[arg-type]
        .values(cache_status=CacheStatus.PENDING)
    )
    return _rows(result)


def wake_stale(session: Session, voice_ids: Sequence[uuid.UUID]) -> int:
    """stale -> pending for ``voice_ids``: a job that needs them asked for their builds."""
    if not voice_ids:
        return 0
    result = session.execute(
        update(Voice)
        .where(_live(), Voice.cache_status == CacheStatus.STALE, Voice.id.in_(list(voice_ids)))
        .values(cache_status=CacheStatus.PENDING, cache_sent_until=None)
    )
    return _rows(result)


def unsent(now: datetime) -> ColumnElement[bool]:
    """A pending voice whose build waits to be sent: never sent, or its message counts as lost."""
    return and_(
        _live(),
        Voice.cache_status == CacheStatus.PENDING,
        or_(Voice.cache_sent_until.is_(None), Voice.cache_sent_until < now),
    )


def sent(now: datetime) -> ColumnElement[bool]:
    """A pending voice whose build message was sent and counts as still on its way."""
    return and_(_live(), Voice.cache_status == CacheStatus.PENDING, Voice.cache_sent_until >= now)


def building(now: datetime) -> ColumnElement[bool]:
    """A voice whose build is in flight: sent and not yet taken, or taken under a live lease."""
    return and_(
        _live(),
        or_(
            and_(Voice.cache_status == CacheStatus.PENDING, Voice.cache_sent_until >= now),
            and_(Voice.cache_status == CacheStatus.PROCESSING, Voice.cache_lease_until >= now),
        ),
    )


def unended(now: datetime) -> ColumnElement[bool]:
    """A voice whose build is waiting (pending, sent or not) or in flight (taken under a live lease)."""
    return and_(
        _live(),
        or_(
            Voice.cache_status == CacheStatus.PENDING,
            and_(Voice.cache_status == CacheStatus.PROCESSING, Voice.cache_lease_until >= now),
        ),
    )


def mark_sent(session: Session, voice_id: uuid.UUID, until: datetime, now: datetime) -> bool:
    """pending, unsent (or sent before and lost) -> pending, sent until ``until``. False if another
    process sent it first or the voice changed state: then its build is not sent again."""
    result = session.execute(
        update(Voice)
        .where(
            Voice.id == voice_id,
            _live(),
            Voice.cache_status == CacheStatus.PENDING,
            or_(Voice.cache_sent_until.is_(None), Voice.cache_sent_until < now),
        )
        .values(cache_sent_until=until)
    )
    return _rows(result) == 1

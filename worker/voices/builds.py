"""Which voice prompt builds go to the workers next: a bounded number in flight, shared out fairly between
owners, within their build quota.

A build holds a worker process while its engine encodes the reference, so a pending voice waits in the
database until there is room: at most ``TOME_VOICE_BUILDS_IN_FLIGHT`` builds sent and not yet ended, at
most ``TOME_VOICE_BUILDS_PER_OWNER`` of them one owner's. Each free slot goes to the owner with the fewest
builds in flight per unit of key priority (its live keys' highest, as book chunks are weighed in
worker.jobs.scheduler), among equals to the one whose builds took the least worker time in the last hour
per unit of priority, then to the one waiting longest; within an owner, its oldest voice first. An owner
whose builds that ran and those in flight (estimated, worker.jobs.usage) reach its build quota gets none.
:func:`send_builds` runs on upload, on a rebuild, when a build ends and in every sweep; a voice is marked
sent by a conditional UPDATE before its message goes, so no build is sent twice (two senders at once can
overshoot the bound by one each). See docs/limits.md, "Voice builds and reference uploads".
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models import ApiKey, Voice, VoiceBuild, unit_of_work, utcnow
from worker.config import Settings
from worker.jobs import usage
from worker.jobs.usage import Quotas
from worker.runtime import Runtime
from worker.task_names import BUILD_VOICE, Enqueue
from worker.voices import state
from worker.voices.prompts import ensure_ready

log = logging.getLogger(__name__)

RECENT = timedelta(hours=1)  # the worker time owners take turns by
POLL_SECONDS = 0.2  # how often a speech request waiting for a build looks at its voice


def request_builds(rt: Runtime, voice_ids: Sequence[uuid.UUID], enqueue: Enqueue) -> int:
    """Voices a job needs and that have no current prompt: a stale one becomes pending, then the builds
    with room are sent. A needed voice whose build was sent before and is not yet taken gets its message
    again (the broker's copy may be lost; a duplicate finds the build taken and does nothing): it counts
    in flight already, so this adds no build. Returns how many builds were sent (any owner's)."""
    wanted = sorted(set(voice_ids))
    with unit_of_work(rt.sessions) as session:
        state.wake_stale(session, wanted)
    sent = _send(rt, enqueue)
    with rt.sessions() as session:
        again = list(session.scalars(select(Voice.id).where(state.sent(utcnow()), Voice.id.in_(wanted))))
    for voice_id in again:
        if voice_id not in sent:
            enqueue(BUILD_VOICE, [str(voice_id)])
    return len(sent)


def send_builds(rt: Runtime, enqueue: Enqueue) -> int:
    """Send waiting builds while there is room; returns how many were sent."""
    return len(_send(rt, enqueue))


@dataclass
class _Room:
    """What one sending round knows of the owners with a build waiting."""

    in_flight: dict[str, int]
    first_wait: dict[str, datetime]  # since when each owner has a build waiting
    recent: dict[str, float]  # worker seconds of its builds in the last hour
    weight: dict[str, int]
    # Its oldest waiting voices (id, seconds of reference), and the build quota's worker seconds left
    # after the builds that ran and those in flight (estimated), read when the owner is first chosen.
    waiting: dict[str, deque[tuple[uuid.UUID, float]]] = field(default_factory=dict)
    headroom: dict[str, float] = field(default_factory=dict)

    def next_owner(self, per_owner: int) -> str | None:
        owners = [
            o
            for o in self.first_wait
            if self.in_flight[o] < per_owner and (o not in self.waiting or self.waiting[o])
        ]
        return min(
            owners,
            key=lambda o: (
                self.in_flight[o] / self.weight[o],
                self.recent[o] / self.weight[o],
                self.first_wait[o],
                o,
            ),
            default=None,
        )


def _room(session: Session, now: datetime) -> _Room:
    in_flight: dict[str, int] = defaultdict(
        int,
        session.execute(
            select(Voice.owner, func.count(Voice.id)).where(state.building(now)).group_by(Voice.owner)
        ).all(),
    )
    # Every owner with a build waiting, and since when (one row an owner, however many they wait).
    first_wait = dict(
        session.execute(
            select(Voice.owner, func.min(Voice.created_at)).where(state.unsent(now)).group_by(Voice.owner)
        ).all()
    )
    recent: dict[str, float] = defaultdict(
        float,
        session.execute(
            select(VoiceBuild.owner, func.sum(VoiceBuild.seconds))
            .where(VoiceBuild.owner.in_(list(first_wait)), VoiceBuild.created_at >= now - RECENT)
            .group_by(VoiceBuild.owner)
        ).all(),
    )
    return _Room(in_flight, first_wait, recent, _weights(session, list(first_wait)))


def _send(rt: Runtime, enqueue: Enqueue) -> list[uuid.UUID]:
    settings = rt.settings
    now = utcnow()
    until = now + timedelta(seconds=settings.voices.build_lease_seconds)
    chosen: list[uuid.UUID] = []
    with unit_of_work(rt.sessions) as session:
        room = _room(session, now)
        estimate = usage.build_estimate(session, now)
        free = settings.voices.builds_in_flight - sum(room.in_flight.values())
        while free > 0:
            owner = room.next_owner(settings.voices.builds_per_owner)
            if owner is None:
                break
            if owner not in room.waiting:
                room.waiting[owner] = _oldest(session, owner, now, settings.voices.builds_per_owner)
                room.headroom[owner] = quota_left(session, owner, now, settings)
                if not room.waiting[owner]:  # another sender took them meanwhile
                    continue
            voice_id, seconds = room.waiting[owner].popleft()
            if room.headroom[owner] <= 0:  # it waits for its builds to leave the quota's window
                log.info("voice builds of %s wait: its build quota is used", owner)
                room.waiting[owner].clear()
            elif state.mark_sent(session, voice_id, until, now):
                chosen.append(voice_id)
                room.in_flight[owner] += 1
                room.headroom[owner] -= seconds * estimate
                free -= 1
    for voice_id in chosen:  # after the commit: a build never finds its voice not yet marked sent
        enqueue(BUILD_VOICE, [str(voice_id)])
    if chosen:
        log.info("voice builds sent: %s", ", ".join(map(str, chosen)))
    return chosen


def _oldest(session: Session, owner: str, now: datetime, count: int) -> deque[tuple[uuid.UUID, float]]:
    """The owner's oldest waiting voices and their references' lengths, at most ``count``."""
    rows = session.execute(
        select(Voice.id, Voice.audio_duration)
        .where(state.unsent(now), Voice.owner == owner)
        .order_by(Voice.created_at, Voice.id)
        .limit(count)
    ).all()
    return deque((voice_id, float(seconds or 0)) for voice_id, seconds in rows)


def quota_left(session: Session, owner: str, now: datetime, settings: Settings) -> float:
    """The build quota's worker seconds the owner has left after the builds that ran in the last 24
    hours and the estimates of those in flight (unlimited without a quota)."""
    limit = Quotas.of(settings).build_seconds_24h
    if not limit:
        return math.inf
    ran = usage.build_seconds_ran(session, owner, now)
    return limit - ran - usage.reserved_build_seconds(session, owner, now, state.building(now))


@dataclass(frozen=True)
class QuotaHold:
    """Why an owner's waiting builds are not sent: its build quota has no room. ``retry_after``: about
    when room comes back (its oldest build of the window leaves it, or its builds in flight end)."""

    code: str
    message: str
    retry_after: int


def quota_hold(session: Session, owner: str, now: datetime, settings: Settings) -> QuotaHold | None:
    """The hold on the owner's waiting builds if its build quota has no room for another, else None."""
    limit = Quotas.of(settings).build_seconds_24h
    if not limit:
        return None
    ran = usage.build_seconds_ran(session, owner, now)
    reserved = usage.reserved_build_seconds(session, owner, now, state.building(now))
    if limit - ran - reserved > 0:
        return None
    oldest = session.scalar(
        select(func.min(VoiceBuild.created_at)).where(
            VoiceBuild.owner == owner, VoiceBuild.created_at >= now - usage.WINDOW
        )
    )
    frees = [s for s in ((oldest + usage.WINDOW - now).total_seconds() if oldest else 0, reserved) if s > 0]
    retry_after = max(1, math.ceil(min(frees))) if frees else 60
    message = (
        f"waiting for a voice prompt build that your build quota holds back: your builds of the last 24 "
        f"hours took {ran:.0f} s of worker time and those in flight are estimated at {reserved:.0f} s; the "
        f"quota is {limit:.0f} s (TOME_QUOTA_BUILD_SECONDS_PER_DAY). The build is sent by itself once "
        f"room comes back (in about {retry_after} s, as older builds leave the 24-hour window or those in "
        "flight end); nothing to resend. Sooner: use a voice that is ready, or ask for a larger quota"
    )
    return QuotaHold("quota_build_seconds_per_day", message, retry_after)


def unsent_of(session: Session, voice_ids: Sequence[uuid.UUID], now: datetime) -> list[uuid.UUID]:
    """Those of ``voice_ids`` whose build waits to be sent (in their order)."""
    if not voice_ids:
        return []
    found = set(session.scalars(select(Voice.id).where(state.unsent(now), Voice.id.in_(list(voice_ids)))))
    return [voice_id for voice_id in voice_ids if voice_id in found]


def _weights(session: Session, owners: list[str]) -> dict[str, int]:
    """Each owner's weight: the highest priority of its live keys (1 without one)."""
    rows = session.execute(
        select(ApiKey.owner, func.max(ApiKey.priority))
        .where(ApiKey.owner.in_(owners), ApiKey.revoked_at.is_(None))
        .group_by(ApiKey.owner)
    ).all()
    found = {owner: max(1, int(priority or 1)) for owner, priority in rows}
    return {owner: found.get(owner, 1) for owner in owners}


@dataclass(frozen=True)
class NotReady:
    """Why a voice a speech request needs has no prompt yet, and when to ask again."""

    retry_after: int  # seconds: about what its build is estimated to take (at least 1)
    quota_used: bool  # its owner's build quota has no room: the build waits for the window to move
    state: str  # its cache status now


def wait_for_prompt(rt: Runtime, voice_id: uuid.UUID, enqueue: Enqueue, seconds: float) -> NotReady | None:
    """None once the voice's prompt is ready, waiting up to ``seconds`` for its build; the build is the
    usual one (:func:`request_builds`: sent within the build bounds and quota, run by a worker), never
    run here. Raises VoiceCacheFailed if the build failed. Holds no database connection while it waits."""
    if ensure_ready(rt, voice_id):
        return None
    with rt.sessions() as session:
        owner = session.scalar(select(Voice.owner).where(Voice.id == voice_id))
        on_its_way = session.scalar(select(Voice.id).where(Voice.id == voice_id, state.building(utcnow())))
        room = quota_left(session, owner or "", utcnow(), rt.settings)
    if on_its_way is None and room <= 0:
        return _not_ready(rt, voice_id, quota_used=True)
    request_builds(rt, [voice_id], enqueue)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        if ensure_ready(rt, voice_id):
            return None
    return _not_ready(rt, voice_id, quota_used=False)


def _not_ready(rt: Runtime, voice_id: uuid.UUID, quota_used: bool) -> NotReady:
    now = utcnow()
    with rt.sessions() as session:
        row = session.execute(
            select(Voice.audio_duration, Voice.cache_status).where(Voice.id == voice_id)
        ).one()
        estimate = float(row.audio_duration or 0) * usage.build_estimate(session, now)
    return NotReady(max(1, math.ceil(estimate)), quota_used, str(row.cache_status))

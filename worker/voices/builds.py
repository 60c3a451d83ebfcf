"""Which voice prompt builds go to the workers next: a bounded number in flight, shared out fairly between
owners.

A build holds a worker process for as long as its engine encodes the reference (a minute for a long
reference on a slow engine), so sending every upload's build at once lets one owner's uploads take every
process while another owner's chunks wait. Instead a pending voice waits in the database until there is
room: at most ``TOME_VOICE_BUILDS_IN_FLIGHT`` builds are sent and not yet ended, at most
``TOME_VOICE_BUILDS_PER_OWNER`` of them one owner's, and each free slot goes to the owner with the fewest
builds in flight, among equals to the one whose builds took the least worker time in the last hour (so
owners take turns), then to the one waiting longest; within an owner, its oldest voice first.
:func:`send_builds` runs when a voice is uploaded or a build is asked for, when a build ends, and in every
sweep; any process may run it at once with another: a voice is marked sent by a conditional UPDATE
before its message goes, so no build is sent twice (two senders can overshoot the bound by one each).
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict, deque
from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import func, select

from models import Voice, VoiceBuild, unit_of_work, utcnow
from worker.runtime import Runtime
from worker.task_names import BUILD_VOICE, Enqueue
from worker.voices import state

log = logging.getLogger(__name__)

RECENT = timedelta(hours=1)  # the worker time owners take turns by


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


def _send(rt: Runtime, enqueue: Enqueue) -> list[uuid.UUID]:
    settings = rt.settings
    now = utcnow()
    until = now + timedelta(seconds=settings.voices.build_lease_seconds)
    chosen: list[uuid.UUID] = []
    with unit_of_work(rt.sessions) as session:
        in_flight: dict[str, int] = defaultdict(
            int,
            session.execute(
                select(Voice.owner, func.count(Voice.id)).where(state.building(now)).group_by(Voice.owner)
            ).all(),
        )
        free = settings.voices.builds_in_flight - sum(in_flight.values())
        if free <= 0:
            return []
        # Every owner with a build waiting, and since when (one row an owner, however many they wait).
        first_wait = dict(
            session.execute(
                select(Voice.owner, func.min(Voice.created_at)).where(state.unsent(now)).group_by(Voice.owner)
            ).all()
        )
        waiting: dict[str, deque[uuid.UUID]] = {}
        recent: dict[str, float] = defaultdict(
            float,
            session.execute(
                select(VoiceBuild.owner, func.sum(VoiceBuild.seconds))
                .where(VoiceBuild.owner.in_(list(first_wait)), VoiceBuild.created_at >= now - RECENT)
                .group_by(VoiceBuild.owner)
            ).all(),
        )
        while free > 0:
            owners = [
                o
                for o in first_wait
                if in_flight[o] < settings.voices.builds_per_owner and (o not in waiting or waiting[o])
            ]
            if not owners:
                break
            owner = min(owners, key=lambda o: (in_flight[o], recent[o], first_wait[o], o))
            if owner not in waiting:  # its oldest waiting voices, as many as it may have in flight
                waiting[owner] = deque(
                    session.scalars(
                        select(Voice.id)
                        .where(state.unsent(now), Voice.owner == owner)
                        .order_by(Voice.created_at, Voice.id)
                        .limit(settings.voices.builds_per_owner)
                    )
                )
                if not waiting[owner]:
                    continue
            voice_id = waiting[owner].popleft()
            if state.mark_sent(session, voice_id, until, now):
                chosen.append(voice_id)
                in_flight[owner] += 1
                free -= 1
    for voice_id in chosen:  # after the commit: a build never finds its voice not yet marked sent
        enqueue(BUILD_VOICE, [str(voice_id)])
    if chosen:
        log.info("voice builds sent: %s", ", ".join(map(str, chosen)))
    return chosen

"""Which chunks go to the render queue next: a bounded number in flight, shared out fairly between owners.

A job's chunks stay in the database until there is room: at most ``TOME_RENDER_TASKS_IN_FLIGHT`` render
tasks' worth of chunks are sent and not yet done (speech chunks included), and each free slot goes to the
owner with the fewest chunks in flight per unit of key priority; within an owner, the oldest running job
first, in chunk order. A chunk is marked sent by a conditional UPDATE before it is sent, so any process
may run :func:`schedule` at once with another and no chunk is sent twice. A chunk whose voice has no
ready prompt waits for the build, whose end runs this again. The first batch of an owner with nothing in
flight and nothing rendered yet goes to the front (:func:`to_front`), so a new owner does not wait for
the backlog that keeps the workers busy. See docs/how-it-works.md, "Fair scheduling between owners"."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from sqlalchemy import and_, func, or_, select, true
from sqlalchemy.orm import Session

from models import ApiKey, CacheStatus, Chunk, ChunkStatus, Job, JobStatus, Voice, unit_of_work, utcnow
from worker.jobs import state
from worker.runtime import Runtime
from worker.task_names import RENDER_CHUNKS, Enqueue

log = logging.getLogger(__name__)

MAX_LOST_RACES = 3  # another scheduler running at once will send what this one could not

_FRONT: ContextVar[bool] = ContextVar("tome_send_to_front", default=False)

_RUNNING = Job.status == JobStatus.RUNNING.value
_IN_FLIGHT = or_(
    Chunk.status == ChunkStatus.RUNNING.value,
    and_(Chunk.status == ChunkStatus.PENDING.value, Chunk.enqueued_at.is_not(None)),
)
_SENDABLE = and_(
    Chunk.status == ChunkStatus.PENDING.value,
    Chunk.enqueued_at.is_(None),
    Chunk.voice_id.in_(select(Voice.id).where(Voice.cache_status == CacheStatus.READY.value)),
)


@dataclass
class Owner:
    name: str
    weight: int
    in_flight: int
    oldest_start: float  # when its oldest running job with work to send started (tie-break)
    rendered: int  # chunks done in its running jobs with work to send

    @property
    def share(self) -> float:
        return self.in_flight / self.weight

    @property
    def new(self) -> bool:
        """Nothing in flight and nothing rendered yet: its next batch goes to the front."""
        return self.in_flight == 0 and self.rendered == 0


def to_front() -> bool:
    """True while :func:`schedule` sends a new owner's first batch: the sender gives that message the
    front priority (worker.tasks; an in-process sender may ignore it, as its queue is its own)."""
    return _FRONT.get()


@contextmanager
def _front(front: bool) -> Iterator[None]:
    token = _FRONT.set(front)
    try:
        yield
    finally:
        _FRONT.reset(token)


def schedule(rt: Runtime, enqueue: Enqueue, max_tasks: int | None = None) -> int:
    """Send render tasks while there is room; returns how many were sent."""
    per_task = rt.settings.tasks.chunks_per_task
    room = rt.settings.tasks.render_tasks_in_flight * per_task
    sent = 0
    with rt.sessions() as session:
        in_flight = _in_flight(session)
        free = room - sum(in_flight.values())
        # The first choice in the same transaction (one round trip and rollback fewer a render task).
        owner = _next_owner(session, in_flight) if free > 0 else None
    lost_races = 0
    while free > 0 and (max_tasks is None or sent < max_tasks) and lost_races < MAX_LOST_RACES:
        if sent or lost_races:
            with rt.sessions() as session:
                owner = _next_owner(session, in_flight)
        if owner is None:
            break
        batch = _take(rt, owner.name, min(per_task, free))
        if batch is None:
            lost_races += 1  # another scheduler took them first; look again
            continue
        job_id, seqs = batch
        with _front(owner.new):
            enqueue(RENDER_CHUNKS, [str(job_id), seqs])
        in_flight[owner.name] = in_flight.get(owner.name, 0) + len(seqs)
        free -= len(seqs)
        sent += 1
    return sent


def take_next(rt: Runtime, count: int, engine: str) -> tuple[uuid.UUID, list[int]] | None:
    """Up to ``count`` sendable chunks of jobs on ``engine``, chosen as :func:`schedule` chooses them (the
    owner with the smallest in-flight share, its oldest running job) and marked sent, for a render task
    to render at once in its running batch (worker.jobs.render); None when there are none. No room check:
    the chunks go to a batch that has a free slot now, not to the queue."""
    for _ in range(MAX_LOST_RACES):
        with rt.sessions() as session:
            owner = _next_owner(session, _in_flight(session), engine)
        if owner is None:
            return None
        taken = _take(rt, owner.name, count, engine)
        if taken is not None:
            return taken
    return None


def sendable(rt: Runtime, engine: str, limit: int) -> int:
    """How many chunks of running jobs on ``engine`` wait to be sent (voice ready), counting up to
    ``limit``: what a render task may expect to pull into its running batch now."""
    with rt.sessions() as session:
        waiting = (
            select(Chunk.id)
            .join(Job, Job.id == Chunk.job_id)
            .where(_RUNNING, Job.engine == engine, _SENDABLE)
            .limit(max(0, limit))
            .subquery()
        )
        return int(session.scalar(select(func.count()).select_from(waiting)) or 0)


def _in_flight(session: Session) -> dict[str, int]:
    return dict(
        session.execute(
            select(Job.owner, func.count(Chunk.id))
            .join(Job, Job.id == Chunk.job_id)
            .where(_RUNNING, _IN_FLIGHT)
            .group_by(Job.owner)
        ).all()
    )


def _next_owner(session: Session, in_flight: dict[str, int], engine: str | None = None) -> Owner | None:
    """The owner with sendable chunks (of jobs on ``engine``, when given) and the smallest in-flight
    share, if any."""
    on_engine = Job.engine == engine if engine is not None else true()
    rows = session.execute(
        select(
            Job.owner,
            func.max(func.coalesce(ApiKey.priority, 1)),
            func.min(Job.started_at),
            func.sum(Job.chunks_done),
        )
        .outerjoin(ApiKey, ApiKey.id == Job.api_key_id)  # a job made without a key weighs 1
        .where(_RUNNING, on_engine, select(Chunk.id).where(Chunk.job_id == Job.id, _SENDABLE).exists())
        .group_by(Job.owner)
    ).all()
    owners = [
        Owner(
            name,
            max(1, int(weight or 1)),
            in_flight.get(name, 0),
            started.timestamp() if started else 0.0,
            int(rendered or 0),
        )
        for name, weight, started, rendered in rows
    ]
    return min(owners, key=lambda o: (o.share, o.oldest_start, o.name), default=None)


def _take(
    rt: Runtime, owner: str, count: int, engine: str | None = None
) -> tuple[uuid.UUID, list[int]] | None:
    """Mark up to ``count`` sendable chunks of the owner's oldest running job with work (on ``engine``,
    when given) as sent (by compare-and-set, committed before they are sent); None if another scheduler
    took them first."""
    now = utcnow()
    on_engine = Job.engine == engine if engine is not None else true()
    with unit_of_work(rt.sessions) as session:
        job_id = session.scalar(
            select(Job.id)
            .where(
                _RUNNING,
                on_engine,
                Job.owner == owner,
                select(Chunk.id).where(Chunk.job_id == Job.id, _SENDABLE).exists(),
            )
            .order_by(Job.started_at, Job.id)
            .limit(1)
        )
        if job_id is None:
            return None
        # SKIP LOCKED (PostgreSQL; SQLite has one writer anyway): a scheduler running at the same time
        # (two render tasks ending together) takes the next chunks instead of losing the race for these
        # and querying again: two of the three transactions a lost race costs.
        candidates = list(
            session.scalars(
                select(Chunk.id)
                .where(Chunk.job_id == job_id, _SENDABLE)
                .order_by(Chunk.seq)
                .limit(count)
                .with_for_update(skip_locked=True, of=Chunk)
            )
        )
        taken = state.take_for_sending(session, candidates, now)
    if not taken:
        return None
    return job_id, sorted(taken)

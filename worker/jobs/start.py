"""Starting a job: queued -> running once every voice its chunks use has a ready prompt.

A job whose voices are not ready stays queued and its task ends: no retry loop through the broker.
When a build of one of those voices ends (built or failed), :func:`wake_jobs_waiting_for` sends the
waiting jobs' start again (and schedules the chunks of running jobs that waited for it). The
sweeper re-sends the start of any job left queued, so a lost wake-up costs a sweep interval, not the job.
"""

from __future__ import annotations

import logging
import uuid
from enum import StrEnum

from sqlalchemy import select

from models import Chunk, Job, JobStatus, unit_of_work, utcnow
from worker import observe
from worker.jobs import actions, state
from worker.jobs.scheduler import schedule
from worker.runtime import Runtime
from worker.task_names import PLAN_JOB, START_JOB, Enqueue
from worker.voices.builds import request_builds
from worker.voices.prompts import VoiceCacheFailed, ensure_ready

log = logging.getLogger(__name__)


class StartOutcome(StrEnum):
    STARTED = "started"
    WAITING = "waiting"  # for a voice's prompt; the build's end sends the start again
    FAILED = "failed"  # a voice's build failed, or the voice was deleted
    SKIPPED = "skipped"  # the job is gone, running already, or has ended


def start_job(rt: Runtime, job_id: uuid.UUID, enqueue: Enqueue) -> StartOutcome:
    """Start the job if its voices are ready, then schedule its chunks (worker.jobs.scheduler).

    The voices are those of the chunks (a script's voice directives), not only the job's own voice, which
    needs no prompt if no chunk uses it. Every voice not ready yet gets a build message (a no-op where a
    build runs or the prompt is ready), so several voices build at once. A voice whose build failed, or
    that was deleted, fails the job with a message naming that voice.
    """
    voices = _voices_of(rt, job_id, enqueue)
    if voices is None:
        return StartOutcome.SKIPPED
    if not voices:
        return StartOutcome.WAITING  # its script is being planned; the plan sends the start
    waiting: list[uuid.UUID] = []
    for voice_id in voices:
        try:
            if not ensure_ready(rt, voice_id):
                waiting.append(voice_id)
        except VoiceCacheFailed as exc:
            actions.fail(rt, job_id, str(exc), enqueue)
            return StartOutcome.FAILED
    if waiting:
        request_builds(rt, waiting, enqueue)
        log.info("waiting for the prompts of %s", ", ".join(map(str, waiting)))
        return StartOutcome.WAITING
    with unit_of_work(rt.sessions) as session:
        moved = state.start_job(session, job_id, utcnow())
    if moved:  # not a redelivered start of a running job
        observe.job_started(rt, job_id)
    sent = schedule(rt, enqueue)
    log.info("started; %d render tasks sent", sent)
    return StartOutcome.STARTED


def _voices_of(rt: Runtime, job_id: uuid.UUID, enqueue: Enqueue) -> list[uuid.UUID] | None:
    """The distinct voices of a startable job's chunks, its own voice first; None if it cannot start,
    none while its script waits to be planned (the plan is asked for again: its message may be lost)."""
    with rt.sessions() as session:
        job = session.get(Job, job_id)
        if job is None or job.status not in (JobStatus.QUEUED, JobStatus.RUNNING):
            return None
        if job.script is not None:
            enqueue(PLAN_JOB, [str(job_id)])
            return []
        used = set(session.scalars(select(Chunk.voice_id).where(Chunk.job_id == job_id).distinct()))
        return sorted(used, key=lambda v: (v != job.voice_id, str(v)))


def wake_jobs_waiting_for(rt: Runtime, voice_id: uuid.UUID, enqueue: Enqueue) -> int:
    """A build of ``voice_id`` has ended: send the start of every queued job that uses the voice, and
    schedule the chunks of running jobs that waited for it. Returns how many queued jobs were woken."""
    with rt.sessions() as session:
        queued = list(session.scalars(state.jobs_using_voice(voice_id, [JobStatus.QUEUED])))
    for job_id in queued:
        enqueue(START_JOB, [str(job_id)])
    schedule(rt, enqueue)
    return len(queued)

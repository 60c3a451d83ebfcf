"""What each task does, by name: the one table that the Celery tasks, the in-process test runner and the
benchmarks all run. A handler takes the runtime, the message's JSON arguments and the ``enqueue``
function for follow-ups, and returns a JSON-able summary.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from worker import audiobookshelf, observe, webhooks
from worker.jobs.chapters import stitch_chapter
from worker.jobs.intake import plan_job
from worker.jobs.preview import preview_script
from worker.jobs.render import render_chunks
from worker.jobs.speech import speak
from worker.jobs.start import start_job, wake_jobs_waiting_for
from worker.jobs.stitch import stitch_job
from worker.logs import job_context, log_context
from worker.runtime import Runtime
from worker.sweeper import sweep
from worker.task_names import (
    BUILD_VOICE,
    DELIVER_AUDIOBOOKSHELF,
    DELIVER_CHAPTER_WEBHOOK,
    DELIVER_WEBHOOK,
    PLAN_JOB,
    PREVIEW_SCRIPT,
    RENDER_CHUNKS,
    SPEAK,
    START_JOB,
    STITCH_CHAPTER,
    STITCH_JOB,
    SWEEP,
    Enqueue,
)
from worker.voices.builds import send_builds
from worker.voices.prompts import BuildOutcome, build_voice

Handler = Callable[[Runtime, list[Any], Enqueue], Any]


def _plan(rt: Runtime, args: list[Any], enqueue: Enqueue) -> str:
    return plan_job(rt, uuid.UUID(str(args[0])), enqueue).value


def _preview(rt: Runtime, args: list[Any], enqueue: Enqueue) -> str:
    return preview_script(rt, uuid.UUID(str(args[0]))).value


def _start(rt: Runtime, args: list[Any], enqueue: Enqueue) -> str:
    return start_job(rt, uuid.UUID(str(args[0])), enqueue).value


def _render(rt: Runtime, args: list[Any], enqueue: Enqueue) -> int:
    return render_chunks(rt, uuid.UUID(str(args[0])), [int(s) for s in args[1]], enqueue)


def _stitch(rt: Runtime, args: list[Any], enqueue: Enqueue) -> bool:
    job_id = uuid.UUID(str(args[0]))
    started = time.perf_counter()
    published = stitch_job(rt, job_id, str(args[1]), enqueue)
    if published:
        observe.stitched(rt, "book", time.perf_counter() - started)
        observe.job_ended(rt, job_id)
    return published


def _stitch_chapter(rt: Runtime, args: list[Any], enqueue: Enqueue) -> bool:
    started = time.perf_counter()
    published = stitch_chapter(rt, uuid.UUID(str(args[0])), int(args[1]), str(args[2]), enqueue)
    if published:
        observe.stitched(rt, "chapter", time.perf_counter() - started)
    return published


def _deliver_chapter(rt: Runtime, args: list[Any], enqueue: Enqueue) -> str:
    return webhooks.deliver_chapter(rt, uuid.UUID(str(args[0])), int(args[1]))


def _build(rt: Runtime, args: list[Any], enqueue: Enqueue) -> str:
    """Build the voice's prompt; when a build ends either way, the jobs that wait for it go on, and the
    next waiting build is sent."""
    voice_id = uuid.UUID(str(args[0]))
    with log_context(voice_id=voice_id):
        outcome = build_voice(rt, voice_id)
    if outcome in (BuildOutcome.BUILT, BuildOutcome.FAILED):
        wake_jobs_waiting_for(rt, voice_id, enqueue)
    send_builds(rt, enqueue)  # its slot is free: the next waiting build goes
    return outcome.value


def _deliver(rt: Runtime, args: list[Any], enqueue: Enqueue) -> str:
    """The job's end event, then (once that is delivered) its ``job.flagged`` event and its delivery's
    event (``job.delivered`` / ``job.delivery_failed``) if they are due."""
    job_id = uuid.UUID(str(args[0]))
    ended = webhooks.deliver(rt, job_id)
    flagged = webhooks.deliver_flags(rt, job_id)
    delivery = webhooks.deliver_delivery_event(rt, job_id)
    more = [f"{name}: {outcome}" for name, outcome in (("flagged", flagged), ("delivery", delivery))]
    return ", ".join([ended, *(m for m in more if not m.endswith("not_due"))])


def _deliver_audiobookshelf(rt: Runtime, args: list[Any], enqueue: Enqueue) -> dict[str, Any]:
    """One attempt at the job's upload into Audiobookshelf; once it ended, its webhook event goes out.
    A retry's delay comes back for the Celery task to schedule (the sweeper sends it too, when due)."""
    job_id = uuid.UUID(str(args[0]))
    result = audiobookshelf.deliver(rt, job_id)
    if result.ended:
        enqueue(DELIVER_WEBHOOK, [str(job_id)])
    return result.to_json()


def _speak(rt: Runtime, args: list[Any], enqueue: Enqueue) -> str:
    return speak(rt, uuid.UUID(str(args[0])), enqueue).value


def _sweep(rt: Runtime, args: list[Any], enqueue: Enqueue) -> dict[str, Any]:
    return sweep(rt, enqueue).__dict__


HANDLERS: dict[str, Handler] = {
    PLAN_JOB: _plan,
    PREVIEW_SCRIPT: _preview,
    START_JOB: _start,
    RENDER_CHUNKS: _render,
    STITCH_JOB: _stitch,
    STITCH_CHAPTER: _stitch_chapter,
    BUILD_VOICE: _build,
    DELIVER_WEBHOOK: _deliver,
    DELIVER_CHAPTER_WEBHOOK: _deliver_chapter,
    DELIVER_AUDIOBOOKSHELF: _deliver_audiobookshelf,
    SWEEP: _sweep,
    SPEAK: _speak,
}

# Tasks whose first argument is a job id: their log lines carry it (worker.logs).
_JOB_TASKS = frozenset(
    {
        PLAN_JOB,
        START_JOB,
        RENDER_CHUNKS,
        STITCH_JOB,
        STITCH_CHAPTER,
        DELIVER_WEBHOOK,
        DELIVER_CHAPTER_WEBHOOK,
        DELIVER_AUDIOBOOKSHELF,
        SPEAK,
    }
)


def run(rt: Runtime, name: str, args: list[Any], enqueue: Enqueue) -> Any:
    """Run task ``name`` on ``args``; KeyError for a name no handler has."""
    handler = HANDLERS[name]
    job_id = str(args[0]) if name in _JOB_TASKS and args else None
    with job_context(job_id):
        return handler(rt, args, enqueue)

"""What each task does: the handlers that the task table (:mod:`worker.task_names`) names, which the Celery
tasks, the in-process test runner and the benchmarks all run. A handler takes the runtime, the message's
JSON arguments and the ``enqueue`` function for follow-ups, and returns a JSON-able summary.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from functools import cache
from typing import Any

from worker import audiobookshelf, observe, webhooks
from worker.jobs.chapters import stitch_chapter
from worker.jobs.intake import plan_job
from worker.jobs.preview import fail_preview, preview_script
from worker.jobs.render import render_chunks
from worker.jobs.speech import speak
from worker.jobs.start import start_job, wake_jobs_waiting_for
from worker.jobs.stitch import stitch_job
from worker.logs import job_context, log_context
from worker.runtime import Runtime
from worker.sweeper import sweep
from worker.task_names import BY_NAME, DELIVER_WEBHOOK, TASKS, Enqueue, TaskSpec
from worker.voices.builds import send_builds
from worker.voices.prompts import BuildOutcome, build_voice

Handler = Callable[[Runtime, list[Any], Enqueue], Any]


def handle_plan(rt: Runtime, args: list[Any], enqueue: Enqueue) -> str:
    return plan_job(rt, uuid.UUID(str(args[0])), enqueue).value


def handle_preview(rt: Runtime, args: list[Any], enqueue: Enqueue) -> str:
    return preview_script(rt, uuid.UUID(str(args[0]))).value


def handle_start(rt: Runtime, args: list[Any], enqueue: Enqueue) -> str:
    return start_job(rt, uuid.UUID(str(args[0])), enqueue).value


def handle_render(rt: Runtime, args: list[Any], enqueue: Enqueue) -> int:
    return render_chunks(rt, uuid.UUID(str(args[0])), [int(s) for s in args[1]], enqueue)


def handle_stitch(rt: Runtime, args: list[Any], enqueue: Enqueue) -> bool:
    job_id = uuid.UUID(str(args[0]))
    started = time.perf_counter()
    published = stitch_job(rt, job_id, str(args[1]), enqueue)
    if published:
        observe.stitched(rt, "book", time.perf_counter() - started)
        observe.job_ended(rt, job_id)
    return published


def handle_stitch_chapter(rt: Runtime, args: list[Any], enqueue: Enqueue) -> bool:
    started = time.perf_counter()
    published = stitch_chapter(rt, uuid.UUID(str(args[0])), int(args[1]), str(args[2]), enqueue)
    if published:
        observe.stitched(rt, "chapter", time.perf_counter() - started)
    return published


def handle_deliver_chapter(rt: Runtime, args: list[Any], enqueue: Enqueue) -> str:
    return webhooks.deliver_chapter(rt, uuid.UUID(str(args[0])), int(args[1]))


def handle_build(rt: Runtime, args: list[Any], enqueue: Enqueue) -> str:
    """Build the voice's prompt; when a build ends either way, the jobs that wait for it go on, and the
    next waiting build is sent."""
    voice_id = uuid.UUID(str(args[0]))
    with log_context(voice_id=voice_id):
        outcome = build_voice(rt, voice_id)
    if outcome in (BuildOutcome.BUILT, BuildOutcome.FAILED):
        wake_jobs_waiting_for(rt, voice_id, enqueue)
    send_builds(rt, enqueue)  # its slot is free: the next waiting build goes
    return outcome.value


def handle_deliver(rt: Runtime, args: list[Any], enqueue: Enqueue) -> str:
    """The job's end event, then (once that is delivered) its ``job.flagged`` event and its delivery's
    event (``job.delivered`` / ``job.delivery_failed``) if they are due."""
    job_id = uuid.UUID(str(args[0]))
    ended = webhooks.deliver(rt, job_id)
    flagged = webhooks.deliver_flags(rt, job_id)
    delivery = webhooks.deliver_delivery_event(rt, job_id)
    more = [f"{name}: {outcome}" for name, outcome in (("flagged", flagged), ("delivery", delivery))]
    return ", ".join([ended, *(m for m in more if not m.endswith("not_due"))])


def handle_deliver_audiobookshelf(rt: Runtime, args: list[Any], enqueue: Enqueue) -> dict[str, Any]:
    """One attempt at the job's upload into Audiobookshelf; once it ended, its webhook event goes out.
    A retry's delay comes back for the Celery task to schedule (the sweeper sends it too, when due)."""
    job_id = uuid.UUID(str(args[0]))
    result = audiobookshelf.deliver(rt, job_id)
    if result.ended:
        enqueue(DELIVER_WEBHOOK, [str(job_id)])
    return result.to_json()


def handle_speak(rt: Runtime, args: list[Any], enqueue: Enqueue) -> str:
    return speak(rt, uuid.UUID(str(args[0])), enqueue).value


def handle_sweep(rt: Runtime, args: list[Any], enqueue: Enqueue) -> dict[str, Any]:
    return sweep(rt, enqueue).__dict__


def preview_broke_off(rt: Runtime, args: list[Any]) -> None:
    """A preview whose planning raised (a time limit, a bug) is failed with a 422 saying so: its client
    polls for an answer, never a preview that stays running until it expires."""
    reason = "planning the script broke off (a time limit or a server error)"
    fail_preview(rt, uuid.UUID(str(args[0])), reason)


def function_of(spec: TaskSpec, attribute: str = "body") -> Callable[..., Any]:
    """The function of this module that a table entry names (its ``body`` or ``on_break``)."""
    name = getattr(spec, attribute)
    found: object = globals().get(name) if isinstance(name, str) else None
    if not callable(found):
        raise LookupError(f"task {spec.name!r}: worker.dispatch has no {attribute} function {name!r}")
    return found


@cache
def handlers() -> dict[str, Handler]:
    """Every task's handler by name, from the table."""
    return {spec.name: function_of(spec) for spec in TASKS}


def run(rt: Runtime, name: str, args: list[Any], enqueue: Enqueue) -> Any:
    """Run task ``name`` on ``args``; KeyError for a name no handler has."""
    handler = handlers()[name]
    job_id = str(args[0]) if BY_NAME[name].job_arg and args else None
    with job_context(job_id):
        return handler(rt, args, enqueue)

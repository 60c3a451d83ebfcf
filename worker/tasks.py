"""Celery tasks: thin wrappers that run :mod:`worker.dispatch`'s handler of their name, with follow-ups
sent through Celery. Every task has a stable name, takes ids, and retries transient failures."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from celery import shared_task
from celery.signals import celeryd_after_setup, worker_process_init, worker_process_shutdown
from sqlalchemy.exc import OperationalError

from worker import counters, dispatch
from worker.celery_app import FRONT_PRIORITY, REQUEST_ID_HEADER, engine_queue
from worker.engines import warm_up
from worker.jobs import quality
from worker.jobs.preview import fail_preview
from worker.jobs.scheduler import to_front
from worker.logs import clean_request_id, log_context
from worker.qa.whisper import WhisperRecogniser
from worker.runtime import runtime
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
)

log = logging.getLogger(__name__)

# Database and broker outages, and an engine out of memory: retried with backoff.
TRANSIENT = (OperationalError, ConnectionError, TimeoutError, MemoryError)
RETRIES = {"autoretry_for": TRANSIENT, "retry_backoff": True, "max_retries": 8}


def _enqueue(name: str, args: list[Any]) -> None:
    """Send a follow-up; a new owner's first render batch at the front priority (worker.jobs.scheduler)."""
    from celery import current_app

    current_app.send_task(name, args=args, priority=FRONT_PRIORITY if to_front() else None)


def _run(name: str, *args: Any) -> Any:
    """Run the handler, its log lines tagged with the request id its message carries (if any)."""
    from celery import current_task

    given = current_task.request.get(REQUEST_ID_HEADER) if current_task is not None else None
    request_id = clean_request_id(str(given)) if given else None
    with log_context(request_id=request_id):
        return dispatch.run(runtime(), name, list(args), _enqueue)


# Whether this worker's pool children warm the engine up: decided in the worker's main process before the
# pool forks (the children inherit it), from the queues it consumes.
_renders = True


@celeryd_after_setup.connect
def _note_queues(sender: str, instance: Any, **_: Any) -> None:
    """A worker that does not consume the engine tasks' queue (the CPU worker beside GPU workers: it starts
    jobs, stitches, sends webhooks) never renders, so it never loads a model."""
    global _renders  # noqa: PLW0603 - set once per worker, before fork
    consumed = set(instance.app.amqp.queues.consume_from or ())
    renders_on = engine_queue(runtime().settings)
    _renders = not consumed or renders_on in consumed
    if not _renders:
        log.info("this worker does not consume %r: no engine warm-up", renders_on)


@worker_process_init.connect
def _warm_up(**_: Any) -> None:
    """Open this child's engine and warm it up (load the model, first render), after fork: espeak is
    initialised per process and CUDA cannot cross a fork. A failure is logged, not raised: the pool child
    must come up so that the task that needs the engine can fail with the reason (and be retried)."""
    if not _renders:
        return
    try:
        engine = runtime().engine()
        started = time.perf_counter()
        warm_up(engine)
        log.info("engine %s warmed up in %.2f s", engine.name, time.perf_counter() - started)
    except Exception:
        log.exception("engine warm-up failed")
    recogniser = quality.recogniser(runtime().settings)
    if isinstance(recogniser, WhisperRecogniser):  # load the model now, not in the first chunk's check
        try:
            recogniser.warm_up()
        except Exception:
            log.exception("the transcript check's recogniser could not be loaded")


@worker_process_shutdown.connect
def _flush_metrics(**_: Any) -> None:
    """A pool process writes the metrics it still holds before it exits (it ends with os._exit, which
    skips atexit)."""
    counters.flush_quietly()


@shared_task(name=PLAN_JOB, **RETRIES)
def plan_job(job_id: str) -> str:
    result: str = _run(PLAN_JOB, job_id)
    return result


@shared_task(name=PREVIEW_SCRIPT)
def preview_script(preview_id: str) -> str:
    """A preview whose planning raises (a time limit, a bug) is failed with a 422 saying so: its client
    polls an answer, never a preview that stays running until it expires."""
    try:
        result: str = _run(PREVIEW_SCRIPT, preview_id)
    except BaseException:
        log.exception("preview %s: planning broke off", preview_id)
        fail_preview(
            runtime(), uuid.UUID(preview_id), "planning the script broke off (a time limit or a server error)"
        )
        raise
    return result


@shared_task(name=START_JOB, **RETRIES)
def start_job(job_id: str) -> str:
    result: str = _run(START_JOB, job_id)
    return result


@shared_task(name=RENDER_CHUNKS, **RETRIES)
def render_chunks(job_id: str, seqs: list[int]) -> int:
    result: int = _run(RENDER_CHUNKS, job_id, seqs)
    return result


@shared_task(name=STITCH_JOB, **RETRIES)
def stitch_job(job_id: str, token: str) -> bool:
    result: bool = _run(STITCH_JOB, job_id, token)
    return result


@shared_task(name=STITCH_CHAPTER, **RETRIES)
def stitch_chapter(job_id: str, chapter: int, token: str) -> bool:
    result: bool = _run(STITCH_CHAPTER, job_id, chapter, token)
    return result


@shared_task(name=DELIVER_CHAPTER_WEBHOOK, **RETRIES)
def deliver_chapter_webhook(job_id: str, chapter: int) -> str:
    """One delivery attempt of a chapter's event; the sweeper retries failures on its backoff schedule."""
    result: str = _run(DELIVER_CHAPTER_WEBHOOK, job_id, chapter)
    return result


@shared_task(name=DELIVER_WEBHOOK, **RETRIES)
def deliver_webhook(job_id: str) -> str:
    """One delivery attempt; failures are retried by the sweeper on the job's backoff schedule."""
    result: str = _run(DELIVER_WEBHOOK, job_id)
    return result


@shared_task(name=DELIVER_AUDIOBOOKSHELF, **RETRIES)
def deliver_audiobookshelf(job_id: str) -> dict[str, Any]:
    """One attempt at the job's upload into Audiobookshelf; a retry is sent again after its backoff (the
    job row holds when it is due, and the sweeper re-sends a due one whose message was lost)."""
    result: dict[str, Any] = _run(DELIVER_AUDIOBOOKSHELF, job_id)
    if result.get("retry_in") is not None:
        deliver_audiobookshelf.apply_async(args=[job_id], countdown=float(result["retry_in"]))
    return result


@shared_task(name=BUILD_VOICE, **RETRIES)
def build_voice(voice_id: str) -> str:
    result: str = _run(BUILD_VOICE, voice_id)
    return result


@shared_task(name=SPEAK)
def speak(job_id: str) -> str:
    """A speech request's chunks, in order (worker.jobs.speech). Not retried: its client is waiting now,
    and the API gives up on it after TOME_SPEECH_WAIT_SECONDS (a retry with backoff would come too late)."""
    result: str = _run(SPEAK, job_id)
    return result


@shared_task(name=SWEEP, ignore_result=True)
def sweep() -> dict[str, Any]:
    result: dict[str, Any] = _run(SWEEP)
    return result

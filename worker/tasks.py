"""Celery tasks: thin wrappers that take ids, call worker.pipeline, and send follow-ups after commit."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from celery import Task, shared_task
from celery.signals import celeryd_after_setup, worker_process_init
from sqlalchemy.exc import OperationalError

from worker import pipeline, webhooks
from worker.celery_app import engine_queue
from worker.engines import warm_up
from worker.runtime import runtime
from worker.sweeper import sweep
from worker.voice_prompts import VoiceNotReady, build_voice

log = logging.getLogger(__name__)

BUILD_REQUEST_EVERY = 20
TRANSIENT = (OperationalError, ConnectionError, TimeoutError, MemoryError)


def _enqueue(name: str, args: list[Any]) -> None:
    from celery import current_app

    current_app.send_task(name, args=args)


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


@shared_task(name=pipeline.START_JOB, bind=True, autoretry_for=TRANSIENT, retry_backoff=True, max_retries=8)
def start_job(self: Task, job_id: str) -> str:
    try:
        # Build messages on the first try and every BUILD_REQUEST_EVERY retries (about 10 s at 0.5 s):
        # enough to survive a lost message, without hundreds of no-op builds on a one-slot GPU queue.
        ask = self.request.retries % BUILD_REQUEST_EVERY == 0
        return pipeline.start_job(runtime(), uuid.UUID(job_id), _enqueue, request_builds=ask)
    except pipeline.WaitForVoice as exc:
        # The job stays queued; if retries run out, the sweeper starts it again.
        raise self.retry(countdown=0.5, max_retries=1200, exc=exc) from exc


@shared_task(
    name=pipeline.RENDER_CHUNKS, bind=True, autoretry_for=TRANSIENT, retry_backoff=True, max_retries=8
)
def render_chunks(self: Task, job_id: str, seqs: list[int]) -> int:
    try:
        return pipeline.render_chunks(runtime(), uuid.UUID(job_id), [int(s) for s in seqs], _enqueue)
    except VoiceNotReady as exc:
        raise self.retry(countdown=2, max_retries=300, exc=exc) from exc


@shared_task(name=pipeline.STITCH_JOB, autoretry_for=TRANSIENT, retry_backoff=True, max_retries=8)
def stitch_job(job_id: str, token: str) -> bool:
    return pipeline.stitch_job(runtime(), uuid.UUID(job_id), token, _enqueue)


@shared_task(name=pipeline.DELIVER_WEBHOOK, autoretry_for=TRANSIENT, retry_backoff=True, max_retries=8)
def deliver_webhook(job_id: str) -> str:
    """One delivery attempt; failures are retried by the sweeper on the job's backoff schedule."""
    return webhooks.deliver(runtime(), uuid.UUID(job_id))


@shared_task(name=pipeline.BUILD_VOICE, autoretry_for=TRANSIENT, retry_backoff=True, max_retries=8)
def build_voice_task(voice_id: str, force: bool = False) -> str:
    return build_voice(runtime(), uuid.UUID(voice_id), force=force).value


@shared_task(name="tome.sweep", ignore_result=True)
def sweep_task() -> dict[str, Any]:
    return sweep(runtime(), _enqueue).__dict__

"""Celery tasks: thin wrappers that take ids, call worker.pipeline, and send follow-ups after commit."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from celery import Task, shared_task
from celery.signals import worker_process_init
from sqlalchemy.exc import OperationalError

from worker import pipeline, webhooks
from worker.runtime import runtime
from worker.sweeper import sweep
from worker.voice_prompts import VoiceNotReady, build_voice

log = logging.getLogger(__name__)

TRANSIENT = (OperationalError, ConnectionError, TimeoutError, MemoryError)


def _enqueue(name: str, args: list[Any]) -> None:
    from celery import current_app

    current_app.send_task(name, args=args)


@worker_process_init.connect
def _warm_up(**_: Any) -> None:
    """Open this child's engine (espeak is initialised per process, never before fork)."""
    runtime().engine()


@shared_task(name=pipeline.START_JOB, bind=True, autoretry_for=TRANSIENT, retry_backoff=True, max_retries=8)
def start_job(self: Task, job_id: str) -> str:
    try:
        return pipeline.start_job(runtime(), uuid.UUID(job_id), _enqueue)
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

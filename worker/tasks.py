"""Celery tasks, one for each entry of the task table (:mod:`worker.task_names`): a thin wrapper that runs
:mod:`worker.dispatch`'s handler of its name, with follow-ups sent through Celery. Every task has a stable
name and takes ids; the table says which retry transient failures."""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import shared_task
from celery.signals import celeryd_after_setup, worker_process_init, worker_process_shutdown
from sqlalchemy.exc import OperationalError

from worker import counters, dispatch
from worker.audio.loudness import load_numerics
from worker.celery_app import FRONT_PRIORITY, REQUEST_ID_HEADER, engine_queue
from worker.engines import warm_up
from worker.jobs import quality
from worker.jobs.scheduler import to_front
from worker.logs import clean_request_id, log_context
from worker.qa.whisper import WhisperRecogniser
from worker.runtime import runtime
from worker.task_names import TASKS, TaskSpec

log = logging.getLogger(__name__)

# Database and broker outages, and an engine out of memory: retried with backoff.
TRANSIENT = (OperationalError, ConnectionError, TimeoutError, MemoryError)
RETRIES = {"autoretry_for": TRANSIENT, "retry_backoff": True, "max_retries": 8}


def _enqueue(name: str, args: list[Any]) -> None:
    """Send a follow-up; a new owner's first render batch at the front priority (worker.jobs.scheduler)."""
    from celery import current_app

    current_app.send_task(name, args=args, priority=FRONT_PRIORITY if to_front() else None)


def _run(spec: TaskSpec, *args: Any) -> Any:
    """Run the handler, its log lines tagged with the request id its message carries (if any); the
    table's ``on_break`` runs when it raises, and a ``retry_in`` it returns sends the task again later."""
    from celery import current_app, current_task

    given = current_task.request.get(REQUEST_ID_HEADER) if current_task is not None else None
    request_id = clean_request_id(str(given)) if given else None
    try:
        with log_context(request_id=request_id):
            result = dispatch.run(runtime(), spec.name, list(args), _enqueue)
    except BaseException:
        if spec.on_break is None:
            raise
        log.exception("task %s %s broke off", spec.name, list(args))
        dispatch.function_of(spec, "on_break")(runtime(), list(args))
        raise
    if spec.reschedules and result.get("retry_in") is not None:
        current_app.send_task(spec.name, args=list(args), countdown=float(result["retry_in"]))
    return result


# Whether this worker's pool children warm the engine up: decided in the worker's main process before the
# pool forks (the children inherit it), from the queues it consumes.
_renders = True


@celeryd_after_setup.connect
def _note_queues(sender: str, instance: Any, **_: Any) -> None:
    """A worker that does not consume the engine tasks' queue (the CPU worker beside GPU workers: it starts
    jobs, stitches, sends webhooks) never renders, so it never loads a model. Every worker imports the
    audio stack's numerical libraries here, before the pool forks, so that its pool processes share them
    (the API and other processes import them on first use)."""
    global _renders  # noqa: PLW0603 - set once per worker, before fork
    load_numerics()
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


def _celery_task(spec: TaskSpec) -> Any:
    """The Celery task of a table entry, registered under its name on every app (a shared task)."""

    def task(*args: Any) -> Any:
        return _run(spec, *args)

    task.__name__ = task.__qualname__ = spec.name.rsplit(".", maxsplit=1)[-1]
    task.__doc__ = f"Runs worker.dispatch.{spec.body} (the task table's {spec.name!r})."
    return shared_task(name=spec.name, **(RETRIES if spec.retried else {}))(task)


CELERY_TASKS: dict[str, Any] = {spec.name: _celery_task(spec) for spec in TASKS}

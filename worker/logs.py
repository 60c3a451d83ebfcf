"""The job id on every log line written while a task works on a job, without writing it into each
message (as redash's ``CurrentJobFilter`` does).

:func:`job_context` sets the id for the task's duration, and a log-record factory copies it onto every
record: ``job_id`` (``-`` outside a job) and ``job`` (`` job=<id>``, or nothing outside a job), so a
format may use ``%(name)s%(job)s: %(message)s``. No Flask or Celery imports: worker and API install it.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from typing import Any

NO_JOB = "-"
_current_job: contextvars.ContextVar[str] = contextvars.ContextVar("tome_job_id", default=NO_JOB)
_installed = False


@contextlib.contextmanager
def job_context(job_id: str | None) -> Iterator[None]:
    """Log records made inside this block carry ``job_id`` (None: leave the current one)."""
    if job_id is None:
        yield
        return
    token = _current_job.set(job_id)
    try:
        yield
    finally:
        _current_job.reset(token)


def current_job() -> str:
    return _current_job.get()


def install_record_factory() -> None:
    """Give every log record of this process a ``job_id`` attribute (idempotent)."""
    global _installed  # noqa: PLW0603 - one factory per process
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        job_id = _current_job.get()
        record.job_id = job_id
        record.job = "" if job_id == NO_JOB else f" job={job_id}"
        return record

    logging.setLogRecordFactory(factory)
    _installed = True

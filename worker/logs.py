"""What a log line is about, without writing it into each message (as redash's ``CurrentJobFilter`` does),
and an optional JSON line format.

Context fields (``job_id``, ``chunk_seq``, ``voice_id``, ``request_id``) are set for a block of work with
:func:`log_context` (:func:`job_context` for the job alone), and a log-record factory copies them onto every
record made inside it: each as an attribute (``-`` outside such a block), plus ``job`` (`` job=<id>``, or
nothing outside a job), so a text format may use ``%(name)s%(job)s: %(message)s``. :class:`JsonFormatter`
writes one JSON object a line with every field that is set. No Flask or Celery imports: worker and API
install it.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

NO_JOB = "-"
UNSET = "-"
FIELDS = ("job_id", "chunk_seq", "voice_id", "request_id")
_vars: dict[str, contextvars.ContextVar[str]] = {
    name: contextvars.ContextVar(f"tome_{name}", default=UNSET) for name in FIELDS
}
_current_job = _vars["job_id"]
_installed = False

# A request id a client may choose (X-Request-ID): at most 128 of these characters, so that it can never
# break a log line or a header (no spaces, quotes, newlines or control characters).
REQUEST_ID_MAX = 128
_SAFE_REQUEST_ID = re.compile(rf"[A-Za-z0-9._:@+=/-]{{1,{REQUEST_ID_MAX}}}")


def clean_request_id(given: str | None) -> str:
    """``given`` if it is a safe request id, else a fresh one (32 hex digits)."""
    if given is not None and _SAFE_REQUEST_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


@contextlib.contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Log records made inside this block carry these fields (a None value leaves the current one)."""
    tokens = []
    for name, value in fields.items():
        if name not in _vars:
            raise ValueError(f"unknown log field {name!r}")
        if value is not None:
            tokens.append((_vars[name], _vars[name].set(str(value))))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


@contextlib.contextmanager
def job_context(job_id: str | None) -> Iterator[None]:
    """Log records made inside this block carry ``job_id`` (None: leave the current one)."""
    with log_context(job_id=job_id):
        yield


def current_job() -> str:
    return _current_job.get()


def current(name: str) -> str | None:
    """The context field ``name`` (None when unset)."""
    value = _vars[name].get()
    return None if value == UNSET else value


def set_request_id(request_id: str | None) -> contextvars.Token[str]:
    """Set the request id for the rest of this context (a web request, a task); reset it with the token."""
    return _vars["request_id"].set(request_id or UNSET)


def reset_request_id(token: contextvars.Token[str]) -> None:
    _vars["request_id"].reset(token)


def install_record_factory() -> None:
    """Give every log record of this process the context fields (idempotent)."""
    global _installed  # noqa: PLW0603 - one factory per process
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        for name, var in _vars.items():
            setattr(record, name, var.get())
        job_id = _current_job.get()
        record.job = "" if job_id == NO_JOB else f" job={job_id}"
        return record

    logging.setLogRecordFactory(factory)
    _installed = True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, process, message, the context fields
    that are set, Celery's task name and id when the record has them, and the traceback if any. Newlines
    in a message stay inside its JSON string, so one record is always one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "process": record.process,
            "message": record.getMessage(),
        }
        for name in (*FIELDS, "task_name", "task_id"):
            value = getattr(record, name, None)
            if value not in (None, UNSET, "???"):
                line[name] = int(value) if name == "chunk_seq" and str(value).isdigit() else value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)


def use_json(loggers: list[logging.Logger] | None = None) -> None:
    """Give every handler of ``loggers`` (default: the root logger) the JSON format."""
    for logger in loggers or [logging.getLogger()]:
        for handler in logger.handlers:
            handler.setFormatter(JsonFormatter())

"""A job's deliveries: its webhook events (the end event, ``job.flagged``, the delivery event, each
chapter's ``job.chapter_ready``) and its upload into Audiobookshelf. Each attempt is claimed and counted
in one conditional UPDATE (``due``: the caller's condition that the delivery is due), so two workers
never both send; its outcome is recorded on the row after."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from models import Job, JobChapter, utcnow
from worker.jobs.state.common import rows


@dataclass(frozen=True)
class WebhookColumns:
    """The job's columns that carry one webhook event's delivery (``error``: None when it records none)."""

    attempts: str
    delivered_at: str
    next_at: str
    error: str | None = None


END_EVENT = WebhookColumns("webhook_attempts", "webhook_delivered_at", "webhook_next_at", "webhook_error")
FLAGGED_EVENT = WebhookColumns(
    "flags_webhook_attempts", "flags_webhook_delivered_at", "flags_webhook_next_at"
)
DELIVERY_EVENT = WebhookColumns(
    "delivery_webhook_attempts", "delivery_webhook_delivered_at", "delivery_webhook_next_at"
)
CHAPTER_EVENT = WebhookColumns("webhook_attempts", "webhook_delivered_at", "webhook_next_at")


def _outcome(columns: WebhookColumns, error: str | None, retry_at: datetime) -> dict[str, Any]:
    values: dict[str, Any] = {} if columns.error is None else {columns.error: error}
    if error is None:
        values[columns.delivered_at] = utcnow()
    else:
        values[columns.next_at] = retry_at
    return values


def claim_webhook(
    session: Session, job_id: uuid.UUID, columns: WebhookColumns, due: ColumnElement[bool], until: datetime
) -> bool:
    """Count an attempt at the job's event if it is ``due``, its next try pushed to ``until`` meanwhile."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, due)
        .values({columns.attempts: getattr(Job, columns.attempts) + 1, columns.next_at: until})
    )
    return rows(result) == 1


def record_webhook(
    session: Session, job_id: uuid.UUID, columns: WebhookColumns, error: str | None, retry_at: datetime
) -> None:
    """The attempt's outcome: delivered now (``error`` None), or tried again at ``retry_at``."""
    session.execute(update(Job).where(Job.id == job_id).values(_outcome(columns, error, retry_at)))


def claim_chapter_webhook(
    session: Session, job_id: uuid.UUID, chapter: int, due: ColumnElement[bool], until: datetime
) -> bool:
    """:func:`claim_webhook` for a chapter's ``job.chapter_ready`` event (on the chapter's row)."""
    result = session.execute(
        update(JobChapter)
        .where(JobChapter.job_id == job_id, JobChapter.chapter == chapter, due)
        .values(webhook_attempts=JobChapter.webhook_attempts + 1, webhook_next_at=until)
    )
    return rows(result) == 1


def record_chapter_webhook(
    session: Session, job_id: uuid.UUID, chapter: int, error: str | None, retry_at: datetime
) -> None:
    """:func:`record_webhook` for a chapter's event."""
    session.execute(
        update(JobChapter)
        .where(JobChapter.job_id == job_id, JobChapter.chapter == chapter)
        .values(_outcome(CHAPTER_EVENT, error, retry_at))
    )


def claim_upload(session: Session, job_id: uuid.UUID, due: ColumnElement[bool], until: datetime) -> bool:
    """Count an attempt at the job's Audiobookshelf delivery if it is ``due``; nobody else tries before
    ``until``."""
    result = session.execute(
        update(Job).where(Job.id == job_id, due).values(abs_attempts=Job.abs_attempts + 1, abs_next_at=until)
    )
    return rows(result) == 1


def record_upload(
    session: Session, job_id: uuid.UUID, outcome: str | None, error: str | None, retry_at: datetime | None
) -> None:
    """The upload's outcome: ``outcome`` (delivered, failed) with ``error`` (on a delivered book, a note),
    or, with ``outcome`` None, ``error`` and another try at ``retry_at``."""
    values: dict[str, Any] = {"abs_error": error, "abs_next_at": retry_at}
    if outcome is not None:
        values["abs_state"] = outcome
    session.execute(update(Job).where(Job.id == job_id).values(**values))

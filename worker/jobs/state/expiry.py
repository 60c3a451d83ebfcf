"""A job's stored files expired: its book and files (the row records when), and its chunks' audio."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import update
from sqlalchemy.orm import Session

from models import Chunk, Job


def expire_book(session: Session, job_id: uuid.UUID, now: datetime) -> None:
    """The job's book and files are gone (past their expiry): the row says when and names none."""
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.expired_at.is_(None))
        .values(expired_at=now, output_path=None, files=[], files_bytes=None)
    )


def expire_chunk_audio(session: Session, job_id: uuid.UUID, now: datetime) -> None:
    """The ended job's chunk audio is gone, and its book with it if still there (its expiry brought
    forward to ``now``)."""
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.expired_at.is_(None), Job.output_path.is_not(None))
        .values(expired_at=now, expires_at=now, output_path=None, files=[], files_bytes=None)
    )
    session.execute(update(Chunk).where(Chunk.job_id == job_id).values(audio_path=None))

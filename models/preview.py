"""Previews planned by a worker: ``POST /v1/scripts/preview`` for an EPUB or a script over the inline cap.

The row holds what the request asked (its options, in a job's options shape), the script until a worker
takes it, then either the preview's JSON body (what the inline preview answers) or the error the inline
path would have answered. Rows expire (``expires_at``); the sweeper removes them.
"""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Index, LargeBinary, String, Text, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UTCDateTime, new_id, utcnow


class PreviewStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    READY = "ready"
    FAILED = "failed"


class Preview(Base):
    __tablename__ = "previews"
    __table_args__ = (Index("ix_previews_owner", "owner"), Index("ix_previews_expires_at", "expires_at"))

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=new_id)
    owner: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(16), default=PreviewStatus.QUEUED.value)
    voice_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    engine: Mapped[str] = mapped_column(String(64))
    script_format: Mapped[str] = mapped_column(String(16))
    # What the request asked, in a job's options shape (worker.jobs.intake.plan_request reads it).
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # The script until a worker takes it: text, or an EPUB's bytes (deferred: never loaded by a status read).
    script: Mapped[str | None] = mapped_column(Text, default=None, deferred=True)
    script_file: Mapped[bytes | None] = mapped_column(LargeBinary, default=None, deferred=True)
    # The answer once done: the preview's JSON body, or the error (HTTP status and the error's body).
    result: Mapped[str | None] = mapped_column(Text, default=None, deferred=True)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)

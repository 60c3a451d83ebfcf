"""Pronunciation lexicons: a named list of entries owned like voices (grapheme -> alias or phoneme)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Integer, String, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UTCDateTime, new_id, utcnow


class Lexicon(Base):
    __tablename__ = "lexicons"
    __table_args__ = (UniqueConstraint("owner", "name", name="uq_lexicons_owner_name"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=new_id)
    owner: Mapped[str] = mapped_column(String(100), index=True)
    name: Mapped[str] = mapped_column(String(64))
    language: Mapped[str | None] = mapped_column(String(16), default=None)
    # [{"grapheme", "alias", "phoneme", "case_sensitive"}, ...] in the lexicon's order (at most 1000).
    entries: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    entry_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

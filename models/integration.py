"""An owner's connection to a service Tome delivers into (Audiobookshelf): its URL and API token, the
token sealed with the server's secret key (worker.sealed), never stored or shown in the clear."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String, Text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UTCDateTime, utcnow


class Integration(Base):
    __tablename__ = "integrations"

    owner: Mapped[str] = mapped_column(String(100), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)  # "audiobookshelf"
    url: Mapped[str] = mapped_column(String(2000))
    token_sealed: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

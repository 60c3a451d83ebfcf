"""Voices: a reference recording, its transcript, and the state of its speaker-prompt cache."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Index, Integer, String, Text, Uuid, text
from sqlalchemy.orm import Mapped, mapped_column, validates

from models.base import Base, UTCDateTime, new_id, utcnow
from models.names import MAX_NAME_CHARS, MAX_NAME_KEY_CHARS, voice_name, voice_name_key


class CacheStatus(enum.StrEnum):
    PENDING = "pending"
    PROCESSING = "processing"
    READY = "ready"
    FAILED = "failed"
    STALE = "stale"


class Voice(Base):
    __tablename__ = "voices"
    __table_args__ = (
        # Names are unique per owner among live voices, compared by their key (models.names: NFC, case
        # folded), so "Narrator" and "narrator" cannot both exist; a deleted voice frees its name.
        Index(
            "uq_voices_owner_name_key_live",
            "owner",
            "name_key",
            unique=True,
            sqlite_where=text("deleted_at IS NULL"),
            postgresql_where=text("deleted_at IS NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=new_id)
    owner: Mapped[str] = mapped_column(String(100), index=True)
    name: Mapped[str] = mapped_column(String(MAX_NAME_CHARS))
    name_key: Mapped[str] = mapped_column(String(MAX_NAME_KEY_CHARS))  # set with the name (_name below)
    language: Mapped[str] = mapped_column(String(16), default="en")
    ref_text: Mapped[str] = mapped_column(Text)
    audio_path: Mapped[str] = mapped_column(String(500))
    audio_sha256: Mapped[str] = mapped_column(String(64))
    audio_duration: Mapped[float] = mapped_column(Float)
    audio_sample_rate: Mapped[int]
    audio_bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)  # counts against the owner
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # Ids (strings) of the owner's lexicons read for this voice after a job's own, in order.
    lexicon_ids: Mapped[list[str]] = mapped_column(JSON, default=list)
    # What the checks of the reference found doubtful ({code, message, measured} each): the signal checks
    # at upload (worker.qa.reference.check_reference), then the transcript check of the prompt build.
    warnings: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)

    cache_status: Mapped[str] = mapped_column(String(12), default=CacheStatus.PENDING.value)
    cache_key: Mapped[str | None] = mapped_column(String(200), default=None)
    cache_engine: Mapped[str | None] = mapped_column(String(200), default=None)
    cache_path: Mapped[str | None] = mapped_column(String(500), default=None)
    cache_error: Mapped[str | None] = mapped_column(Text, default=None)
    cache_lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # Names the build holding the lease: only that build may publish or fail the prompt.
    cache_build_token: Mapped[str | None] = mapped_column(String(32), default=None)
    cache_built_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # A pending voice's build message was sent and may still be in the broker until then (None: not
    # sent; it waits for room, worker.voices.builds). Past it, the message counts as lost and is sent again.
    cache_sent_until: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)

    @validates("name")
    def _name(self, _: str, value: str) -> str:
        """Every name is stored normalised, with the key it is compared by (models.names)."""
        name = voice_name(value)
        self.name_key = voice_name_key(name)
        return name


class VoiceBuild(Base):
    """One prompt build that ran (built or failed): the worker seconds it took and the reference audio it
    encoded, counted in its owner's usage and build quota (worker.jobs.usage)."""

    __tablename__ = "voice_builds"
    __table_args__ = (Index("ix_voice_builds_owner_created_at", "owner", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    voice_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("voices.id", ondelete="CASCADE"))
    owner: Mapped[str] = mapped_column(String(100))
    seconds: Mapped[float] = mapped_column(Float)  # wall time on the worker, the transcript check included
    audio_seconds: Mapped[float] = mapped_column(Float)  # the reference recording it encoded
    outcome: Mapped[str] = mapped_column(String(12))  # built | failed | discarded
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class SpeechWait(Base):
    """A speech request waiting for its voice's prompt to be built: it holds one of its owner's speech
    places (TOME_SPEECH_PER_OWNER) until it ends, or until ``until`` if its API process died."""

    __tablename__ = "speech_waits"
    __table_args__ = (Index("ix_speech_waits_owner_until", "owner", "until"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=new_id)
    owner: Mapped[str] = mapped_column(String(100))
    voice_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("voices.id", ondelete="CASCADE"))
    until: Mapped[datetime] = mapped_column(UTCDateTime)

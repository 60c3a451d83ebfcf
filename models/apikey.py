"""API keys: only the SHA-256 of a key is stored; the key itself is shown once, when it is minted."""

from __future__ import annotations

import enum
import hashlib
import secrets
import uuid
from datetime import datetime

from sqlalchemy import Integer, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UTCDateTime, new_id, utcnow

KEY_PREFIX = "tome_"


class Role(enum.StrEnum):
    USER = "user"
    ADMIN = "admin"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(100))
    owner: Mapped[str] = mapped_column(String(100), index=True)
    key_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(10), default=Role.USER.value)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # Signs this key's webhooks (HMAC-SHA256). It must be readable to sign, so it is stored as is;
    # it grants nothing on the API.
    webhook_secret: Mapped[str] = mapped_column(String(64), default=lambda: secrets.token_hex(32))
    # After a rotation, the secret it replaced keeps signing (beside the new one) until this time, so a
    # receiver can switch secrets without rejecting a delivery (worker.webhooks).
    webhook_secret_previous: Mapped[str | None] = mapped_column(String(64), default=None)
    webhook_secret_previous_until: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # The weight of this key's jobs when chunks are shared out between owners (1-100; admin-set).
    priority: Mapped[int] = mapped_column(Integer, default=1, server_default="1")

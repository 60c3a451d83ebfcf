"""Counters shared by every process and machine: workers add to them, the API's /metrics reads them."""

from __future__ import annotations

from sqlalchemy import Float, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base


class Counter(Base):
    __tablename__ = "counters"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    engine: Mapped[str] = mapped_column(String(50), primary_key=True)
    value: Mapped[float] = mapped_column(Float, default=0.0)

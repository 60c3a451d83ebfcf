"""Counters shared by every process and machine: workers add to them, the API's /metrics reads them."""

from __future__ import annotations

from sqlalchemy import BigInteger, Float, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base


class Counter(Base):
    __tablename__ = "counters"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    engine: Mapped[str] = mapped_column(String(50), primary_key=True)
    value: Mapped[float] = mapped_column(Float, default=0.0)


class MetricSample(Base):
    """One cumulative figure of a labelled metric (a counter, or a histogram's bucket, sum or count), added
    to by every process in batches (worker.counters) and read by the API's GET /metrics. ``labels`` is the
    label set in a canonical form (worker.counters.encode_labels)."""

    __tablename__ = "metric_samples"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    labels: Mapped[str] = mapped_column(String(400), primary_key=True)
    value: Mapped[float] = mapped_column(Float, default=0.0)


class RateWindow(Base):
    """Requests per API key per fixed window, shared by every API process (see webapi/ratelimit.py)."""

    __tablename__ = "rate_windows"

    key_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    window_start: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    count: Mapped[int] = mapped_column(Integer, default=0)

"""Tome's data model: SQLAlchemy 2.0 typed ORM and session helpers (no Flask or Celery imports)."""

from models.apikey import ApiKey, Role, generate_key, hash_key
from models.base import Base, utcnow
from models.db import make_engine, make_session_factory, unit_of_work
from models.job import (
    ACTIVE,
    TERMINAL,
    ChapterStatus,
    Chunk,
    ChunkStatus,
    Job,
    JobChapter,
    JobKind,
    JobRerender,
    JobStatus,
)
from models.lexicon import Lexicon
from models.metric import Counter, MetricSample, RateWindow
from models.voice import CacheStatus, Voice, VoiceBuild

__all__ = [
    "ACTIVE",
    "TERMINAL",
    "ApiKey",
    "Base",
    "CacheStatus",
    "ChapterStatus",
    "Chunk",
    "ChunkStatus",
    "Counter",
    "Job",
    "JobChapter",
    "JobKind",
    "JobRerender",
    "JobStatus",
    "Lexicon",
    "MetricSample",
    "RateWindow",
    "Role",
    "Voice",
    "VoiceBuild",
    "generate_key",
    "hash_key",
    "make_engine",
    "make_session_factory",
    "unit_of_work",
    "utcnow",
]

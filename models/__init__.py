"""Tome's data model: SQLAlchemy 2.0 typed ORM and session helpers (no Flask or Celery imports).

What minting an API key needs (keys, engines, sessions) is imported at once; the other models (jobs,
voices, lexicons, metrics, integrations) on first use of any of their names, or of ``Base``:
``models.Base.metadata`` then lists every table. Minting a key from the command line
(``flask --app webapi tome-keys create``) so builds one mapped class, not all of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from models.apikey import ApiKey, Role, generate_key, hash_key
from models.base import utcnow
from models.db import make_engine, make_session_factory, unit_of_work

if TYPE_CHECKING:
    from models.base import Base
    from models.integration import Integration
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
    from models.preview import Preview, PreviewStatus
    from models.voice import CacheStatus, SpeechWait, Voice, VoiceBuild

_LAZY = {
    "models.base": ("Base",),
    "models.integration": ("Integration",),
    "models.job": (
        "ACTIVE",
        "TERMINAL",
        "ChapterStatus",
        "Chunk",
        "ChunkStatus",
        "Job",
        "JobChapter",
        "JobKind",
        "JobRerender",
        "JobStatus",
    ),
    "models.lexicon": ("Lexicon",),
    "models.metric": ("Counter", "MetricSample", "RateWindow"),
    "models.preview": ("Preview", "PreviewStatus"),
    "models.voice": ("CacheStatus", "SpeechWait", "Voice", "VoiceBuild"),
}


def __getattr__(name: str) -> Any:
    if not any(name in names for names in _LAZY.values()):
        raise AttributeError(f"module 'models' has no attribute {name!r}")
    for module, names in _LAZY.items():  # all of them: Base's metadata then holds every table
        loaded = importlib.import_module(module)
        globals().update({each: getattr(loaded, each) for each in names})
    return globals()[name]


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
    "Integration",
    "Job",
    "JobChapter",
    "JobKind",
    "JobRerender",
    "JobStatus",
    "Lexicon",
    "MetricSample",
    "Preview",
    "PreviewStatus",
    "RateWindow",
    "Role",
    "SpeechWait",
    "Voice",
    "VoiceBuild",
    "generate_key",
    "hash_key",
    "make_engine",
    "make_session_factory",
    "unit_of_work",
    "utcnow",
]

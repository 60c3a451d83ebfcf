"""Response examples for the OpenAPI document (``/docs`` shows them beside each answer).

Each example is built through its response model (``model_validate`` then ``model_dump``), so an example
that no longer fits its model fails when the document is built rather than misleading a reader; the
tests also validate every example against the schema the document gives for it. The values are those of
a real session against ``make run`` (docs/curl.md), shortened.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel

from webapi.admin import AdminVoiceList, CacheQueued, CachesQueued
from webapi.integration_schemas import AudiobookshelfOut
from webapi.keys import WebhookSecretOut
from webapi.lexicon_schemas import LexiconList, LexiconOut
from webapi.schemas import (
    ChunkQaOut,
    FileLinkOut,
    FileList,
    Health,
    JobList,
    JobOut,
    JobQaOut,
    Liveness,
    PreviewOut,
    PreviewPending,
    Readiness,
    VoiceList,
    VoiceOut,
)
from webapi.usage import UsageOut

VOICE_ID = "b9b94082-b850-4a3b-88e0-5a8b63a6ef82"
JOB_ID = "7e64d9ef-93ca-4bd8-a0be-50c30daa1207"
LEXICON_ID = "3f1c2a9e-5b7d-4c11-9e0a-2d4b6c8e1f37"
JOBS = f"/v1/jobs/{JOB_ID}"

_VOICE: dict[str, Any] = {
    "id": VOICE_ID,
    "name": "Keeper",
    "language": "en",
    "ref_text": "The old lighthouse keeper climbed the stairs every evening, counting each step.",
    "audio_duration": 10.038,
    "audio_sha256": "2460f2854e0a966feeb61ca3c52288f96652079ceabeaaa362d9e236df292f29",
    "created_at": "2026-11-25T10:14:17.398459Z",
    "cache_status": "ready",
    "cache_error": None,
    "cache_built_at": "2026-11-25T10:14:18.102113Z",
    "cache_engine": "espeak",
    "lexicon_ids": [],
    "warnings": [],
}
_ADMIN_VOICE = {**_VOICE, "owner": "alice", "cache_key": "espeak:1.52.0:2460f285…:9c1e…"}
_CHAPTERS = [
    {
        "index": 0,
        "title": "The Harbour",
        "start": 0.0,
        "state": "ready",
        "duration": 11.746,
        "url": None,
        "files": None,
    },
    {
        "index": 1,
        "title": "The Storm",
        "start": 11.807,
        "state": "ready",
        "duration": 6.3,
        "url": None,
        "files": None,
    },
]
_JOB: dict[str, Any] = {
    "id": JOB_ID,
    "title": "The Harbour",
    "status": "succeeded",
    "voice_id": VOICE_ID,
    "voice_ids": [VOICE_ID],
    "script_format": "markdown",
    "engine": "espeak",
    "estimated_seconds": 15.5,
    "progress": {
        "chunks_done": 4,
        "chunks_total": 4,
        "chunks_reused": 0,
        "percent": 100.0,
        "eta_seconds": None,
    },
    "error": None,
    "error_detail": None,
    "output": {
        "format": "mp3",
        "duration": 18.1078,
        "bytes": 291569,
        "url": f"{JOBS}/audio",
        "preset": "none",
        "split": "none",
        "files_url": f"{JOBS}/files",
        "report_url": None,
    },
    "revision": 0,
    "chapters": _CHAPTERS,
    "qa": {"chunks_flagged": 0, "chunks_rerendered": 0, "url": f"{JOBS}/qa"},
    "webhook": None,
    "created_at": "2026-11-25T10:14:19.419835Z",
    "started_at": "2026-11-25T10:14:19.623065Z",
    "finished_at": "2026-11-25T10:14:20.263124Z",
    "expires_at": "2026-12-02T10:14:20.263124Z",
    "expired_at": None,
}
_QUEUED_JOB: dict[str, Any] = {
    **_JOB,
    "status": "queued",
    "progress": {**_JOB["progress"], "chunks_done": 0, "percent": 0.0},
    "output": {
        **_JOB["output"],
        "duration": None,
        "bytes": None,
        "url": None,
        "files_url": None,
    },
    "chapters": [{**c, "start": None, "state": None, "duration": None} for c in _CHAPTERS],
    "started_at": None,
    "finished_at": None,
    "expires_at": None,
}
_LEXICON = {
    "id": LEXICON_ID,
    "name": "names",
    "language": "en",
    "entry_count": 1,
    "created_at": "2026-11-25T10:12:00.000000Z",
    "updated_at": "2026-11-25T10:12:00.000000Z",
}


def _files() -> dict[str, Any]:
    def file(name: str, kind: str, fmt: str, size: int, duration: float | None = None) -> dict[str, Any]:
        return {
            "name": name,
            "kind": kind,
            "format": fmt,
            "chapter": None,
            "part": None,
            "title": None,
            "duration": duration,
            "bytes": size,
            "url": f"{JOBS}/files/{name}",
        }

    return {
        "files": [
            file("The-Harbour.mp3", "book", "mp3", 291569, 18.1078),
            file("book.srt", "subtitles", "srt", 319),
            file("book.vtt", "subtitles", "vtt", 317),
            file("manifest.json", "manifest", "json", 4789),
        ]
    }


def _qa() -> dict[str, Any]:
    check = {"name": "duration", "score": 0.97, "limit": "0.55-1.8", "passed": True, "reason": ""}
    return {
        "job_id": JOB_ID,
        "chunks_flagged": 0,
        "chunks_rerendered": 1,
        "chunks": [
            {
                "seq": 1,
                "chapter": 0,
                "text": "The fog came in before dawn.",
                "status": "done",
                "passed": True,
                "flagged": False,
                "renders": 2,
                "reasons": [],
                "checks": [check],
                "missing_words": [],
                "extra_words": [],
                "audio_url": f"{JOBS}/chunks/1/audio",
            }
        ],
    }


def _accepted_chunk() -> dict[str, Any]:
    reason = "median pitch 241 Hz is 4.1 semitones above the voice's 190 Hz (at most 3 allowed)"
    check = {
        "name": "pitch",
        "score": 4.1,
        "limit": "within 3 st of 190 Hz",
        "passed": False,
        "reason": reason,
    }
    return {
        "seq": 7,
        "chapter": 1,
        "text": "Bring them in, said the harbour master.",
        "status": "done",
        "passed": False,
        "flagged": False,
        "renders": 3,
        "reasons": [reason],
        "checks": [check],
        "missing_words": [],
        "extra_words": [],
        "audio_url": f"{JOBS}/chunks/7/audio",
        "error": None,
        "accepted_at": "2026-11-28T09:12:03Z",
    }


def _preview() -> dict[str, Any]:
    return {
        "title": "The Harbour",
        "language": "en",
        "metadata": {"title": "The Harbour", "author": None, "language": None},
        "estimated_seconds": 15.5,
        "chapters": [
            {"index": 0, "title": "The Harbour", "chunks": 2, "characters": 91, "estimated_seconds": 9.1},
            {"index": 1, "title": "The Storm", "chunks": 2, "characters": 63, "estimated_seconds": 6.4},
        ],
        "chunks": [
            {
                "seq": 1,
                "chapter": 0,
                "text": "Doctor Hale counted three point five metres of rope on the quay.",
                "written": "Dr. Hale counted 3.5 metres of rope on the quay.",
                "voice_id": VOICE_ID,
                "rate": 1.0,
                "pause_after": 0.9,
                "fired": [
                    {"rule": "abbreviation", "written": "Dr.", "spoken": "Doctor"},
                    {"rule": "decimal", "written": "3.5", "spoken": "three point five"},
                ],
            }
        ],
        "rules": {"abbreviation": 1, "decimal": 1},
        "warnings": [],
        "cast": {
            "characters": [
                {
                    "name": "Dr. Hale",
                    "aliases": ["Hale"],
                    "lines": 3,
                    "words": 24,
                    "confidence": 0.88,
                    "sample": "Hold the line steady,",
                }
            ]
        },
        "lines": [
            {
                "index": 0,
                "text": "Hold the line steady,",
                "speaker": "Dr. Hale",
                "attribution": "explicit",
                "confidence": 0.95,
                "chunk": 2,
            }
        ],
    }


_BUILDERS: dict[type[BaseModel], Any] = {
    VoiceOut: lambda: _VOICE,
    VoiceList: lambda: {"voices": [_VOICE]},
    AdminVoiceList: lambda: {"voices": [_ADMIN_VOICE]},
    CacheQueued: lambda: {"voice": {**_ADMIN_VOICE, "cache_status": "pending"}, "queued": True},
    CachesQueued: lambda: {"queued": 3, "matched": 3},
    JobOut: lambda: _JOB,
    JobList: lambda: {"jobs": [_JOB]},
    FileList: _files,
    FileLinkOut: lambda: {
        "url": "/v1/links/f53df28e-4220-46a2-95bd-95a7d8d890f9/The-Harbour.mp3?expires=1795860000"
        "&key=5d0f6c1e-2a8b-4f3e-9c7d-1b2a3c4d5e6f&signature=Zm9yIGV4YW1wbGUsIG5vdCBhIHJlYWwgc2lnbmF0dXJlIQ",
        "expires_at": "2026-11-28T10:00:00Z",
    },
    JobQaOut: _qa,
    ChunkQaOut: _accepted_chunk,
    PreviewOut: _preview,
    PreviewPending: lambda: {
        "preview": "0b7a3c52-6d1e-4f0a-9e2b-5c8d7f6a1b3e",
        "status": "queued",
        "url": "/v1/previews/0b7a3c52-6d1e-4f0a-9e2b-5c8d7f6a1b3e",
        "created_at": "2026-11-28T09:12:03Z",
        "expires_at": "2026-11-28T10:12:03Z",
    },
    LexiconOut: lambda: {
        **_LEXICON,
        "entries": [{"grapheme": "Tome", "alias": "tohm", "phoneme": None, "case_sensitive": False}],
    },
    LexiconList: lambda: {"lexicons": [_LEXICON]},
    UsageOut: lambda: {
        "owner": "alice",
        "stored_bytes": {"used": 4520060, "quota": 21474836480},
        "unfinished_jobs": {"used": 0, "quota": 20},
        "audio_seconds_24h": {"used": 46.5, "quota": 172800.0},
        "voice_builds_24h": {
            "count": 2,
            "seconds": {"used": 31.4, "quota": 3600.0},
            "audio_seconds": 95.0,
            "reserved_seconds": 0.0,
        },
    },
    AudiobookshelfOut: lambda: {"url": "https://abs.example.com", "configured": True},
    Health: lambda: {"status": "ok", "database": "ok", "storage": "ok"},
    Liveness: lambda: {"status": "ok"},
    WebhookSecretOut: lambda: {
        "key_id": "5d0f6c1e-2a8b-4f3e-9c7d-1b2a3c4d5e6f",
        "secret": "4f1b…new secret, 64 hex digits…",
        "standard_secret": "whsec_NGYxYuKApm5ldyBzZWNyZXQsIDY0IGhleCBkaWdpdHPigKY=",
        "previous_valid_until": "2026-11-28T09:30:00Z",
    },
    Readiness: lambda: {
        "status": "ok",
        "checks": {"database": "ok", "broker": "ok", "storage": "ok"},
        "down": [],
    },
}
# Where one model answers for several states, the state this operation's answer is in.
ACCEPTED: dict[type[BaseModel], Any] = {
    JobOut: lambda: _QUEUED_JOB,
    VoiceOut: lambda: {**_VOICE, "cache_status": "pending", "cache_built_at": None, "cache_engine": None},
}

# Where one model answers 503 too: the example of that answer.
UNAVAILABLE: dict[type[BaseModel], Any] = {
    Health: lambda: {"status": "degraded", "database": "OperationalError"},
    Readiness: lambda: {
        "status": "unavailable",
        "checks": {"database": "ok", "broker": "down: ConnectionError", "storage": "ok"},
        "down": ["broker"],
    },
}


@cache
def response_example(model: type[BaseModel], status: int) -> dict[str, Any] | None:
    """The example of ``model`` answered with ``status`` (202: the work just began), or None."""
    builder = (
        (ACCEPTED.get(model) if status == 202 else None)
        or (UNAVAILABLE.get(model) if status == 503 else None)
        or _BUILDERS.get(model)
    )
    if builder is None:
        return None
    example: dict[str, Any] = model.model_validate(builder()).model_dump(mode="json")
    return example

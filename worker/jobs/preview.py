"""What a job would read, chunk by chunk (``POST /v1/scripts/preview``), as the JSON body the API answers.

:func:`preview_body` turns a plan into that body; the API calls it for a script under the inline cap, and
:func:`preview_script` (a task) for an EPUB or a longer script, whose request the API stored as a
:class:`~models.Preview` row. The task stores the body, or the error the inline path would have answered
(status and error body), on the row; ``GET /v1/previews/{id}`` serves either as it is. Safe to run twice:
the row is taken by a conditional UPDATE from queued to running, and only the taker plans.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import delete, select, update

from models import Preview, PreviewStatus, Voice, unit_of_work, utcnow
from worker.audio import Pauses
from worker.jobs.job_plans import plan_request_of
from worker.jobs.plan import PlanError, ScriptPlan, plan
from worker.runtime import Runtime
from worker.script.attribution import NARRATOR
from worker.script.language_id import script_language_warnings
from worker.script.warnings import plan_warnings
from worker.task_names import PREVIEW_SCRIPT, Enqueue

log = logging.getLogger(__name__)

# The most lines of dialogue a preview lists (each is a small object; a long novel has tens of thousands).
MAX_PREVIEW_LINES = 20_000


@dataclass(frozen=True)
class PreviewAsk:
    """What the preview's body takes from the request besides the plan."""

    title: str | None
    pauses: Pauses
    speed: float
    with_cast: bool
    chars_per_second: float
    max_chunk_chars: int


class PreviewOutcome(StrEnum):
    READY = "ready"
    FAILED = "failed"
    SKIPPED = "skipped"  # taken already, or gone


def preview_body(ask: PreviewAsk, script_plan: ScriptPlan) -> dict[str, Any]:
    """The preview's JSON body (the API's PreviewOut, field for field)."""
    chunks: list[dict[str, Any]] = []
    rules: Counter[str] = Counter()
    per_chapter: dict[int, list[float]] = {}
    for spec, voice_id in zip(script_plan.specs, script_plan.chunk_voices, strict=True):
        fired = [_fired(f) for f in spec.fired]
        rules.update(f["rule"] for f in fired)
        pause = ask.pauses.seconds(spec.pause_after if spec.pause_seconds is None else spec.pause_seconds)
        chunks.append(
            {
                "seq": spec.seq,
                "chapter": spec.chapter,
                "text": spec.text,
                "written": spec.written,
                "voice_id": str(voice_id),
                "rate": round(ask.speed * (spec.rate or 1.0), 4),
                "pause_after": float(pause),
                "fired": fired,
                "speaker": (spec.speaker or NARRATOR) if ask.with_cast else None,
            }
        )
        seconds = len(spec.text) / ask.chars_per_second / ask.speed / (spec.rate or 1.0) + pause
        totals = per_chapter.setdefault(spec.chapter, [0, 0, 0.0])
        totals[0] += 1
        totals[1] += len(spec.text)
        totals[2] += seconds
    chapters: list[dict[str, Any]] = [
        {
            "index": index,
            "title": chapter.title,
            "chunks": int(per_chapter.get(index, [0, 0, 0.0])[0]),
            "characters": int(per_chapter.get(index, [0, 0, 0.0])[1]),
            "estimated_seconds": round(per_chapter.get(index, [0, 0, 0.0])[2], 1),
        }
        for index, chapter in enumerate(script_plan.chapters)
    ]
    info = script_plan.info
    return {
        "title": ask.title or info.title,
        "language": script_plan.language,
        "metadata": {"title": info.title, "author": info.author, "language": info.language},
        "estimated_seconds": round(sum(c["estimated_seconds"] for c in chapters), 1),
        "chapters": chapters,
        "chunks": chunks,
        "rules": dict(rules.most_common()),
        "warnings": [
            *script_plan.warnings,
            *script_language_warnings(script_plan.chapters, script_plan.language),
            *plan_warnings(script_plan.chapters, script_plan.specs, ask.max_chunk_chars),
            *_lines_warning(script_plan),
        ],
        "cast": {"characters": _cast_members(script_plan)},
        "lines": _lines(script_plan),
    }


def _cast_members(script_plan: ScriptPlan) -> list[dict[str, Any]]:
    members = script_plan.cast.characters if script_plan.cast is not None else ()
    return [
        {
            "name": m.name,
            "aliases": list(m.aliases),
            "lines": m.lines,
            "words": m.words,
            "confidence": m.confidence,
            "sample": m.sample,
        }
        for m in members
    ]


def _lines(script_plan: ScriptPlan) -> list[dict[str, Any]]:
    """Every line (at most MAX_PREVIEW_LINES), with the speaker after the job's corrections."""
    if script_plan.cast is None:
        return []
    corrected = script_plan.corrected
    return [
        {
            "index": line.index,
            "text": line.text,
            "speaker": script_plan.line_speakers.get(line.index, line.speaker),
            "attribution": "corrected" if line.index in corrected else line.attribution,
            "confidence": 1.0 if line.index in corrected else line.confidence,
            "chunk": script_plan.line_chunks.get(line.index),
        }
        for line in script_plan.cast.lines[:MAX_PREVIEW_LINES]
    ]


def _lines_warning(script_plan: ScriptPlan) -> list[str]:
    count = len(script_plan.cast.lines) if script_plan.cast is not None else 0
    if count <= MAX_PREVIEW_LINES:
        return []
    return [f"the script has {count} lines of dialogue; the preview lists the first {MAX_PREVIEW_LINES}"]


def _fired(fired: object) -> dict[str, str]:
    return {
        "rule": str(getattr(fired, "rule", "")),
        "written": str(getattr(fired, "written", "")),
        "spoken": str(getattr(fired, "spoken", "")),
    }


def plan_error_answer(exc: PlanError) -> dict[str, Any]:
    """The inline path's answer to a script that cannot be planned: 422 and the error's body."""
    return {"status": 422, "body": {"error": exc.detail()}}


def preview_script(rt: Runtime, preview_id: uuid.UUID) -> PreviewOutcome:
    """Plan the stored request's script and store the preview's body or its error on the row."""
    with unit_of_work(rt.sessions) as session:
        taken = session.execute(
            update(Preview)
            .where(Preview.id == preview_id, Preview.status == PreviewStatus.QUEUED.value)
            .values(status=PreviewStatus.RUNNING.value)
        )
        if getattr(taken, "rowcount", 0) != 1:
            return PreviewOutcome.SKIPPED
    with rt.sessions() as session:
        row = session.get(Preview, preview_id)
        assert row is not None
        voice = session.get(Voice, row.voice_id)
        source: str | bytes | None = row.script_file if row.script_format == "epub" else row.script
        options = dict(row.options)
        try:
            if voice is None or voice.deleted_at is not None:
                raise PlanError(
                    "the preview's voice was deleted before its script was planned", "unknown_voice"
                )
            request = plan_request_of(
                rt, row.owner, row.script_format, row.engine, options, voice, source or "", attribute=True
            )
            script_plan = plan(session, request)
        except PlanError as exc:
            return _finish(rt, preview_id, None, plan_error_answer(exc))
    ask = PreviewAsk(
        title=options.get("title"),
        pauses=Pauses(**options.get("pauses", {})),
        speed=float(options.get("speed", 1.0)),
        with_cast=isinstance(options.get("cast"), dict),
        chars_per_second=rt.settings.limits.speech_chars_per_second,
        max_chunk_chars=rt.engine(row.engine).max_chunk_chars,
    )
    body = json.dumps(preview_body(ask, script_plan), separators=(",", ":"))
    log.info(
        "preview %s: %d chunks in %d chapters", preview_id, len(script_plan.specs), len(script_plan.chapters)
    )
    return _finish(rt, preview_id, body, None)


def _finish(
    rt: Runtime, preview_id: uuid.UUID, body: str | None, error: dict[str, Any] | None
) -> PreviewOutcome:
    status = PreviewStatus.READY if error is None else PreviewStatus.FAILED
    with unit_of_work(rt.sessions) as session:
        session.execute(
            update(Preview)
            .where(Preview.id == preview_id, Preview.status == PreviewStatus.RUNNING.value)
            .values(
                status=status.value,
                result=body,
                error=error,
                script=None,
                script_file=None,
                finished_at=utcnow(),
            )
        )
    return PreviewOutcome.READY if error is None else PreviewOutcome.FAILED


def fail_preview(rt: Runtime, preview_id: uuid.UUID, message: str) -> None:
    """A preview whose planning broke off (a time limit, a crash): failed with a 422 saying so, never left
    running for its client to poll until it expires."""
    answer = {
        "status": 422,
        "body": {"error": {"code": "preview_failed", "message": message, "field": "script"}},
    }
    _finish(rt, preview_id, None, answer)


def expire_previews(rt: Runtime, now: datetime) -> int:
    """Remove the previews past their expiry (returns how many), and fail those a worker took longer ago
    than a task may run (its process died): their clients get an answer rather than a wait."""
    overdue = now - timedelta(seconds=rt.settings.tasks.task_time_limit)
    with unit_of_work(rt.sessions) as session:
        removed = session.execute(delete(Preview).where(Preview.expires_at < now))
        stuck = list(
            session.scalars(
                select(Preview.id).where(
                    Preview.status == PreviewStatus.RUNNING.value, Preview.created_at < overdue
                )
            )
        )
    for preview_id in stuck:
        fail_preview(rt, preview_id, "planning the script broke off (its worker stopped)")
    return int(getattr(removed, "rowcount", 0) or 0)


def resend_queued_previews(rt: Runtime, enqueue: Enqueue, now: datetime) -> int:
    """Send the task again for previews queued longer than the grace period (a lost message): the
    database, not the broker, says what is waiting. A duplicate finds the preview taken and skips it."""
    quiet_since = now - timedelta(seconds=rt.settings.tasks.queued_grace_seconds)
    with rt.sessions() as session:
        waiting = list(
            session.scalars(
                select(Preview.id)
                .where(Preview.status == PreviewStatus.QUEUED.value, Preview.created_at < quiet_since)
                .limit(500)
            )
        )
    for preview_id in waiting:
        enqueue(PREVIEW_SCRIPT, [str(preview_id)])
    return len(waiting)

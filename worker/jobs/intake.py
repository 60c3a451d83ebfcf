"""Planning a long script on a worker: what the API does on the request path for short ones.

The job arrives queued with its script and no chunks. :func:`plan_job` plans it (worker.jobs.plan) and,
in one transaction, adds its chunks, records chapters, voices and estimate, and drops the script; then it
sends the start. A script that cannot be planned fails the job with the same code, line and column the
API would have answered (kept in the job's ``error_detail``). Safe to run twice: the job is taken by a
conditional UPDATE on its script, and only the taker writes chunks.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from enum import StrEnum
from typing import Any

from sqlalchemy.orm import Session

from models import Job, JobStatus, Voice, unit_of_work, utcnow
from worker.audio import Pauses
from worker.cast_llm import LlmSettings
from worker.jobs import actions, limits
from worker.jobs import state as jobs
from worker.jobs.plan import PlanError, PlanRequest, ScriptPlan, plan
from worker.jobs.usage import QuotaExceeded, Quotas, check_new_job, usage_of
from worker.runtime import Runtime
from worker.script import ReadOptions
from worker.script.cast import CastRequest
from worker.script.language_id import script_language_warnings
from worker.task_names import START_JOB, Enqueue

log = logging.getLogger(__name__)


class PlanOutcome(StrEnum):
    PLANNED = "planned"
    FAILED = "failed"
    SKIPPED = "skipped"  # planned already, or the job has ended


def apply_plan(job: Job, script_plan: ScriptPlan, title: str | None = None) -> None:
    """What a plan records on its job row (chunks are inserted beside it). What the script says about
    itself (EPUB metadata, front matter) fills the tags the request left out: author and language. The
    plan's warnings are kept, with one more when the script is written in another language than the job's
    (worker.script.language_id). ``title``: the job's title, when its planner takes it from the script."""
    metadata = dict(job.options.get("metadata", {}))
    if script_plan.info.author and "author" not in metadata:
        metadata["author"] = script_plan.info.author
    if "language" not in metadata:
        metadata["language"] = tag_language(script_plan.info.language or script_plan.language)
    warnings = [*script_plan.warnings, *script_language_warnings(script_plan.chapters, script_plan.language)]
    jobs.record_plan(
        job,
        title=title,
        chapters=[{"index": i, "title": c.title} for i, c in enumerate(script_plan.chapters)],
        chunks_total=len(script_plan.specs),
        estimated_seconds=round(script_plan.size.total_seconds, 1),
        options={
            **job.options,
            "metadata": metadata,
            "voice_ids": [str(v) for v in script_plan.voice_ids(job.voice_id)],
            "warnings": warnings,
        },
    )


def tag_language(language: str) -> str:
    """The primary subtag of a language code ("en-GB" -> "en"), as the output's language tag."""
    return language.replace("_", "-").split("-")[0].lower()[:3] or "en"


def plan_request(rt: Runtime, job: Job, voice: Voice, script: str | bytes) -> PlanRequest:
    """The plan request a job records (its options carry what the API was asked)."""
    return plan_request_of(rt, job.owner, job.script_format, job.engine, job.options, voice, script)


def plan_request_of(
    rt: Runtime,
    owner: str,
    script_format: str,
    engine: str,
    options: dict[str, Any],
    voice: Voice,
    script: str | bytes,
    *,
    attribute: bool = False,
) -> PlanRequest:
    """The plan request that stored options (a job's, or a preview's in the same shape) describe."""
    read = options.get("script_options", {})
    return PlanRequest(
        owner=owner,
        voice=voice,
        script=script,
        script_format=script_format,
        pauses=Pauses(**options.get("pauses", {})),
        max_chunk_chars=rt.engine(engine).max_chunk_chars,
        job_limits=limits.JobLimits.of(rt.settings),
        language=options.get("language"),
        read_options=ReadOptions(
            bool(read.get("front_matter", False)),
            bool(read.get("back_matter", False)),
            read.get("footnotes", "skip"),
            rt.settings.limits.max_script_chars,
        ),
        lexicons=tuple(options.get("lexicons", [])),
        engine=engine,
        split_chapters=_splits_by_name(options),
        attribute=attribute,
        cast=cast_request(options.get("cast")),
        llm=LlmSettings.of(rt.settings),
    )


def cast_request(stored: object) -> CastRequest | None:
    """The cast a job asked for, as its options record it (the API's ``cast`` field, validated)."""
    if not isinstance(stored, dict):
        return None
    return CastRequest(
        voices=dict(stored.get("voices") or {}),
        default=stored.get("default"),
        lines={int(index): name for index, name in (stored.get("lines") or {}).items()},
        llm=stored.get("llm") is True,
    )


def _splits_by_name(options: dict[str, Any]) -> bool:
    """Whether the job asked for chapter files by name (an ACX job splits whatever chapters there are)."""
    delivery = options.get("delivery")
    if not isinstance(delivery, dict):
        return False
    return delivery.get("split") == "chapter" and delivery.get("preset") != "acx"


def plan_job(rt: Runtime, job_id: uuid.UUID, enqueue: Enqueue) -> PlanOutcome:
    with rt.sessions() as session:
        job = session.get(Job, job_id)
        if job is None or job.script is None or job.status != JobStatus.QUEUED:
            return PlanOutcome.SKIPPED
        voice = session.get(Voice, job.voice_id)
        if voice is None or voice.deleted_at is not None:
            actions.fail(rt, job_id, "the job's voice was deleted before its script was planned", enqueue)
            return PlanOutcome.FAILED
        script: str | bytes = (job.script_file or b"") if job.script_format == "epub" else job.script
        try:
            script_plan = plan(session, plan_request(rt, job, voice, script))
            title = _title(job, script_plan)
            if job.script_format == "epub":
                _check_quota(rt, session, job, script_plan)
        except PlanError as exc:
            return _fail(rt, job_id, exc, enqueue)
    with unit_of_work(rt.sessions) as session:
        if not jobs.take_script(session, job_id, utcnow()):
            return PlanOutcome.SKIPPED
        job = session.get(Job, job_id)
        assert job is not None
        apply_plan(job, script_plan, title)
        jobs.add_chunks(session, job, script_plan.specs, script_plan.chunk_voices)
    enqueue(START_JOB, [str(job_id)])
    log.info("planned: %d chunks in %d chapters", len(script_plan.specs), len(script_plan.chapters))
    return PlanOutcome.PLANNED


def _title(job: Job, script_plan: ScriptPlan) -> str:
    """The job's title: the request's, else the one its script names (an EPUB's, as the inline path took
    it); a PlanError like the inline path's 422 when neither names one."""
    if not job.options.get("title_from_script"):
        return job.title
    title = " ".join((script_plan.info.title or "").split())[:200]
    if not title:
        raise PlanError("give the job a title: the script names none", "validation_error", field="title")
    return title


def _check_quota(rt: Runtime, session: Session, job: Job, script_plan: ScriptPlan) -> None:
    """An EPUB's length is known only now: its estimate against the owner's quotas, as the API checks a
    text's when it arrives (the job itself, counted unfinished already, is not counted twice)."""
    usage = usage_of(session, job.owner, utcnow(), shared_chunks=rt.storage.kind == "local")
    seconds = script_plan.size.total_seconds
    try:
        check_new_job(
            replace(usage, unfinished_jobs=0),
            Quotas.of(rt.settings),
            seconds,
            rt.engine(job.engine).sample_rate,
        )
    except QuotaExceeded as exc:
        raise PlanError(exc.message, exc.code) from exc


def _fail(rt: Runtime, job_id: uuid.UUID, exc: PlanError, enqueue: Enqueue) -> PlanOutcome:
    where = f" (line {exc.line}, column {exc.column})" if exc.line is not None else ""
    actions.fail(rt, job_id, f"{exc.code}: {exc.message}{where}", enqueue, detail=exc.detail())
    return PlanOutcome.FAILED

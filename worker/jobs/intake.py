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

from sqlalchemy.orm import Session

from models import Job, JobStatus, Voice, unit_of_work, utcnow
from worker.jobs import actions
from worker.jobs import state as jobs
from worker.jobs.job_plans import apply_plan, plan_request
from worker.jobs.plan import PlanError, ScriptPlan, plan
from worker.jobs.usage import QuotaExceeded, Quotas, check_new_job, usage_of
from worker.runtime import Runtime
from worker.task_names import START_JOB, Enqueue

log = logging.getLogger(__name__)


class PlanOutcome(StrEnum):
    PLANNED = "planned"
    FAILED = "failed"
    SKIPPED = "skipped"  # planned already, or the job has ended


def plan_job(rt: Runtime, job_id: uuid.UUID, enqueue: Enqueue) -> PlanOutcome:
    """Plan a queued job's script, add its chunks and send its start (the one entry)."""
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

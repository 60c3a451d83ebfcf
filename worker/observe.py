"""The worker's Prometheus figures, recorded through worker.counters (batched, summed across processes in
the database, served by the API's GET /metrics). Names and labels are listed in docs/observability.md;
every label has a small fixed set of values (engine, status, kind of stitch)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import select

from models import Job
from worker import counters
from worker.runtime import Runtime

JOB_DURATION = "tome_job_duration_seconds"
QUEUE_WAIT = "tome_job_queue_wait_seconds"
CHUNK_RENDER = "tome_chunk_render_seconds"
REAL_TIME_FACTOR = "tome_chunk_real_time_factor"
STITCH = "tome_stitch_seconds"
PROMPT_BUILD = "tome_voice_prompt_build_seconds"

HELP = {
    JOB_DURATION: "Jobs from start (queued -> running) to their end, by final status",
    QUEUE_WAIT: "Jobs from submission to start (queued -> running)",
    CHUNK_RENDER: "Engine time per chunk (a batch's time shared by the chunks' audio length)",
    REAL_TIME_FACTOR: "Engine seconds per second of audio rendered, per chunk",
    STITCH: "Time to stitch and encode a chapter or a book",
    PROMPT_BUILD: "Time to encode a voice's speaker prompt from its reference",
}
BUCKETS = {
    JOB_DURATION: counters.JOB_BUCKETS,
    QUEUE_WAIT: counters.JOB_BUCKETS,
    REAL_TIME_FACTOR: counters.RATIO_BUCKETS,
}


def _observe(rt: Runtime, name: str, labels: dict[str, str], value: float) -> None:
    counters.observe(rt.sessions, name, labels, max(value, 0.0), BUCKETS.get(name, counters.SECONDS_BUCKETS))


def job_started(rt: Runtime, job_id: uuid.UUID) -> None:
    with rt.sessions() as session:
        row = session.execute(
            select(Job.created_at, Job.started_at, Job.engine).where(Job.id == job_id)
        ).one_or_none()
    if row is not None and row.started_at is not None:
        _observe(rt, QUEUE_WAIT, {"engine": row.engine}, (row.started_at - row.created_at).total_seconds())


def job_ended(rt: Runtime, job_id: uuid.UUID) -> None:
    with rt.sessions() as session:
        row = session.execute(
            select(Job.status, Job.started_at, Job.finished_at, Job.engine).where(Job.id == job_id)
        ).one_or_none()
    if row is None or row.started_at is None or row.finished_at is None:
        return  # failed before it started: its wait never ended, and it has no duration
    labels = {"status": row.status, "engine": row.engine}
    _observe(rt, JOB_DURATION, labels, (row.finished_at - row.started_at).total_seconds())


def chunks_rendered(rt: Runtime, engine: str, seconds: float, audio_seconds: Sequence[float]) -> None:
    """One engine call of ``seconds`` that rendered chunks of these lengths."""
    total = sum(audio_seconds)
    for length in audio_seconds:
        share = seconds * (length / total) if total > 0 else seconds / max(len(audio_seconds), 1)
        _observe(rt, CHUNK_RENDER, {"engine": engine}, share)
        if total > 0:
            _observe(rt, REAL_TIME_FACTOR, {"engine": engine}, seconds / total)


def stitched(rt: Runtime, what: str, seconds: float) -> None:
    _observe(rt, STITCH, {"what": what}, seconds)


def prompt_built(rt: Runtime, engine: str, seconds: float) -> None:
    _observe(rt, PROMPT_BUILD, {"engine": engine}, seconds)

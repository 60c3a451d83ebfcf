"""The same job on real Celery worker processes: ``celery -A worker.main worker`` (prefork pool) on the
filesystem broker and SQLite, configured only through TOME_* variables, as ``make run`` runs it.

The worker is started and waited for before the clock starts; the clock stops when the database says
the job has finished. Each pool process has its own prompt LRU, so up to one file read per process.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from bench.scene import Scene
from models import TERMINAL, Job
from worker.celery_app import ensure_broker_folders, make_celery
from worker.processes import WorkerProcess

JOB_TIMEOUT = 90.0
POLL_SECONDS = 0.05
RENDERED = re.compile(
    r"^\S+ \S+ INFO (\S+) worker\.jobs\.render job=\S+: (\d+) chunks rendered", re.MULTILINE
)
RETRIED = re.compile(r"^\S+ \S+ INFO \S+ celery\.app\.trace: Task (\S+)\[\S+\] retry: ", re.MULTILINE)


@dataclass(frozen=True)
class WorkerRun:
    concurrency: int
    startup_seconds: float
    wall_seconds: float
    status: str
    audio_seconds: float
    error: str | None
    # Seconds from sending the messages until the job was first seen (polling every 50 ms) in each status.
    seen: dict[str, float]
    chunks_by_process: dict[str, int]  # from the worker's log: chunks each pool process rendered
    retries: dict[str, int]  # from the worker's log: Celery retries per task name


def run_with_workers(scene: Scene, concurrency: int, log_path: Path) -> WorkerRun:
    """Send the scene's messages to a real worker and wait for the job to finish."""
    ensure_broker_folders(scene.settings)
    began = time.perf_counter()
    worker = WorkerProcess(scene.settings, log_path.parent, concurrency=concurrency)
    try:
        worker.wait_ready()
        startup = time.perf_counter() - began
        app = make_celery(scene.settings)
        started = time.perf_counter()
        for name, args in scene.messages:
            app.send_task(name, args=args)
        deadline = started + JOB_TIMEOUT
        job_status = ""
        seen: dict[str, float] = {}
        while time.perf_counter() < deadline:
            with scene.rt.sessions() as session:
                job_status = session.scalar(select(Job.status).where(Job.id == scene.job_id)) or ""
            seen.setdefault(job_status, time.perf_counter() - started)
            if job_status in TERMINAL:
                break
            time.sleep(POLL_SECONDS)
        wall = time.perf_counter() - started
    finally:
        worker.stop()
    with scene.rt.sessions() as session:
        job = session.get(Job, scene.job_id)
        assert job is not None
        audio, error, job_status = job.output_duration or 0.0, job.error, job.status
    if job_status not in TERMINAL:
        error = f"not finished after {JOB_TIMEOUT:.0f} s; worker log: {worker.log_path}"
    log = worker.log()
    by_process: Counter[str] = Counter()
    for match in RENDERED.finditer(log):
        by_process[match.group(1)] += int(match.group(2))
    retries = Counter(match.group(1) for match in RETRIED.finditer(log))
    return WorkerRun(
        concurrency, startup, wall, job_status, audio, error, seen, dict(by_process), dict(retries)
    )

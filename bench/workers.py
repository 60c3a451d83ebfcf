"""The same job on real Celery worker processes: ``celery -A worker.main worker`` (prefork pool) on the
filesystem broker and SQLite, configured only through TOME_* variables, as ``make run`` runs it.

The worker is started and waited for before the clock starts; the clock stops when the database says
the job has finished. Each pool process has its own prompt LRU, so up to one file read per process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from bench.scene import Scene
from models import TERMINAL, Job
from worker.celery_app import ensure_broker_folders, make_celery
from worker.config import Settings

READY_TIMEOUT = 60.0
JOB_TIMEOUT = 90.0
POLL_SECONDS = 0.05
RENDERED = re.compile(r"^\S+ \S+ INFO (\S+) worker\.pipeline: job \S+: (\d+) chunks rendered", re.MULTILINE)
RETRIED = re.compile(r"^\S+ \S+ INFO \S+ celery\.app\.trace: Task (\S+)\[\S+\] retry: ", re.MULTILINE)


def settings_env(settings: Settings) -> dict[str, str]:
    """This environment without any TOME_* variable, plus every setting as its TOME_* variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOME_")}
    for f in dataclasses.fields(Settings):
        env[f"TOME_{f.name.upper()}"] = str(getattr(settings, f.name))
    return env


class Worker:
    """One ``celery worker`` child process with ``concurrency`` pool processes; stopped by its own PID."""

    def __init__(self, settings: Settings, log_path: Path, concurrency: int):
        self.log_path = log_path
        cmd = [
            sys.executable, "-m", "celery", "-A", "worker.main", "worker",
            "--loglevel", "INFO", "--concurrency", str(concurrency), "--queues", settings.queue,
            "--hostname", f"bench-{os.getpid()}@%h", "--without-gossip", "--without-mingle",
            "--without-heartbeat",
        ]  # fmt: skip
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, env=settings_env(settings), stdout=self._log, stderr=subprocess.STDOUT, cwd=Path.cwd()
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"celery worker exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            if " ready." in self.log():
                return
            time.sleep(0.1)
        raise TimeoutError(f"celery worker not ready after {timeout} s:\n{self.log()[-3000:]}")

    def _pool_pids(self) -> list[int]:
        pids: list[int] = []
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
                pids.extend(int(p) for p in (task / "children").read_text().split())
        return pids

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            pool = self._pool_pids()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            for pid in pool:  # a pool process orphaned by a killed parent
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self._log.close()


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
    worker = Worker(scene.settings, log_path, concurrency)
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
        error = f"not finished after {JOB_TIMEOUT:.0f} s; worker log: {log_path}"
    log = worker.log()
    by_process: Counter[str] = Counter()
    for match in RENDERED.finditer(log):
        by_process[match.group(1)] += int(match.group(2))
    retries = Counter(match.group(1) for match in RETRIED.finditer(log))
    return WorkerRun(
        concurrency, startup, wall, job_status, audio, error, seen, dict(by_process), dict(retries)
    )

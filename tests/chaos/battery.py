"""The chaos battery: many jobs on real workers while things are killed, restarted and frozen.

Scenario A (production stack): PostgreSQL and Redis instances of the battery's own (so restarting them
never touches the machine's shared services), two worker processes, the espeak-paced engine (espeak's
audio at a GPU's pace). While jobs run, a worker pool child is SIGKILLed every ``kill_every`` seconds,
Redis is restarted (losing every queued message: it keeps nothing on disk), PostgreSQL is restarted,
and one worker is SIGSTOPped for ``stop_seconds``. Scenario B (embedded): SQLite and the filesystem
broker under many concurrent jobs and pollers.

Then every output is checked by content: WAV output, so each chunk's samples must appear exactly at
its offset (chunks in order, each once, pauses as configured); nothing may be left unfinished.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from bench.engines import MODULE as ENGINE_MODULE
from models import Chunk, Job
from models.migrate import upgrade_head
from tests.chaos.services import OwnPostgres, OwnRedis
from tests.support.apps import close_app, tome_of
from tests.support.audio import reference_wav
from webapi import create_app
from webapi.cli import mint_key
from worker.audio import Pauses
from worker.config import Settings, load_settings
from worker.processes import BeatProcess, WorkerProcess
from worker.sweeper import TEMP_PATTERNS

TERMINAL = {"succeeded", "failed", "cancelled"}


@dataclass
class ChaosConfig:
    jobs: int = 200
    chunks_per_job: int = 20
    workers: int = 2
    concurrency: int = 2
    seconds_per_chunk: float = 0.15
    kill_every: float = 20.0
    # At most this many kills (None: as many as the deadline allows). A bound keeps a slow machine, where
    # the jobs take longer, from also taking more kills: each kill can cost a chunk one of its attempts.
    max_kills: int | None = None
    redis_restarts: int = 1
    pg_restarts: int = 1
    stop_seconds: float = 90.0
    # When the one-off faults happen, in seconds from the first job's submission.
    stop_at: float = 30.0
    redis_at: float = 60.0
    pg_at: float = 120.0
    deadline_seconds: float = 3600.0
    chunks_per_task: int = 4
    submit_threads: int = 4


@dataclass
class Figures:
    scenario: str
    jobs: int = 0
    kills: int = 0
    redis_restarts: int = 0
    pg_restarts: int = 0
    stops: int = 0
    lost: int = 0
    duplicated: int = 0
    missing: int = 0
    failed: int = 0
    max_terminal_s: float = 0.0
    server_errors: int = 0
    unavailable: int = 0
    locked_errors: int = 0
    temp_files: int = 0
    wall_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"chaos: jobs={self.jobs} kills={self.kills} redis_restarts={self.redis_restarts} "
            f"pg_restarts={self.pg_restarts} lost={self.lost} duplicated={self.duplicated} "
            f"missing={self.missing} max_terminal_s={self.max_terminal_s:.0f} "
            f"server_errors={self.server_errors}"
        )

    def details(self) -> str:
        return (
            f"chaos[{self.scenario}]: failed={self.failed} stops={self.stops} "
            f"unavailable_503={self.unavailable} "
            f"database_locked={self.locked_errors} temp_files={self.temp_files} wall_s={self.wall_s:.0f}"
        )

    @property
    def ok(self) -> bool:
        return not (
            self.lost or self.duplicated or self.missing or self.server_errors or self.locked_errors
            or self.temp_files or self.problems
        )  # fmt: skip


class Api:
    """The API in this process (Flask test client, thread-safe per call), counting what callers saw."""

    def __init__(self, app: Flask, headers: dict[str, str], figures: Figures):
        self.app, self.headers, self.figures = app, headers, figures
        self._lock = threading.Lock()

    def call(self, method: str, url: str, headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
        client: FlaskClient = self.app.test_client()
        response = client.open(url, method=method, headers={**self.headers, **(headers or {})}, **kwargs)
        body = response.get_data(as_text=True)
        with self._lock:
            if "database is locked" in body:
                self.figures.locked_errors += 1
            if response.status_code == 503:
                self.figures.unavailable += 1
            elif response.status_code >= 500:
                self.figures.server_errors += 1
                self.figures.problems.append(f"{method} {url}: {response.status_code} {body[:200]}")
        return response


def script_for(job_index: int, chunks: int) -> str:
    """One paragraph per chunk, each with words no other chunk has (so content identifies a chunk)."""
    words = ["amber", "birch", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper"]
    paragraphs = []
    for i in range(chunks):
        tag = " ".join(words[int(d)] for d in f"{job_index:03d}{i:03d}")
        paragraphs.append(f"Job {job_index}, part {i}: {tag}. The lanterns burned until the morning came.")
    return "\n\n".join(paragraphs)


def submit_all(api: Api, config: ChaosConfig, voice: str, deadline: float) -> list[str]:
    """Submit every job, retrying through outages with an Idempotency-Key (so a retry never duplicates)."""
    ids: list[str | None] = [None] * config.jobs

    def submit(index: int) -> None:
        body = {
            "title": f"chaos {index}",
            "script": script_for(index, config.chunks_per_job),
            "voice": voice,
            # unmastered, so that verify_outputs can find every chunk's exact samples in the book
            "output": {"format": "wav", "loudness": None},
        }
        while time.monotonic() < deadline:
            response = api.call("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": f"c{index}"})
            if response.status_code == 202:
                ids[index] = response.get_json()["id"]
                return
            time.sleep(1.0)

    indexes = iter(range(config.jobs))
    lock = threading.Lock()

    def run() -> None:
        while True:
            with lock:
                index = next(indexes, None)
            if index is None:
                return
            submit(index)

    threads = [threading.Thread(target=run) for _ in range(config.submit_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [i for i in ids if i is not None]


class Chaos:
    """The faults, on a schedule, in a thread of their own; every process it signals is one we started."""

    def __init__(
        self,
        config: ChaosConfig,
        workers: list[WorkerProcess],
        figures: Figures,
        redis: OwnRedis | None,
        pg: OwnPostgres | None,
        log: Callable[[str], None] = print,
    ):
        self.config, self.workers, self.figures = config, workers, figures
        self.redis, self.pg = redis, pg
        self.log = log
        self.stop_event = threading.Event()
        self.stopped: WorkerProcess | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.rng = random.Random(7)

    def __enter__(self) -> Chaos:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop_event.set()
        self.thread.join(timeout=120)
        if self.stopped is not None:
            self._resume()

    def _resume(self) -> None:
        assert self.stopped is not None
        for pid in [self.stopped.proc.pid, *self.stopped.child_pids()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.stopped = None

    def _events(self) -> list[tuple[float, str]]:
        c = self.config
        kills = int(c.deadline_seconds / max(c.kill_every, 1))
        if c.max_kills is not None:
            kills = min(kills, c.max_kills)
        events = [(c.kill_every * (i + 1), "kill") for i in range(kills)]
        events += [(c.redis_at * (i + 1), "redis") for i in range(c.redis_restarts)]
        events += [(c.pg_at * (i + 1), "pg") for i in range(c.pg_restarts)]
        if c.stop_seconds > 0 and len(self.workers) > 1:
            events.append((c.stop_at, "stop"))
        return sorted(events)

    def _run(self) -> None:
        started = time.monotonic()
        resume_at: float | None = None
        for at, event in self._events():
            while time.monotonic() - started < at:
                if self.stop_event.wait(0.2):
                    return
                if resume_at is not None and time.monotonic() >= resume_at:
                    self._resume()
                    resume_at = None
            self.log(f"chaos: t={time.monotonic() - started:.0f}s {event}")
            try:
                if event == "kill":
                    children = [pid for w in self.workers if w is not self.stopped for pid in w.child_pids()]
                    if children:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(self.rng.choice(children), signal.SIGKILL)
                        self.figures.kills += 1
                elif event == "redis" and self.redis is not None:
                    self.redis.restart()
                    self.figures.redis_restarts += 1
                elif event == "pg" and self.pg is not None:
                    self.pg.restart()
                    self.figures.pg_restarts += 1
                elif event == "stop":
                    self.stopped = self.workers[-1]
                    for pid in [self.stopped.proc.pid, *self.stopped.child_pids()]:
                        os.kill(pid, signal.SIGSTOP)
                    self.figures.stops += 1
                    resume_at = time.monotonic() + self.config.stop_seconds
            except Exception as exc:  # a fault that could not be injected is a battery failure, not silence
                self.figures.problems.append(f"chaos event {event} at {at:.0f} s failed: {exc!r}")


def wait_terminal(
    api: Api, ids: list[str], deadline: float, log: Callable[[str], None] = print
) -> dict[str, dict[str, Any]]:
    last: dict[str, dict[str, Any]] = {}
    pending = set(ids)
    next_report = time.monotonic() + 10
    while pending and time.monotonic() < deadline:
        if time.monotonic() >= next_report:
            done = sum(j["progress"]["chunks_done"] for j in last.values())
            log(f"chaos: {len(ids) - len(pending)}/{len(ids)} jobs finished, {done} chunks done")
            next_report += 10
        for job_id in list(pending):
            response = api.call("GET", f"/v1/jobs/{job_id}")
            if response.status_code == 200:
                last[job_id] = response.get_json()
                if last[job_id]["status"] in TERMINAL:
                    pending.discard(job_id)
        time.sleep(1.0)
    return last


def verify_outputs(app: Flask, jobs: dict[str, dict[str, Any]], figures: Figures) -> None:
    """Every succeeded job's WAV is exactly its chunks, in order, each once, with the pauses between."""
    state = tome_of(app)
    state.sessions.remove()
    for job_id, job in jobs.items():
        if job["status"] != "succeeded":
            continue
        row = state.sessions.get(Job, uuid.UUID(job_id))
        assert row is not None
        chunks = state.sessions.scalars(select(Chunk).where(Chunk.job_id == row.id).order_by(Chunk.seq)).all()
        if [c.seq for c in chunks] != list(range(row.chunks_total)) or row.chunks_done != row.chunks_total:
            figures.missing += 1
            figures.problems.append(f"job {job_id}: chunk rows or count wrong")
            continue
        output, rate = sf.read(str(row.output_path), dtype="int16")
        pauses = Pauses(**row.options.get("pauses", {}))
        offset = 0
        for chunk in chunks:
            samples, _ = sf.read(str(chunk.audio_path), dtype="int16")
            if not np.array_equal(output[offset : offset + len(samples)], samples):
                figures.missing += 1
                figures.problems.append(f"job {job_id}: chunk {chunk.seq} is not at its place")
                break
            offset += len(samples)
            gap = round(pauses.seconds(chunk.pause_after) * rate)
            if np.any(output[offset : offset + gap]):
                figures.problems.append(f"job {job_id}: pause after chunk {chunk.seq} is not silent")
                break
            offset += gap
        else:
            if len(output) > offset:
                figures.duplicated += 1
                figures.problems.append(f"job {job_id}: {len(output) - offset} samples more than its chunks")
            elif len(output) < offset:
                figures.missing += 1
        files = list((Path(str(row.output_path)).parent / "chunks").glob("*.wav"))
        if len(files) != row.chunks_total:
            figures.duplicated += len(files) > row.chunks_total
            figures.problems.append(f"job {job_id}: {len(files)} chunk files for {row.chunks_total} chunks")


def describe(app: Flask, job_id: str) -> str:
    """A job's row and its unfinished chunks, for the report of a job that did not finish."""
    state = tome_of(app)
    state.sessions.remove()
    job = state.sessions.get(Job, uuid.UUID(job_id))
    if job is None:
        return f"job {job_id}: no row"
    chunks = state.sessions.scalars(
        select(Chunk).where(Chunk.job_id == job.id, Chunk.status != "done").order_by(Chunk.seq)
    ).all()
    parts = [
        f"seq={c.seq} {c.status} attempts={c.attempts} lease={c.lease_until} enqueued={c.enqueued_at}"
        for c in chunks
    ]
    return (
        f"job {job_id}: {job.status} {job.chunks_done}/{job.chunks_total} lease={job.lease_until} "
        f"updated={job.updated_at}; " + "; ".join(parts)
    )


def count_temp_files(data_dir: Path) -> int:
    return sum(
        1 for pattern in TEMP_PATTERNS for folder in ("voices", "jobs", "uploads")
        for _ in (data_dir / folder).rglob(pattern)
    )  # fmt: skip


def run_scenario(
    name: str,
    config: ChaosConfig,
    settings: Settings,
    folder: Path,
    redis: OwnRedis | None = None,
    pg: OwnPostgres | None = None,
    log: Callable[[str], None] = print,
) -> Figures:
    figures = Figures(name)
    settings.storage.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade_head(settings.sqlalchemy_url)
    app = create_app({"settings": settings})
    api = Api(app, {"Authorization": f"Bearer {mint_key(app, 'chaos', 'k', admin=False)}"}, figures)
    audio, text = reference_wav(folder)
    form = {"name": "narrator", "ref_text": text, "audio": (io.BytesIO(audio), "r.wav")}
    voice = api.call("POST", "/v1/voices", data=form, content_type="multipart/form-data")
    assert voice.status_code == 202, voice.get_data(as_text=True)
    extra = {"TOME_PACED_SECONDS_PER_CHUNK": str(config.seconds_per_chunk)}
    # The sweeper runs as its own process (as in docker-compose.yml): the faults hit workers, not the clock.
    beat = BeatProcess(settings, folder, extra_env=extra)
    workers = [
        WorkerProcess(settings, folder, concurrency=config.concurrency, extra_env=extra)
        for _ in range(config.workers)
    ]
    started = time.monotonic()
    deadline = started + config.deadline_seconds
    try:
        for worker in workers:
            worker.wait_ready()
        log(f"chaos[{name}]: {len(workers)} workers ready; submitting {config.jobs} jobs")
        with Chaos(config, workers, figures, redis, pg, log):
            ids = submit_all(api, config, "narrator", deadline)
            figures.jobs = len(ids)
            log(f"chaos[{name}]: {len(ids)} jobs accepted after {time.monotonic() - started:.0f} s")
            jobs = wait_terminal(api, ids, deadline, log)
        figures.wall_s = time.monotonic() - started
        figures.lost = config.jobs - sum(1 for j in jobs.values() if j["status"] in TERMINAL)
        for job_id, job in jobs.items():
            if job["status"] not in TERMINAL:
                log(f"chaos[{name}]: unfinished {describe(app, job_id)}")
        figures.failed = sum(1 for j in jobs.values() if j["status"] == "failed")
        for job in jobs.values():
            if job["status"] == "failed":
                log(f"chaos[{name}]: job {job['id']} failed: {job['error']}")
            if job.get("finished_at") and job.get("created_at"):
                took = _seconds(job["finished_at"]) - _seconds(job["created_at"])
                figures.max_terminal_s = max(figures.max_terminal_s, took)
        verify_outputs(app, jobs, figures)
        figures.temp_files = count_temp_files(settings.storage.data_dir.resolve())
    finally:
        beat.stop()
        for worker in workers:
            worker.stop()
        close_app(app)
    return figures


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def chaos_settings(data_dir: Path, **overrides: Any) -> Settings:
    base = load_settings(
        {},
        data_dir=data_dir,
        engine="espeak-paced",
        engine_modules=ENGINE_MODULE,
        queue=f"chaos-{uuid.uuid4().hex[:6]}",
        chunk_lease_seconds=8,
        stitch_lease_seconds=60,
        voice_build_lease_seconds=20,
        sweep_interval_seconds=2.0,
        queued_grace_seconds=10,
        pending_requeue_seconds=30,
        # A pool child killed just as it was handed a task leaves billiard holding that slot until the hard
        # time limit; short limits keep the battery's capacity from draining away under repeated kills.
        task_soft_time_limit=20,
        task_time_limit=30,
        visibility_timeout=600,
        rate_limit_per_minute=0,
    )
    return base.with_overrides(**overrides)


def scenario_a(config: ChaosConfig, log: Callable[[str], None] = print, keep: bool = False) -> Figures:
    folder = Path(tempfile.mkdtemp(prefix="tome-chaos-a-"))
    pg = OwnPostgres()
    redis = OwnRedis(folder / "redis")
    try:
        settings = chaos_settings(
            folder / "var", database_url=pg.url, broker_url=redis.url, chunks_per_task=config.chunks_per_task
        )
        return run_scenario("A", config, settings, folder, redis=redis, pg=pg, log=log)
    finally:
        redis.stop()
        pg.close()
        if keep:
            log(f"chaos[A]: kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def scenario_b(config: ChaosConfig, log: Callable[[str], None] = print, keep: bool = False) -> Figures:
    folder = Path(tempfile.mkdtemp(prefix="tome-chaos-b-"))
    try:
        settings = chaos_settings(folder / "var", chunks_per_task=config.chunks_per_task)
        quiet = replace(config, redis_restarts=0, pg_restarts=0)
        return run_scenario("B", quiet, settings, folder, log=log)
    finally:
        if keep:
            log(f"chaos[B]: kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)

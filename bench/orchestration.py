"""What Tome itself adds to every chunk, on the production stack: PostgreSQL, Redis, real Celery workers,
and the ``constant`` engine (bench/engines/constant.py: a fixed 0.1 s tone at no cost), so that nothing
of the figures is the engine's. One run measures, on a fresh PostgreSQL database and private Redis queues:

1. The yardstick: a bare Celery round trip (send a no-op task, wait for its result) on the same Redis,
   through ``bench/noop_app.py`` on its own worker process, :data:`ROUND_TRIPS` times in a row.
2. Per-chunk overhead: a job of ``chunks`` one-line chunks (QA off, WAV out) from the ``POST /v1/jobs``
   to its ``succeeded`` (the job row's ``created_at`` to ``finished_at``), divided by the chunks, with one
   Celery worker of 1, 2 and 4 pool processes (``render_tasks_in_flight`` twice the processes, as
   worker/config.py advises): the scaling factor, and where the time goes: CPU seconds of the workers,
   PostgreSQL and Redis during the job (from /proc), database transactions and Redis commands a chunk,
   the stitch's share. Issue 15's target: at most 3x the bare round trip and under 5 ms a chunk.
3. The API under gunicorn (``api_workers`` gevent workers, as docker-compose.yml runs it), no worker
   running: ``clients`` concurrent clients on keep-alive connections submit small jobs, then poll a job's
   status; requests a second and p50/p99 latency; then a ``big_chars``-character script's submit
   latency and the growth of the API processes' peak memory (VmHWM) it caused.

PostgreSQL and Redis are those of the tests (``TOME_TEST_PG_URL``, ``TOME_TEST_REDIS_URL``; by default
127.0.0.1:5432 as ``postgres`` and 127.0.0.1:6379); without them the section is skipped and says why.
Problems (``make bench`` exits 1): a job that did not succeed or has another number of chunks than asked,
an API answer other than the expected status, a no-op task that did not come back.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis
from flask import Flask
from sqlalchemy import Engine as DbEngine
from sqlalchemy import select

from bench.engines import MODULE as ENGINE_MODULE
from models import TERMINAL, Job, Voice
from tests.support.api_server import running_api
from tests.support.apps import app_on, tome_of
from tests.support.audio import reference_wav
from tests.support.services import PG_URL, REDIS_URL, postgres_database
from webapi.cli import mint_key
from worker.config import Settings, load_settings
from worker.processes import READY_TIMEOUT, api_command
from worker.processes import WorkerProcess as _WorkerProcess

CHUNKS = 1_000
PROCESSES = (1, 2, 4)
CLIENTS = 32
REQUESTS_PER_CLIENT = 25
BIG_CHARS = 1_000_000
SENTENCE_CHARS = 100_000  # the abbreviation-dense text split into sentences in-process (planning's pysbd)
API_WORKERS = 4
ROUND_TRIPS = 300
API_START_TIMEOUT = 180.0  # gunicorn's workers each import the app, on a loaded machine
TARGET_RATIO = 3.0  # issue 15: per-chunk overhead at most 3x a bare round trip ...
TARGET_MS = 5.0  # ... and under 5 ms a chunk
JOB_TIMEOUT = 900.0
POLL_SECONDS = 0.05
HEADLINE_PROCESSES = 2  # the overhead compared with the target: one worker of 2, as `make run` starts it


@dataclass(frozen=True)
class Cpu:
    """CPU seconds spent during a run, by who spent them."""

    workers: float
    postgres: float
    redis: float

    def lines(self, wall: float) -> str:
        parts = [f"{name} {s:.1f} s ({100 * s / wall:.0f}% of a core)" for name, s in self.items()]
        return ", ".join(parts)

    def items(self) -> list[tuple[str, float]]:
        return [("workers", self.workers), ("postgres", self.postgres), ("redis", self.redis)]


@dataclass(frozen=True)
class JobRun:
    processes: int
    chunks: int
    status: str
    error: str | None
    wall_s: float  # created_at -> finished_at
    render_s: float  # created_at -> the job first seen stitching (polled)
    cpu: Cpu
    transactions: int  # PostgreSQL commits and rollbacks in the job's database during the job
    redis_commands: int
    reused: int = 0  # chunks the job took from an earlier render instead of rendering (should be none)

    @property
    def ms_per_chunk(self) -> float:
        return 1000 * self.wall_s / self.chunks if self.chunks else 0.0


@dataclass
class Load:
    """Answers of a load phase: latencies of the expected answers, and the unexpected ones."""

    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class ApiRun:
    submit: Load
    poll: Load
    big_s: list[float]
    big_status: list[int]
    big_rss_mib: float  # growth of the API processes' summed VmHWM over the big submissions
    clients: int
    big_chars: int


@dataclass(frozen=True)
class Figures:
    round_trip_ms: float
    sentences_s: float  # sentence splitting of SENTENCE_CHARS characters in this process
    jobs: list[JobRun]
    api: ApiRun | None


# -- processes and /proc ---------------------------------------------------------------------------------


def _ticks(pid: int) -> tuple[int, int]:
    """(utime + stime, cutime + cstime) of ``pid`` in clock ticks; zeros if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0, 0
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def _pids(comm: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == comm:
                    found.append(int(entry.name))
    return found


def _family_ticks(comm: str) -> int:
    """CPU ticks of every process named ``comm``, with those of their children that have exited (the
    backends PostgreSQL started and reaped count towards its postmaster)."""
    return sum(sum(_ticks(pid)) for pid in _pids(comm))


def _tree_ticks(pid: int, children: Sequence[int]) -> int:
    return sum(_ticks(pid)) + sum(_ticks(child)[0] for child in children)


def _hwm_kib(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _children(pid: int) -> list[int]:
    pids: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            pids.extend(int(p) for p in (task / "children").read_text().split())
    return pids


_TICK = os.sysconf("SC_CLK_TCK")


class _Meter:
    """CPU of the workers, PostgreSQL and Redis, and Redis commands, between start and stop."""

    def __init__(self, worker: _WorkerProcess, broker: redis.Redis) -> None:
        self.worker, self.broker = worker, broker

    def _read(self) -> tuple[int, int, int, int]:
        pid = self.worker.proc.pid
        return (
            _tree_ticks(pid, _children(pid)),
            _family_ticks("postgres"),
            _family_ticks("redis-server"),
            int(self.broker.info("stats")["total_commands_processed"]),
        )

    def start(self) -> None:
        self._before = self._read()

    def stop(self) -> tuple[Cpu, int]:
        after = self._read()
        d = [a - b for a, b in zip(after, self._before, strict=True)]
        return Cpu(d[0] / _TICK, d[1] / _TICK, d[2] / _TICK), d[3]


def settled_transactions(db_url: str, pool: DbEngine) -> int:
    """Commits + rollbacks of the database so far, read once no other backend is connected to it (the
    bench's own ``pool`` is closed first; the caller has stopped its workers).

    PostgreSQL 15 keeps a backend's counts in its own memory and flushes them to ``pg_stat_database`` at
    most once a second while busy, up to 10 s after it goes idle, and at its exit. Read a second after
    the job (as this bench did), the workers' last counts were missed and landed in the next run's
    window: the 1-process run read 1.4 transactions a chunk and the runs after it 2.8-3.2, while
    PostgreSQL's statement log of a 2-process job showed 1.1 (444 BEGINs for 400 chunks)."""
    name = db_url.rpartition("/")[2]
    with psycopg.connect(_libpq(db_url), autocommit=True) as conn:
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            pool.dispose()  # again each time: the app's metrics flusher may have connected meanwhile
            others = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            ).fetchone()
            if others is not None and others[0] == 0:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"backends still connected to {name} after 30 s: counts not settled")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
    return int(row[0]) if row else 0  # this connection's own are flushed at its close: not counted


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


# -- 1. the bare round trip ------------------------------------------------------------------------------


@contextlib.contextmanager
def _noop_worker(folder: Path, redis_url: str, queue: str) -> Iterator[None]:
    env = {**os.environ, "TOME_BENCH_NOOP_REDIS": redis_url, "TOME_BENCH_NOOP_QUEUE": queue}
    log_path = folder / "noop-worker.log"
    cmd = [sys.executable, "-m", "celery", "-A", "bench.noop_app", "worker", "--loglevel", "INFO",
           "--concurrency", "1", "--queues", queue, "--without-gossip", "--without-mingle"]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=Path.cwd())
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while " ready." not in log_path.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the no-op worker did not start:\n{log_path.read_text()[-2000:]}")
            time.sleep(0.2)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def bare_round_trip_ms(folder: Path, redis_url: str, trips: int = ROUND_TRIPS) -> float:
    """The mean of ``trips`` no-op round trips in a row (after 20 not counted), in milliseconds."""
    from bench import noop_app

    queue = f"bench-noop-{uuid.uuid4().hex[:8]}"
    app = noop_app.app
    app.conf.update(broker_url=redis_url, result_backend=redis_url, task_default_queue=queue)
    with _noop_worker(folder, redis_url, queue):
        for _ in range(20):
            app.send_task(noop_app.NOOP, queue=queue).get(timeout=60)
        started = time.perf_counter()
        for _ in range(trips):
            app.send_task(noop_app.NOOP, queue=queue).get(timeout=60)
        elapsed = time.perf_counter() - started
    app.close()
    return 1000 * elapsed / trips


# -- 2. a job on 1, 2, 4 processes -----------------------------------------------------------------------


def script_of(chunks: int, run: int = 0) -> str:
    """``chunks`` paragraphs of one short sentence: one chunk each. Each ``run`` has its own text: the
    same text again would reuse the earlier run's audio (worker.jobs.reuse) instead of rendering it."""
    return "\n\n".join(f"Line {n} of run {run} of the long test." for n in range(chunks)) + "\n"


def _headers(app: Flask) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_key(app, owner='bench', name='bench', admin=False)}"}


def _upload_voice(app: Flask, headers: dict[str, str], folder: Path) -> uuid.UUID:
    wav, text = reference_wav(folder)
    answer = app.test_client().post(
        "/v1/voices",
        data={"name": "narrator", "ref_text": text, "audio": (io.BytesIO(wav), "ref.wav")},
        headers=headers,
        content_type="multipart/form-data",
    )
    if answer.status_code != 202 or not answer.json:
        raise RuntimeError(f"the voice upload answered {answer.status_code}: {answer.json}")
    return uuid.UUID(answer.json["id"])


def _job_body(script: str, title: str = "Bench") -> dict[str, object]:
    return {
        "title": title,
        "voice": "narrator",
        "script": script,
        "output": {"format": "wav"},
        "qa": {"enabled": False},
    }


def _wait_voice(app: Flask, voice_id: uuid.UUID, timeout: float = 120.0) -> int:
    """Wait for the voice's prompt; returns how many reads (transactions) that took."""
    sessions = tome_of(app).runtime.sessions
    deadline = time.monotonic() + timeout
    reads = 0
    while time.monotonic() < deadline:
        with sessions() as session:
            status = session.scalar(select(Voice.cache_status).where(Voice.id == voice_id))
        reads += 1
        if status == "ready":
            return reads
        if status == "failed":
            raise RuntimeError("the voice's prompt build failed")
        time.sleep(0.1)
    raise TimeoutError(f"the voice was not ready after {timeout:.0f} s")


def run_job(
    app: Flask, settings: Settings, headers: dict[str, str], chunks: int, processes: int,
    voice_id: uuid.UUID, folder: Path,
) -> JobRun:  # fmt: skip
    """One job of ``chunks`` on one worker of ``processes`` pool processes (started before the clock),
    once the voice's prompt is ready (the first run's worker builds it, not timed)."""
    broker = redis.Redis.from_url(settings.broker.url)
    pool = tome_of(app).db
    before = settled_transactions(settings.sqlalchemy_url, pool)
    polls = 0  # the bench's own status reads: one transaction each, not Tome's
    worker = _WorkerProcess(settings, folder, concurrency=processes)
    try:
        worker.wait_ready()
        meter = _Meter(worker, broker)
        polls += _wait_voice(app, voice_id)
        meter.start()
        answer = app.test_client().post(
            "/v1/jobs", json=_job_body(script_of(chunks, processes)), headers=headers
        )
        if answer.status_code != 202 or not answer.json:
            raise RuntimeError(f"the job answered {answer.status_code}: {answer.json}")
        job_id = uuid.UUID(answer.json["id"])
        polled = time.perf_counter()
        stitching_at: float | None = None
        sessions = tome_of(app).runtime.sessions
        deadline = time.monotonic() + JOB_TIMEOUT
        status = ""
        while time.monotonic() < deadline:
            with sessions() as session:
                status = session.scalar(select(Job.status).where(Job.id == job_id)) or ""
            polls += 1
            if stitching_at is None and status in ("stitching", *TERMINAL):
                stitching_at = time.perf_counter()
            if status in TERMINAL:
                break
            time.sleep(POLL_SECONDS)
        cpu, commands = meter.stop()
    finally:
        worker.stop()
        broker.close()
    transactions = settled_transactions(settings.sqlalchemy_url, pool) - before - polls
    with sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
    wall = (job.finished_at - job.created_at).total_seconds() if job.finished_at else float("nan")
    render = (stitching_at or time.perf_counter()) - polled
    error = job.error if status in TERMINAL else f"not finished after {JOB_TIMEOUT:.0f} s ({worker.log_path})"
    return JobRun(processes, job.chunks_total, job.status, error, wall, min(render, wall), cpu,
                  transactions, commands, job.chunks_reused)  # fmt: skip


# -- 3. the API under load -------------------------------------------------------------------------------


class _Client:
    """One keep-alive HTTP connection to the API."""

    def __init__(self, port: int, headers: dict[str, str]) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.headers = headers

    def send(self, method: str, path: str, body: object = None) -> tuple[int, float, bytes]:
        data = None if body is None else json.dumps(body).encode()
        headers = {**self.headers, "Content-Type": "application/json"} if data else self.headers
        started = time.perf_counter()
        self.conn.request(method, path, body=data, headers=headers)
        response = self.conn.getresponse()
        answer = response.read()
        return response.status, time.perf_counter() - started, answer


def _load(
    port: int,
    headers: dict[str, str],
    clients: int,
    requests: int,
    call: Callable[[_Client, int], str | None],
) -> Load:
    """``clients`` threads, each ``requests`` calls of ``call`` (None: the expected answer)."""
    load = Load()
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)

    def client() -> None:
        me = _Client(port, headers)
        barrier.wait()
        try:
            for n in range(requests):
                started = time.perf_counter()
                problem = call(me, n)
                took = time.perf_counter() - started
                with lock:
                    if problem is None:
                        load.latencies.append(took)
                    else:
                        load.unexpected.append(problem)
        except (OSError, http.client.HTTPException) as exc:
            with lock:
                load.unexpected.append(f"{type(exc).__name__}: {exc}")
        finally:
            me.conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    load.seconds = time.perf_counter() - started
    return load


def _api_pids(server_pid: int) -> list[int]:
    return [server_pid, *_children(server_pid)]


def run_api(
    settings: Settings, headers: dict[str, str], folder: Path, clients: int, requests: int, big_chars: int,
    api_workers: int,
) -> ApiRun:  # fmt: skip
    """The load phases against the API under gunicorn (no worker: submitted jobs stay queued)."""
    command = functools.partial(api_command, workers=api_workers)
    with running_api(settings, folder, command=command, start_timeout=API_START_TIMEOUT) as api:
        first = _Client(api.port, headers)
        status, _, answer = first.send("POST", "/v1/jobs", _job_body("One short line."))
        first.conn.close()  # idle through the load phases: past the server's keep-alive
        if status != 202:
            raise RuntimeError(f"a submission answered {status}: {answer[:300]!r}")
        job_path = f"/v1/jobs/{json.loads(answer)['id']}"

        def submit(client: _Client, n: int) -> str | None:
            got, _, body = client.send("POST", "/v1/jobs", _job_body(f"Submission {n} of the load test."))
            return None if got == 202 else f"POST /v1/jobs answered {got}: {body[:200]!r}"

        def poll(client: _Client, n: int) -> str | None:
            got, _, body = client.send("GET", job_path)
            return None if got == 200 else f"GET {job_path} answered {got}: {body[:200]!r}"

        submit_load = _load(api.port, headers, clients, requests, submit)
        poll_load = _load(api.port, headers, clients, requests, poll)
        big = _big_script(big_chars)
        pids = _api_pids(api.proc.pid)
        before = sum(_hwm_kib(pid) for pid in pids)
        big_s, big_status = [], []
        for n in range(3):
            client = _Client(api.port, headers)
            try:
                got, took, _ = client.send("POST", "/v1/jobs", _job_body(big, f"Big {n}"))
            finally:
                client.conn.close()
            big_s.append(took)
            big_status.append(got)
        grown = sum(_hwm_kib(pid) for pid in pids) - before
    return ApiRun(submit_load, poll_load, big_s, big_status, grown / 1024, clients, big_chars)


def _big_script(chars: int, seed: int = 15) -> str:
    """About ``chars`` characters of prose-shaped text: paragraphs of five sentences of varied words, one
    word in seven an abbreviation pysbd knows (a technical or non-fiction book's density), so that
    sentence splitting meets as many distinct patterns as a real book does."""
    from pysbd.lang.english import English

    rng = random.Random(seed)
    abbreviations = sorted(English.Abbreviation.ABBREVIATIONS)

    def word() -> str:
        if rng.random() < 0.15:
            abbreviation = str(rng.choice(abbreviations))
            return (abbreviation.capitalize() if rng.random() < 0.5 else abbreviation) + "."
        return "".join(rng.choice("etaoinshrdlucmfwypvbg") for _ in range(rng.randint(2, 9)))

    def sentence() -> str:
        return " ".join(word() for _ in range(rng.randint(6, 14))).capitalize() + "."

    parts: list[str] = []
    size = 0
    while size < chars:
        paragraph = " ".join(sentence() for _ in range(5))
        parts.append(paragraph)
        size += len(paragraph) + 2
    return "\n\n".join(parts)[:chars]


def sentence_seconds(chars: int) -> float:
    """Seconds to split a ``chars``-character script into sentences in this process, paragraph by
    paragraph, as planning it does on a worker (worker.script.sentences: pysbd)."""
    from worker.script.sentences import split_sentences

    paragraphs = _big_script(chars).split("\n\n")
    started = time.perf_counter()
    for paragraph in paragraphs:
        split_sentences(paragraph)
    return time.perf_counter() - started


# -- the section -----------------------------------------------------------------------------------------


def _reachable(pg_url: str, redis_url: str) -> str | None:
    try:
        with psycopg.connect(_libpq(pg_url), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        redis.Redis.from_url(redis_url, socket_connect_timeout=3).ping()
    except (psycopg.Error, redis.RedisError) as exc:
        return f"needs PostgreSQL ({pg_url}) and Redis ({redis_url}): {exc}"
    return None


def measure(
    base: Path,
    chunks: int = CHUNKS,
    processes: Sequence[int] = PROCESSES,
    clients: int = CLIENTS,
    requests: int = REQUESTS_PER_CLIENT,
    big_chars: int = BIG_CHARS,
    api_workers: int = API_WORKERS,
    pg_url: str = PG_URL,
    redis_url: str = REDIS_URL,
) -> Figures:
    """Every figure of the section, on a fresh database (dropped afterwards); ``clients`` 0 skips the API."""
    base.mkdir(parents=True, exist_ok=True)
    sentences = sentence_seconds(min(big_chars, SENTENCE_CHARS))
    round_trip = bare_round_trip_ms(base, redis_url)
    with postgres_database(pg_url) as url:
        settings = load_settings(
            {}, data_dir=base / "var", database_url=url, broker_url=redis_url,
            queue=f"tome-bench-{uuid.uuid4().hex[:8]}", engine="constant", engine_modules=ENGINE_MODULE,
            quota_unfinished_jobs=0,
            quota_audio_seconds_per_day=0.0, quota_storage_bytes=0, rate_limit_per_minute=10_000_000,
        )  # fmt: skip
        with app_on(settings) as app:
            headers = _headers(app)
            voice_id = _upload_voice(app, headers, base)
            jobs: list[JobRun] = []
            for n in processes:
                folder = base / f"job-{n}"
                folder.mkdir()
                run_settings = settings.with_overrides(render_tasks_in_flight=2 * n)
                jobs.append(run_job(app, run_settings, headers, chunks, n, voice_id, folder))
            api = None
            if clients > 0:
                api = run_api(settings, headers, base, clients, requests, big_chars, api_workers)
            tome_of(app).db.dispose()
        _drop_queues(settings)
    return Figures(round_trip, sentences, jobs, api)


def _drop_queues(settings: Settings) -> None:
    """Remove what the jobs left on Redis under the bench's private queue names."""
    client = redis.Redis.from_url(settings.broker.url)
    try:
        keys = list(client.scan_iter(match=f"{settings.broker.queue}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def problems_of(figures: Figures, chunks: int) -> list[str]:
    problems = []
    for run in figures.jobs:
        label = f"orchestration ({run.processes} process{'es' if run.processes > 1 else ''})"
        if run.status != "succeeded":
            problems.append(f"{label}: the job ended {run.status}: {run.error}")
        elif run.chunks != chunks:
            problems.append(f"{label}: the job has {run.chunks} chunks, expected {chunks}")
        elif run.reused:
            problems.append(f"{label}: {run.reused} chunks were reused, not rendered")
    if figures.api is not None:
        for name, load in (("submissions", figures.api.submit), ("polls", figures.api.poll)):
            problems += [f"orchestration API {name}: {p}" for p in load.unexpected[:3]]
        if any(status != 202 for status in figures.api.big_status):
            problems.append(f"orchestration API: the big script answered {figures.api.big_status}")
    return problems


def report(figures: Figures, chunks: int) -> tuple[list[str], str]:
    rt = figures.round_trip_ms
    lines = [
        f"Bare Celery round trip (no-op task, result back, same Redis): {rt:.2f} ms (mean of {ROUND_TRIPS}).",
        "",
        "| worker processes | chunks | submit -> succeeded s | ms a chunk | x round trip | scaling "
        "| render s | stitch s | transactions a chunk | Redis commands a chunk "
        "| CPU s: workers / postgres / redis |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    one = next((run for run in figures.jobs if run.processes == 1), None)
    for run in figures.jobs:
        scaling = f"{one.wall_s / run.wall_s:.2f}x" if one and run.wall_s else "-"
        n = max(run.chunks, 1)
        cpu = " / ".join(f"{s:.1f}" for _, s in run.cpu.items())
        lines.append(
            f"| {run.processes} | {run.chunks} | {run.wall_s:.2f} | {run.ms_per_chunk:.2f} | "
            f"{run.ms_per_chunk / rt:.1f} | {scaling} | {run.render_s:.2f} | "
            f"{run.wall_s - run.render_s:.2f} | {run.transactions / n:.1f} | {run.redis_commands / n:.1f} | "
            f"{cpu} |"
        )
    cores = len(os.sched_getaffinity(0))
    for run in figures.jobs:
        busiest, seconds = max(run.cpu.items(), key=lambda item: item[1])
        total = sum(s for _, s in run.cpu.items())
        lines.append(
            f"{run.processes} process(es): {total / run.wall_s:.2f} of {cores} cores busy; "
            f"the most CPU went to {busiest} ({seconds:.1f} s: {run.cpu.lines(run.wall_s)})"
        )
    lines.append(
        f"Sentence splitting (pysbd, as planning does on a worker) of the big script's first "
        f"{SENTENCE_CHARS:,} characters, abbreviation-dense: {figures.sentences_s:.2f} s."
    )
    summary = f"orchestration: rt {rt:.2f} ms sentences={figures.sentences_s:.2f}s"
    headline = next((r for r in figures.jobs if r.processes == HEADLINE_PROCESSES), None)
    headline = headline or (figures.jobs[0] if figures.jobs else None)
    if headline is not None:
        ratio = headline.ms_per_chunk / rt
        met = ratio <= TARGET_RATIO and headline.ms_per_chunk < TARGET_MS
        lines.append(
            f"Target (issue 15, {headline.processes} processes): <= {TARGET_RATIO:g}x the round trip and "
            f"< {TARGET_MS:g} ms a chunk: {headline.ms_per_chunk:.2f} ms, {ratio:.1f}x: "
            f"{'met' if met else 'not met'}."
        )
        summary += f" {headline.ms_per_chunk:.2f} ms/chunk ({ratio:.1f}x)"
    if figures.api is not None:
        api = figures.api
        lines += [""] + [
            f"API {name} ({len(load.latencies)} from {api.clients} concurrent clients): "
            f"{load.per_second:.0f}/s, "
            f"p50 {load.percentile(0.5):.1f} ms, p99 {load.percentile(0.99):.1f} ms"
            for name, load in (("submissions", api.submit), ("status polls", api.poll))
        ]
        lines.append(
            f"API: a {api.big_chars:,}-character script's submit "
            f"{statistics.median(api.big_s):.2f} s (median of "
            f"{len(api.big_s)}: {', '.join(f'{s:.2f}' for s in api.big_s)}), API peak memory grew "
            f"{api.big_rss_mib:.0f} MiB"
        )
        summary += (
            f" submit={api.submit.per_second:.0f}/s poll={api.poll.per_second:.0f}/s "
            f"big={statistics.median(api.big_s):.2f}s"
        )
    return lines, summary


def run_orchestration_bench(
    base: Path,
    chunks: int = CHUNKS,
    processes: Sequence[int] = PROCESSES,
    clients: int = CLIENTS,
    big_chars: int = BIG_CHARS,
) -> tuple[list[str], list[str], str]:
    """The section for ``make bench``: the problems found, the report lines and a summary."""
    unreachable = _reachable(PG_URL, REDIS_URL)
    if unreachable:
        return [], [f"skipped: {unreachable}"], "orchestration: skipped"
    started = time.perf_counter()
    figures = measure(base, chunks, processes, clients, big_chars=big_chars)
    lines, summary = report(figures, chunks)
    lines.append(f"Section wall time {time.perf_counter() - started:.0f} s.")
    return problems_of(figures, chunks), lines, summary


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.orchestration``: this section alone (``make bench`` runs it with the others)."""
    import argparse
    import shutil
    import tempfile

    parser = argparse.ArgumentParser(
        prog="python -m bench.orchestration", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--chunks", type=int, default=CHUNKS, help=f"chunks of the job (default {CHUNKS})")
    parser.add_argument("--processes", default=",".join(map(str, PROCESSES)), help="pool sizes, e.g. 1,2,4")
    parser.add_argument(
        "--clients", type=int, default=CLIENTS, help="concurrent API clients; 0 skips the API"
    )
    parser.add_argument("--big-chars", type=int, default=BIG_CHARS, help="characters of the big script")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="tome-bench-orchestration-"))
    try:
        processes = [int(p) for p in args.processes.split(",") if p.strip()]
        problems, lines, summary = run_orchestration_bench(
            base, args.chunks, processes, args.clients, args.big_chars
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for line in lines:
        print(line)
    for problem in problems:
        print(f"FAIL {problem}")
    print(summary)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

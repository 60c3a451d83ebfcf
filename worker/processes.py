"""Tome's processes as children of this one, configured only through TOME_* variables: the commands that
`make run` starts (the API under gunicorn, a Celery worker that renders, a small one for the control tasks,
one for stitches, Celery beat), and the worker and beat
processes that the end-to-end tests, the chaos battery and the benchmarks start and stop by their PIDs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from worker.config import FLAT_SETTINGS, Settings, env_name
from worker.engines.catalog import loaded_modules, parse_module_names

# How long a starting worker may take to say it is ready: importing the engines and the audio stack takes
# seconds alone, and a minute was passed with several test processes starting workers on two loaded cores.
READY_TIMEOUT = 180.0


def settings_env(settings: Settings) -> dict[str, str]:
    """This process's environment with every TOME_* variable replaced by ``settings``. The child loads
    every engine module this process has loaded, not only those ``settings`` name (settings made before a
    module loaded name fewer): it reads their engines' variables, which ``settings`` pass on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOME_")}
    for flat in FLAT_SETTINGS:
        env[env_name(flat)] = str(settings.flat_value(flat))
    named = parse_module_names(settings.engines.modules)
    env[env_name("engine_modules")] = ",".join(dict.fromkeys([*named, *loaded_modules()]))
    return env


def celery_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "worker.main", *args]


CONTROL_CONCURRENCY = 2  # the control worker: a slow plan still leaves a process for the next start
STITCH_CONCURRENCY = 2  # the stitch worker: one owner's long stitch leaves a process for another's


def all_queues(settings: Settings) -> list[str]:
    """Every queue Tome sends to: what a lone worker that runs everything consumes (the tests' workers,
    the benchmarks'). ``make run`` and compose split them: :func:`render_queues` for the render worker,
    the control queue alone for the control worker, the stitch queue alone for the stitch worker."""
    named = (
        settings.broker.queue,
        settings.broker.gpu_queue,
        settings.broker.control_queue_name,
        settings.broker.stitch_queue_name,
    )
    return list(dict.fromkeys(q for q in named if q))


def render_queues(settings: Settings) -> list[str]:
    """What a render worker consumes: the engine tasks (``settings.broker.gpu_queue`` when set, else the
    default queue) and the default queue's webhooks and deliveries, never the control or the stitch
    queue. So a control task or a stitch is never taken by a process that will then render, and a render
    process is never held by minutes of another owner's stitch."""
    return list(dict.fromkeys(q for q in (settings.broker.queue, settings.broker.gpu_queue) if q))


def render_worker_command(settings: Settings, concurrency: int, *extra: str) -> list[str]:
    """``make run``'s render worker: :func:`render_queues` with ``concurrency`` pool processes."""
    return worker_command(concurrency, render_queues(settings), *extra)


def control_worker_command(settings: Settings, *extra: str) -> list[str]:
    """The small worker that serves only the control queue (plan, preview, start, a build's wake-ups,
    the sweep), so that those never wait for a render batch or a stitch to end
    (worker.celery_app.task_routes). It loads no engine."""
    return worker_command(CONTROL_CONCURRENCY, [settings.broker.control_queue_name], *extra)


def stitch_worker_command(settings: Settings, *extra: str) -> list[str]:
    """The worker that serves only the stitch queue, so that a finished book's stitch never waits for a
    render batch to end (no render worker takes stitches: :func:`render_queues`)."""
    return worker_command(STITCH_CONCURRENCY, [settings.broker.stitch_queue_name], *extra)


def split_workers(settings: Settings, render_concurrency: int = 2) -> list[list[str]]:
    """``make run``'s three workers, as compose runs them: the render worker, the control worker and the
    stitch worker. Between them they consume every queue Tome sends to, each queue by one of them."""
    return [
        render_worker_command(settings, render_concurrency),
        control_worker_command(settings),
        stitch_worker_command(settings),
    ]


def worker_command(concurrency: int, queues: Sequence[str], *extra: str) -> list[str]:
    """A Celery worker consuming ``queues`` with ``concurrency`` pool processes."""
    consumed = ",".join(dict.fromkeys(q for q in queues if q))
    if not consumed:
        raise ValueError("a worker needs at least one queue")
    return celery_command(
        "worker", "--loglevel", "INFO", "--concurrency", str(concurrency), "--queues", consumed, *extra
    )


def beat_command(schedule: Path) -> list[str]:
    """Celery beat, the sweeper's clock, as its own process (a crashed worker child can't take it along;
    an embedded ``worker --beat`` runs as a child of the worker and is not restarted if it dies)."""
    return celery_command("beat", "--loglevel", "INFO", "--schedule", str(schedule))


def api_command(bind: str, workers: int = 2) -> list[str]:
    """The API under gunicorn with gevent workers (its access log on stdout); compose runs the same options.

    A gevent worker serves each connection in a greenlet, so a client that sends its request (or reads the
    answer) a byte at a time holds a greenlet and a socket, never the worker: sync workers let two such
    clients stall every other tenant. Limits: at most 500 connections a worker (then it stops accepting
    until one closes); a request's line and headers must arrive within the 5 s keep-alive (gevent's worker
    times ``next(parser)`` out with it, so a slow-loris is dropped there); a request line of at most 4094
    bytes, at most 50 header fields of at most 8190 bytes each; bodies are capped by the app's
    MAX_CONTENT_LENGTH (413). The worker class is gunicorn's gevent worker answering gunicorn's own errors
    (414, 431, 400...) in the API's JSON error shape (webapi.gunicorn_worker)."""
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    return [gunicorn, "--bind", bind, "--workers", str(workers),
            "--worker-class", "webapi.gunicorn_worker.JsonErrorWorker",
            "--worker-connections", "500", "--keep-alive", "5", "--timeout", "120",
            "--limit-request-line", "4094", "--limit-request-fields", "50",
            "--limit-request-field_size", "8190", "--access-logfile", "-", "webapi:create_app()"]  # fmt: skip


class BeatProcess:
    """``celery -A worker.main beat``: the sweeper's schedule, as its own process (as in production)."""

    def __init__(self, settings: Settings, log_dir: Path, extra_env: dict[str, str] | None = None):
        self.log_path = log_dir / f"beat-{uuid.uuid4().hex[:6]}.log"
        schedule = log_dir / f"{self.log_path.stem}-schedule"
        cmd = beat_command(schedule)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd,
            env={**settings_env(settings), **(extra_env or {})},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class WorkerProcess:
    """``celery -A worker.main worker`` as a child process; ``beat=True`` adds the sweeper schedule.

    It consumes every queue (:func:`all_queues`) unless ``queues`` names others (e.g. only
    ``settings.broker.gpu_queue``, as a GPU worker does in production, or only
    ``settings.broker.control_queue_name``).
    """

    def __init__(
        self,
        settings: Settings,
        log_dir: Path,
        *,
        concurrency: int = 1,
        beat: bool = False,
        extra_env: dict[str, str] | None = None,
        queues: Sequence[str] | None = None,
    ):
        self.name = f"w{uuid.uuid4().hex[:6]}"
        self.log_path = log_dir / f"{self.name}.log"
        cmd = worker_command(
            concurrency,
            list(queues) if queues is not None else all_queues(settings),
            "--hostname", f"{self.name}@%h", "--without-gossip", "--without-mingle",
        )  # fmt: skip
        if beat:
            cmd += ["--beat", "--schedule", str(log_dir / f"{self.name}-beat")]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd,
            env={**settings_env(settings), **(extra_env or {})},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=Path.cwd(),
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            if " ready." in self.log():
                return
            time.sleep(0.2)
        raise TimeoutError(f"worker not ready after {timeout} s:\n{self.log()[-3000:]}")

    def child_pids(self) -> list[int]:
        """The pool's child processes (where tasks run)."""
        pids: list[int] = []
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            children = (task / "children").read_text().split()
            pids.extend(int(p) for p in children)
        return pids

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            children = self.child_pids()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            for pid in children:  # a pool child orphaned by a killed parent
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self._log.close()

"""Real Celery worker processes for end-to-end tests, configured only through TOME_* variables."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from worker.config import Settings

READY_TIMEOUT = 60.0


def settings_env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOME_")}
    for field in dataclasses.fields(Settings):
        env[f"TOME_{field.name.upper()}"] = str(getattr(settings, field.name))
    return env


class BeatProcess:
    """``celery -A worker.main beat``: the sweeper's schedule, as its own process (as in production)."""

    def __init__(self, settings: Settings, log_dir: Path, extra_env: dict[str, str] | None = None):
        self.log_path = log_dir / f"beat-{uuid.uuid4().hex[:6]}.log"
        schedule = log_dir / f"{self.log_path.stem}-schedule"
        cmd = [sys.executable, "-m", "celery", "-A", "worker.main", "beat", "--loglevel", "INFO",
               "--schedule", str(schedule)]  # fmt: skip
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

    It consumes ``settings.queue`` unless ``queues`` names others (e.g. only ``settings.gpu_queue``, as a GPU
    worker does in production).
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
        consumed = ",".join(queues) if queues is not None else settings.queue
        if not consumed:
            raise ValueError("a worker needs at least one queue")
        cmd = [
            sys.executable, "-m", "celery", "-A", "worker.main", "worker",
            "--loglevel", "INFO", "--concurrency", str(concurrency), "--queues", consumed,
            "--hostname", f"{self.name}@%h", "--without-gossip", "--without-mingle",
        ]  # fmt: skip
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

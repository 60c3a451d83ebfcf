"""The API started as `make run` starts it (gunicorn, TOME_* settings through ``settings_env``) on a free
127.0.0.1 port, for tests that need a real HTTP server; and one timed request to it."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from worker.config import Settings
from worker.processes import api_command, settings_env

START_TIMEOUT = 120.0  # two gunicorn workers importing scipy and friends on a loaded 2-core machine took 28 s
REQUEST_TIMEOUT = 5.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    stdout: Path
    stderr: Path

    def log(self) -> str:
        return f"{self.stderr.read_text(errors='replace')}\n{self.stdout.read_text(errors='replace')}"

    def wait_for(self, stream: Path, text: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in stream.read_text(errors="replace"):
            assert time.monotonic() < deadline, f"{text!r} not in {stream.name}:\n{self.log()[-3000:]}"
            time.sleep(0.1)


@contextlib.contextmanager
def running_api(
    settings: Settings,
    log_dir: Path,
    command: Callable[[str], list[str]] = api_command,
    start_timeout: float = START_TIMEOUT,
) -> Iterator[Server]:
    """The API started as `make run` starts it (``command(bind)``) on a free port; stopped by its PID.
    ``start_timeout``: how long it may take to answer ``/healthz`` (more gunicorn workers take longer)."""
    port = free_port()
    server_out, server_err = log_dir / "api.stdout", log_dir / "api.stderr"
    with server_out.open("wb") as out, server_err.open("wb") as err:
        proc = subprocess.Popen(
            command(f"127.0.0.1:{port}"), env=settings_env(settings), stdout=out, stderr=err
        )
    server = Server(proc, port, server_out, server_err)
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            assert proc.poll() is None, server.log()
            assert time.monotonic() < deadline, server.log()
            try:
                if request(port, "GET", "/healthz", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        yield server
    finally:
        kill_tree(proc)


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a server, then the children it had (gunicorn's workers): the master first, so that it
    cannot start a new worker for one that died. A test's server is not shut down gracefully: nothing is
    checked after the test, and a gunicorn worker's graceful exit is mostly Python's interpreter teardown
    (seconds of CPU each)."""
    children: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{proc.pid}/task").iterdir():
            children.extend(int(pid) for pid in (task / "children").read_text().split())
    proc.kill()
    proc.wait(timeout=10)
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float


def request(
    port: int,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = REQUEST_TIMEOUT,
) -> Answer:
    """One request on a fresh connection, timed from connect to the last byte of the answer."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        return Answer(response.status, dict(response.getheaders()), data, time.monotonic() - started)
    finally:
        conn.close()

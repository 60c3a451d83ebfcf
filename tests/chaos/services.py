"""PostgreSQL and Redis instances of the battery's own, on their own ports, so that restarting them
never touches the machine's shared services. Each runs as a child process this code started."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.api_server import free_port

PG_BIN = (
    Path(sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1])
    if glob.glob("/usr/lib/postgresql/*/bin")
    else None
)


def _wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def _as_postgres(cmd: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root; run them as the postgres user when we are root."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


class OwnPostgres:
    """A throwaway cluster in its own folder under /tmp (which the postgres user can reach, unlike
    pytest's 0700 temp dirs); ``close()`` stops it and removes the folder."""

    def __init__(self) -> None:
        if PG_BIN is None:
            raise RuntimeError("PostgreSQL server binaries are not installed (/usr/lib/postgresql/*/bin)")
        self.folder = Path(tempfile.mkdtemp(prefix="tome-chaos-pg-"))
        self.folder.chmod(0o755)
        self.data = self.folder / "pgdata"
        self.port = free_port()
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres")
        subprocess.run(
            _as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                          "--no-sync", "-E", "UTF8"]),
            check=True, capture_output=True,
        )  # fmt: skip
        self.start()
        create = [
            "psql",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-qc",
            "CREATE DATABASE tome",
        ]
        subprocess.run(create, check=True, capture_output=True)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/tome"

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", *args]),  # type: ignore[operator]
            check=True, capture_output=True,
        )  # fmt: skip

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        options += " -c max_connections=200"
        self._ctl("-o", options, "-l", str(self.folder / "pg.log"), "start")
        _wait_port(self.port)

    def stop(self) -> None:
        self._ctl("-m", "fast", "stop")

    def restart(self, down_seconds: float = 2.0) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


class OwnRedis:
    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.folder), "--logfile", str(self.folder / "redis.log")],
        )  # fmt: skip
        _wait_port(self.port)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.proc = None

    def restart(self, down_seconds: float = 2.0) -> None:
        """Everything queued is lost (no persistence): the sweeper must notice and re-send."""
        self.stop()
        time.sleep(down_seconds)
        self.start()

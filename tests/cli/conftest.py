"""The ``tome`` command line's fixtures: the API as ``make run`` serves it, on a free 127.0.0.1 port, and
the CLI run in-process (click's runner) against it with TOME_URL/TOME_API_KEY set."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from flask import Flask

from tests.support.api_server import running_api
from tome_cli.main import app as tome
from webapi.cli import mint_key
from worker.config import Settings
from worker.processes import WorkerProcess, api_command


@dataclass
class Stack:
    url: str
    key: str
    config_home: Path

    def run(self, *args: str, key: str | None = None, env: Mapping[str, str] | None = None) -> Result:
        full = {
            "TOME_URL": self.url,
            "TOME_API_KEY": key or self.key,
            "XDG_CONFIG_HOME": str(self.config_home),
            **(env or {}),
        }
        return CliRunner().invoke(tome, list(args), env=full, catch_exceptions=False)

    def add_voice(self, reference: tuple[Path, str], *args: str, name: str = "narrator") -> Result:
        """``tome voices add NAME REF --text TRANSCRIPT ARGS...``"""
        ref, transcript = reference
        return self.run("voices", "add", name, str(ref), "--text", transcript, *args)


@pytest.fixture
def stack(app: Flask, settings: Settings, tmp_path: Path) -> Iterator[Stack]:
    """The API as ``make run`` serves it (gunicorn, one gevent worker) on a free 127.0.0.1 port."""
    key = mint_key(app, owner="alice", name="cli", admin=False)
    (tmp_path / "config").mkdir()
    with running_api(settings, tmp_path, lambda bind: api_command(bind, workers=1)) as server:
        yield Stack(f"http://127.0.0.1:{server.port}", key, tmp_path / "config")


@pytest.fixture
def rendering(stack: Stack, settings: Settings, start_worker: Callable[..., WorkerProcess]) -> Stack:
    """``stack`` with a real Celery worker (two pool processes) rendering behind it."""
    start_worker(settings, concurrency=2)
    return stack


@pytest.fixture
def reference(tmp_path: Path, reference_audio: tuple[bytes, str]) -> tuple[Path, str]:
    audio, transcript = reference_audio
    path = tmp_path / "ref.wav"
    path.write_bytes(audio)
    return path, transcript

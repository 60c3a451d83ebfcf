"""A pool process whose engine takes long to warm up (a model loading onto a GPU) is not killed for it.

Celery's prefork pool on Redis gives a *replacement* pool process ``worker_proc_alive_timeout`` (4 s by
default) to report that it is up, and the warm-up runs before it does: when a GPU worker's pool process
died (killed, out of memory, a driver fault), every replacement was killed in the middle of loading the
model, and the worker never rendered again. ``espeak-paced`` with a 6 s warm-up stands in for the model
load (no GPU here).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator

import pytest
from flask import Flask

from tests.conftest import bearer
from tests.e2e.flow import submit_book, wait_terminal
from tests.support.apps import app_on
from webapi.cli import mint_key
from worker.config import Settings
from worker.processes import WorkerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

WARM_UP_SECONDS = 6.0


@pytest.fixture
def paced_settings(pg_settings: Settings) -> Settings:
    return pg_settings.with_overrides(engine="espeak-paced")


@pytest.fixture
def paced_app(paced_settings: Settings) -> Iterator[Flask]:
    with app_on(paced_settings) as app:
        yield app


def test_a_worker_with_a_slow_warm_up_comes_up_and_renders(
    paced_app: Flask,
    paced_settings: Settings,
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., WorkerProcess],
) -> None:
    worker = start_worker(
        paced_settings,
        extra_env={
            "TOME_PACED_WARM_UP_SECONDS": str(WARM_UP_SECONDS),
            "TOME_PACED_SECONDS_PER_CHUNK": "0.01",
        },
    )
    _wait_for(lambda: worker.log().count("warmed up") == 1, "the first pool process to warm up", worker)
    [child] = worker.child_pids()
    os.kill(child, signal.SIGKILL)  # as the kernel's OOM killer or a driver fault would
    _wait_for(lambda: worker.log().count("warmed up") == 2, "the replacement to warm up", worker)
    client = paced_app.test_client()
    headers = bearer(mint_key(paced_app, "alice", "k", admin=False))
    job = submit_book(client, headers, reference_audio, fmt="wav")
    finished = wait_terminal(client, headers, job["id"], timeout=120)
    log = worker.log()
    assert finished["status"] == "succeeded", (finished, log[-3000:])
    assert "Timed out waiting for UP message" not in log
    assert log.count("engine espeak-paced warmed up") == 2, log[-3000:]  # the first and its replacement


def _wait_for(condition: Callable[[], bool], what: str, worker: WorkerProcess) -> None:
    deadline = time.monotonic() + 4 * WARM_UP_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{worker.log()[-3000:]}"
        time.sleep(0.2)

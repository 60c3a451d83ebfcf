"""End to end on the embedded defaults: SQLite, Celery's filesystem broker, a real worker process."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.api.helpers import submit_job, upload_voice
from tests.e2e.flow import check_output, submit_book, wait_terminal
from worker.config import Settings

pytestmark = pytest.mark.e2e


def test_markdown_book_renders_to_mp3_with_chunks_in_order(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    settings: Settings,
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., Any],
) -> None:
    start_worker(settings, concurrency=2)
    job = submit_book(client, user, reference_audio, fmt="mp3")
    finished = wait_terminal(client, user, job["id"])
    assert [c["title"] for c in finished["chapters"]] == ["The Harbour", "The Storm", "The Morning After"]
    starts = [c["start"] for c in finished["chapters"]]
    assert starts[0] == 0.0
    assert starts == sorted(starts)
    check_output(app, client, user, finished)
    voice = client.get(f"/v1/voices/{finished['voice_id']}", headers=user).json
    assert voice["cache_status"] == "ready"


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_lossless_outputs(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    settings: Settings,
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., Any],
    fmt: str,
) -> None:
    start_worker(settings)
    job = submit_book(client, user, reference_audio, fmt=fmt)
    check_output(app, client, user, wait_terminal(client, user, job["id"]))


def test_cancel_stops_a_running_job_within_seconds(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    settings: Settings,
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., Any],
) -> None:
    start_worker(settings, concurrency=2)
    assert upload_voice(client, user, reference_audio[0], ref_text=reference_audio[1]).status_code == 202
    script = "\n\n".join(f"Paragraph {i}. The rain kept falling on the long road home." for i in range(400))
    job = submit_job(client, user, "narrator", title="Long", script=script, output={"format": "wav"}).json
    deadline = time.monotonic() + 120
    while client.get(f"/v1/jobs/{job['id']}", headers=user).json["progress"]["chunks_done"] < 10:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    cancelled = client.post(f"/v1/jobs/{job['id']}/cancel", headers=user)
    assert cancelled.status_code == 200
    time.sleep(2.0)  # work in flight when the cancel landed may finish its current chunk
    settled = client.get(f"/v1/jobs/{job['id']}", headers=user).json["progress"]["chunks_done"]
    time.sleep(2.0)
    final = client.get(f"/v1/jobs/{job['id']}", headers=user).json
    assert final["status"] == "cancelled"
    assert final["progress"]["chunks_done"] == settled < final["progress"]["chunks_total"]
    assert final["output"]["url"] is None
    assert client.get(f"/v1/jobs/{job['id']}/audio", headers=user).status_code == 409


def test_the_worker_keeps_working_after_its_idle_pool_processes_are_killed(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    settings: Settings,
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., Any],
) -> None:
    """An idle pool process killed from outside (the OOM killer, a stray kill) must cost nothing. Found by
    the chaos battery: on the filesystem broker Celery used its blocking pool, whose idle children wait for
    tasks holding one shared lock; killing the holder left every other child waiting for good, and the
    worker took no more work. Killing every idle child at once always kills the holder."""
    worker = start_worker(settings, concurrency=2)
    deadline = time.monotonic() + 30
    while worker.log().count("warmed up") < 2:  # each pool process logs it just before it waits for work
        assert time.monotonic() < deadline, worker.log()[-2000:]
        time.sleep(0.1)
    time.sleep(0.5)
    before = worker.child_pids()
    assert len(before) == 2
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while not (len(after := worker.child_pids()) == 2 and not set(after) & set(before)):
        assert time.monotonic() < deadline, "the worker did not replace its pool processes"
        time.sleep(0.2)
    job = submit_book(client, user, reference_audio, fmt="wav")
    check_output(app, client, user, wait_terminal(client, user, job["id"], timeout=60))

"""End to end on the production stack (PostgreSQL, Redis, real workers), and a worker killed mid-job."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select

from models import Chunk, ChunkStatus
from models.migrate import upgrade_head
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.e2e.flow import check_output, submit_book, wait_terminal
from webapi import create_app
from webapi.cli import mint_key
from worker.config import Settings

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


@pytest.fixture
def pg_app(pg_settings: Settings) -> Iterator[Flask]:
    pg_settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade_head(pg_settings.sqlalchemy_url)
    app = create_app({"settings": pg_settings})
    yield app
    app.extensions["tome"].sessions.remove()
    app.extensions["tome"].db.dispose()


def test_book_renders_on_postgres_and_redis(
    pg_app: Flask, pg_settings: Settings, reference_audio: tuple[bytes, str], start_worker: Callable[..., Any]
) -> None:
    start_worker(pg_settings, concurrency=2)
    start_worker(pg_settings, concurrency=1)
    client = pg_app.test_client()
    headers = bearer(mint_key(pg_app, "alice", "k", admin=False))
    job = submit_book(client, headers, reference_audio, fmt="mp3")
    check_output(pg_app, client, headers, wait_terminal(client, headers, job["id"]))


def test_job_whose_worker_dies_mid_chunk_is_finished_by_another_worker(
    pg_app: Flask, pg_settings: Settings, reference_audio: tuple[bytes, str], start_worker: Callable[..., Any]
) -> None:
    from dataclasses import replace

    fast = replace(pg_settings, chunk_lease_seconds=3, sweep_interval_seconds=1.0, pending_requeue_seconds=4,
                   queued_grace_seconds=4, chunks_per_task=4)  # fmt: skip
    doomed = start_worker(fast, concurrency=1)
    client: FlaskClient = pg_app.test_client()
    headers = bearer(mint_key(pg_app, "alice", "k", admin=False))
    assert upload_voice(client, headers, reference_audio[0], ref_text=reference_audio[1]).status_code == 202
    script = "\n\n".join(
        f"Paragraph number {i} of the long night. The wind kept blowing." for i in range(150)
    )
    job = submit_job(client, headers, "narrator", title="Long", script=script, output={"format": "wav"}).json
    state = pg_app.extensions["tome"]

    def count(status: ChunkStatus) -> int:
        state.sessions.remove()
        return int(state.sessions.scalar(
            select(func.count()).where(Chunk.job_id == uuid.UUID(job["id"]), Chunk.status == status.value)
        ))  # fmt: skip

    deadline = time.monotonic() + 120
    while not (count(ChunkStatus.DONE) >= 5 and count(ChunkStatus.RUNNING) >= 1):
        assert time.monotonic() < deadline, "the worker never got going"
        time.sleep(0.02)
    victims = [doomed.proc.pid, *doomed.child_pids()]
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    doomed.proc.wait()
    assert count(ChunkStatus.DONE) < job["progress"]["chunks_total"]

    start_worker(fast, concurrency=2, beat=True)
    finished = wait_terminal(client, headers, job["id"], timeout=240)
    check_output(pg_app, client, headers, finished)
    state.sessions.remove()
    attempts = state.sessions.scalars(
        select(Chunk.attempts).where(Chunk.job_id == uuid.UUID(job["id"]))
    ).all()
    assert max(attempts) >= 2, "no chunk was taken over from the dead worker"
    files = sorted(p.name for p in (fast.data_dir / "jobs" / job["id"] / "chunks").iterdir())
    assert len(files) == job["progress"]["chunks_total"], "a chunk was written twice or a stale copy was kept"

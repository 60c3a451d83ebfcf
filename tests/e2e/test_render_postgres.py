"""End to end on the production stack (PostgreSQL, Redis, real workers), and a worker killed mid-job."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select

from models import Chunk, ChunkStatus
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.e2e.flow import check_output, submit_book, wait_terminal
from tests.support.apps import app_on, tome_of
from webapi.cli import mint_key
from worker.config import Settings

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


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
    pg_settings: Settings, reference_audio: tuple[bytes, str], start_worker: Callable[..., Any]
) -> None:
    # espeak-paced: espeak's audio at 0.05 s a chunk, so that a claimed batch stays running long enough to
    # be killed mid-way (plain espeak renders a batch in milliseconds, and the chunk seen running could
    # finish before the kill landed: then nothing was left to take over).
    fast = pg_settings.with_overrides(
        engine="espeak-paced",
        chunk_lease_seconds=3,
        sweep_interval_seconds=1.0,
        pending_requeue_seconds=4,
        queued_grace_seconds=4,
        chunks_per_task=4,
    )
    pace = {"TOME_PACED_SECONDS_PER_CHUNK": "0.05"}
    with app_on(fast) as pg_app:
        _kill_mid_chunk_then_finish(pg_app, fast, pace, reference_audio, start_worker)


def _kill_mid_chunk_then_finish(
    pg_app: Flask,
    fast: Settings,
    pace: dict[str, str],
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., Any],
) -> None:
    doomed = start_worker(fast, concurrency=1, extra_env=pace)
    client: FlaskClient = pg_app.test_client()
    headers = bearer(mint_key(pg_app, "alice", "k", admin=False))
    assert upload_voice(client, headers, reference_audio[0], ref_text=reference_audio[1]).status_code == 202
    script = "\n\n".join(
        f"Paragraph number {i} of the long night. The wind kept blowing." for i in range(150)
    )
    job = submit_job(client, headers, "narrator", title="Long", script=script, output={"format": "wav"}).json
    state = tome_of(pg_app)

    def count(status: ChunkStatus) -> int:
        state.sessions.remove()
        return int(state.sessions.scalar(  # type: ignore[arg-type]
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
    assert count(ChunkStatus.RUNNING) >= 1, "the kill landed between batches: nothing to take over"

    start_worker(fast, concurrency=2, beat=True, extra_env=pace)
    finished = wait_terminal(client, headers, job["id"], timeout=240)
    check_output(pg_app, client, headers, finished)
    state.sessions.remove()
    attempts = state.sessions.scalars(
        select(Chunk.attempts).where(Chunk.job_id == uuid.UUID(job["id"]))
    ).all()
    assert max(attempts) >= 2, "no chunk was taken over from the dead worker"
    files = sorted(p.name for p in (fast.storage.data_dir / "jobs" / job["id"] / "chunks").iterdir())
    assert len(files) == job["progress"]["chunks_total"], "a chunk was written twice or a stale copy was kept"

"""A speech request goes ahead of the book work already waiting in the broker (issue 14: "ahead of book
chunks"), on both brokers: the embedded filesystem transport and Redis.

One worker process (concurrency 1) renders a book with ``espeak-paced`` (each chunk takes a GPU's time), so
that the fair scheduler keeps ``TOME_RENDER_TASKS_IN_FLIGHT`` render tasks of ``TOME_CHUNKS_PER_TASK``
chunks each waiting in the queue. A speech request sent then is rendered as soon as the task in the pool
ends: between the request and its first audio byte the book gains at most two tasks' chunks (the one in
the pool, and one more if that one ended while the request was being planned). Sent in arrival order it
would wait for every task queued before it (``IN_FLIGHT - 1`` of them). Counting chunks, not seconds,
makes the check independent of the machine's speed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask

from models import Job
from tests.api.helpers import submit_job, upload_voice
from tests.support.apps import app_on, tome_of
from webapi.cli import mint_key
from worker.config import Settings, load_settings
from worker.processes import WorkerProcess

pytestmark = pytest.mark.e2e

CHUNKS_PER_TASK = 3
IN_FLIGHT = 6
BOOK = "\n\n".join(
    f"Paragraph {n}. The keeper wrote down the wind and the tide, and every ship that passed the wall."
    for n in range(1, 41)
)


def _paced(settings: Settings) -> Settings:
    return load_settings(
        {},
        **{
            **{
                f: settings.flat_value(f)
                for f in ("data_dir", "database_url", "broker_url", "queue", "control_queue")
            },
            "engine": "espeak-paced",
            "paced_seconds_per_chunk": 0.3,
            "chunks_per_task": CHUNKS_PER_TASK,
            "render_tasks_in_flight": IN_FLIGHT,
        },
    )


@pytest.fixture
def embedded(tmp_path: Path) -> Settings:
    return _paced(load_settings({}, data_dir=tmp_path / "var"))


@pytest.fixture
def redis(pg_settings: Settings) -> Settings:
    return _paced(pg_settings)


def _chunks_done(app: Flask, job_id: str) -> int:
    with tome_of(app).runtime.sessions() as session:
        job = session.get(Job, uuid.UUID(job_id))
        assert job is not None
        return job.chunks_done


def _wait(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _speech_overtakes_the_book(
    settings: Settings, start_worker: Callable[..., WorkerProcess], ref: tuple[bytes, str]
) -> None:
    with app_on(settings) as app:
        start_worker(settings, concurrency=1)
        client = app.test_client()
        headers = {"Authorization": f"Bearer {mint_key(app, owner='alice', name='t', admin=False)}"}
        voice = upload_voice(client, headers, ref[0], ref_text=ref[1]).json["id"]
        _wait(
            lambda: client.get(f"/v1/voices/{voice}", headers=headers).json["cache_status"] == "ready",
            "the voice's prompt was not built",
        )
        job = submit_job(client, headers, voice, script=BOOK, qa={"enabled": False})
        assert job.status_code == 202, job.json
        book = job.json["id"]
        total = job.json["progress"]["chunks_total"]
        assert total >= CHUNKS_PER_TASK * (IN_FLIGHT + 3), total
        _wait(lambda: _chunks_done(app, book) >= 1, "the book did not start rendering")

        before = _chunks_done(app, book)
        response = client.post(
            "/v1/audio/speech", json={"input": "Ahead of the book.", "voice": voice}, headers=headers
        )
        assert response.status_code == 200, response.get_data(as_text=True)[:300]
        body = iter(response.response)
        first = next(body)  # the first audio bytes
        after = _chunks_done(app, book)
        rest = list(body)
        response.close()

        assert first
        assert rest is not None
        # the task in the pool (and one that began while the request was planned); never all of those
        # queued before it, which would be (IN_FLIGHT - 1) * CHUNKS_PER_TASK chunks at least
        assert after - before <= 2 * CHUNKS_PER_TASK < (IN_FLIGHT - 1) * CHUNKS_PER_TASK, (before, after)
        assert after < total


def test_speech_goes_ahead_of_queued_book_work_on_the_filesystem_broker(
    embedded: Settings, start_worker: Callable[..., WorkerProcess], reference_audio: tuple[bytes, str]
) -> None:
    _speech_overtakes_the_book(embedded, start_worker, reference_audio)


@pytest.mark.postgres
def test_speech_goes_ahead_of_queued_book_work_on_redis(
    redis: Settings, start_worker: Callable[..., WorkerProcess], reference_audio: tuple[bytes, str]
) -> None:
    _speech_overtakes_the_book(redis, start_worker, reference_audio)

"""Stitches on a queue of their own: a control worker never takes one, so a job's start never waits
behind another owner's stitches, however long they run (the hostile-tenant report: a long stitch held
one of the two control processes, and two held both).

Real Celery workers on the embedded stack, the stitch consumer held back: alice's books wait to be
stitched while bob's job is planned, started and rendered by the control and render workers; then a
stitch worker takes every stitch. Order and counts, no wall-clock bound."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.e2e.flow import wait_terminal
from webapi.cli import mint_key
from worker.config import Settings
from worker.processes import CONTROL_CONCURRENCY, STITCH_CONCURRENCY, render_queues

pytestmark = pytest.mark.e2e

TIMEOUT = 180


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _status(client: FlaskClient, headers: dict[str, str], job_id: str) -> str:
    return str(client.get(f"/v1/jobs/{job_id}", headers=headers).json["status"])


def _is(client: FlaskClient, headers: dict[str, str], job_id: str, status: str) -> bool:
    return _status(client, headers, job_id) == status


def _ready(client: FlaskClient, headers: dict[str, str], url: str) -> bool:
    return bool(client.get(url, headers=headers).json["cache_status"] == "ready")


def _waiting(settings: Settings, queue: str) -> int:
    """Messages waiting in ``queue`` on the filesystem broker."""
    return len(list((settings.broker_folder / "queue").glob(f"*.{queue}.msg")))


def test_a_start_never_waits_for_another_owners_stitches(
    app: Flask, settings: Settings, reference_audio: tuple[bytes, str], start_worker: Callable[..., Any]
) -> None:
    client = app.test_client()
    owners = {name: bearer(mint_key(app, owner=name, name="k", admin=False)) for name in ("alice", "bob")}
    voices = {}
    for name, headers in owners.items():
        voice = upload_voice(client, headers, reference_audio[0], ref_text=reference_audio[1])
        assert voice.status_code == 202, voice.json
        voices[name] = voice.json["id"]
    # The render worker consumes what make run's does (TOME_QUEUE): nothing consumes the stitch queue
    # until the stitch worker starts.
    start_worker(settings, concurrency=1, queues=render_queues(settings))
    start_worker(settings, concurrency=CONTROL_CONCURRENCY, queues=[settings.broker.control_queue_name])
    for name, headers in owners.items():
        url = f"/v1/voices/{voices[name]}"
        _until(functools.partial(_ready, client, headers, url), "a voice's prompt was not built")
    # alice's books, more than the control worker has processes, all waiting for their stitch.
    books = []
    for n in range(CONTROL_CONCURRENCY + 1):
        script = f"Book {n}, the first line.\n\nBook {n}, the second line."
        job = submit_job(client, owners["alice"], "narrator", script=script, output={"format": "wav"})
        assert job.status_code == 202, job.json
        books.append(job.json["id"])
    for job_id in books:
        stitching = functools.partial(_is, client, owners["alice"], job_id, "stitching")
        _until(stitching, "a book was not rendered")
    assert _waiting(settings, settings.broker.stitch_queue_name) == len(books)

    # bob's job is started and rendered all the same: no control process is held by a stitch.
    small = submit_job(client, owners["bob"], "narrator", script="Just one line.", output={"format": "wav"})
    assert small.status_code == 202, small.json
    _until(lambda: _status(client, owners["bob"], small.json["id"]) == "stitching", "bob's job waited")
    assert [_status(client, owners["alice"], j) for j in books] == ["stitching"] * len(books)
    assert _waiting(settings, settings.broker.control_queue_name) == 0, (
        "the control worker took every control task"
    )
    assert _waiting(settings, settings.broker.stitch_queue_name) == len(books) + 1

    start_worker(settings, concurrency=STITCH_CONCURRENCY, queues=[settings.broker.stitch_queue_name])
    for owner, job_id in [*(("alice", j) for j in books), ("bob", small.json["id"])]:
        assert wait_terminal(client, owners[owner], job_id, timeout=TIMEOUT)["status"] == "succeeded"
    assert _waiting(settings, settings.broker.stitch_queue_name) == 0

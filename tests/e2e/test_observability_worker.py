"""Observability through real worker processes: JSON log lines carrying the job, chunk, voice and the
request id of the API request that started the work; and metrics gathered in the pool processes, batched
in memory (a flush interval far longer than the test) and written, exact, when the worker stops."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from models import Chunk
from tests.api.helpers import submit_job, upload_voice
from tests.e2e.flow import wait_terminal
from tests.support.apps import tome_of
from worker import counters
from worker.config import Settings

pytestmark = pytest.mark.e2e

SCRIPT = "\n\n".join(f"Paragraph {i}. The tide came in over the grey stones of the quay." for i in range(6))


def _json_lines(log: str) -> list[dict[str, Any]]:
    lines = []
    for line in log.splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))  # every line that looks like JSON must be JSON
    return lines


def _metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of ``text`` (0 when absent)."""
    for line in text.splitlines():
        match = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        if match is None or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match.group(3))
    return 0.0


_TASK_ID = re.compile(r"Task tome\.\w+\[([0-9a-f-]+)\] (received|succeeded in|raised|retry)")


def _wait_idle(log: Callable[[], str], timeout: float = 60.0) -> None:
    """Until every task the worker's log shows received has ended (succeeded, raised or retried): the job's
    last hops (its webhook's delivery) may still run when the job reads succeeded, and a warm stop sent
    while a pool process ends a task lost that process's counters once (2 of 6 renders counted)."""
    deadline = time.monotonic() + timeout
    while True:
        received: set[str] = set()
        ended: set[str] = set()
        for task_id, what in _TASK_ID.findall(log()):
            (received if what == "received" else ended).add(task_id)
        if received <= ended:
            return
        assert time.monotonic() < deadline, f"tasks still running: {sorted(received - ended)}"
        time.sleep(0.2)


def test_worker_logs_json_with_the_request_id_and_flushes_exact_metrics_when_it_stops(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    admin: dict[str, str],
    settings: Settings,
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., Any],
) -> None:
    worker_settings = settings.with_overrides(
        log_format="json", metrics_flush_seconds=3600, chunks_per_task=1
    )
    worker = start_worker(worker_settings, concurrency=2)
    voice = upload_voice(client, user, reference_audio[0], ref_text=reference_audio[1])
    assert voice.status_code == 202
    # Ready before the job is sent: else the build's end (another request's work) starts the job.
    deadline = time.monotonic() + 120
    while client.get(f"/v1/voices/{voice.json['id']}", headers=user).json["cache_status"] != "ready":
        assert time.monotonic() < deadline, "the voice's prompt was not built"
        time.sleep(0.2)
    request_id = f"e2e-{uuid.uuid4().hex[:12]}"
    response = submit_job(
        client, {**user, "X-Request-ID": request_id}, "narrator", title="Tide", script=SCRIPT,
        output={"format": "wav"},
    )  # fmt: skip
    assert response.status_code == 202, response.json
    assert response.headers["X-Request-ID"] == request_id
    job = wait_terminal(client, user, response.json["id"])
    assert job["status"] == "succeeded", job
    with app.app_context():
        chunks = (
            tome_of(app).sessions.scalars(select(Chunk).where(Chunk.job_id == uuid.UUID(job["id"]))).all()
        )
    total = len(chunks)
    assert total >= 6
    assert all(c.attempts == 1 for c in chunks), "each chunk rendered once: the counts below are exact"

    _wait_idle(worker.log)
    worker.stop()  # the pool processes write what they hold as they exit
    metrics = client.get("/metrics", headers=admin).get_data(as_text=True)
    assert _metric(metrics, "tome_chunk_render_seconds_count", engine="espeak") == total
    assert _metric(metrics, "tome_chunk_real_time_factor_count", engine="espeak") == total
    assert _metric(metrics, "tome_chunk_render_seconds_bucket", engine="espeak", le="+Inf") == total
    assert _metric(metrics, "tome_job_duration_seconds_count", status="succeeded", engine="espeak") == 1
    assert _metric(metrics, "tome_job_queue_wait_seconds_count", engine="espeak") == 1
    assert _metric(metrics, "tome_stitch_seconds_count", what="book") == 1
    assert _metric(metrics, "tome_voice_prompt_build_seconds_count", engine="espeak") == 1
    # One prompt load per render task (one chunk each, one voice): a hit, or a miss on a process's first.
    with app.app_context():
        values = counters.read_all(tome_of(app).sessions())
    hits = values.get((counters.HITS, "espeak"), 0.0)
    misses = values.get((counters.MISSES, "espeak"), 0.0)
    assert hits + misses == total
    assert 1 <= misses <= 2  # two pool processes, each reads the file once

    lines = _json_lines(worker.log())
    assert lines, "the worker wrote JSON lines"
    mine = [line for line in lines if line.get("request_id") == request_id]
    assert {line["job_id"] for line in mine if "job_id" in line} == {job["id"]}, "its work, only its job"
    rendered = [line for line in mine if "chunk_seq" in line]
    assert rendered, "lines about one chunk name it"
    assert all(line["voice_id"] == job["voice_id"] for line in rendered)
    assert all(isinstance(line["chunk_seq"], int) for line in rendered)
    assert all({"ts", "level", "logger", "message"} <= set(line) for line in lines)

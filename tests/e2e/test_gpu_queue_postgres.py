"""GPU workers get only GPU work: with TOME_GPU_QUEUE set, a job on PostgreSQL and Redis is rendered by a
worker that consumes only the gpu queue and started and stitched by one that consumes only the default queue.

The espeak engine stands in for Qwen3-TTS: routing is by task name and does not depend on the engine.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask

from tests.conftest import bearer
from tests.e2e.flow import check_output, submit_book, wait_terminal
from tests.support.apps import app_on
from webapi.cli import mint_key
from worker import task_names
from worker.config import Settings
from worker.processes import WorkerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

RECEIVED = re.compile(r"celery\.worker\.strategy: Task (tome\.\w+)\[[0-9a-f-]+\] received")
SUCCEEDED = re.compile(r"celery\.app\.trace: Task (tome\.\w+)\[[0-9a-f-]+\] succeeded in ")


@pytest.fixture
def gpu_settings(pg_settings: Settings) -> Settings:
    # Named after the test's private default queue, so parallel runs on the same Redis never meet.
    return pg_settings.with_overrides(gpu_queue=f"{pg_settings.broker.queue}-gpu").validate()


@pytest.fixture
def gpu_app(gpu_settings: Settings) -> Iterator[Flask]:
    with app_on(gpu_settings) as app:
        yield app


def tasks_in(worker: WorkerProcess, pattern: re.Pattern[str]) -> Counter[str]:
    return Counter(pattern.findall(worker.log()))


def test_engine_tasks_run_only_on_the_gpu_queue_worker(
    gpu_app: Flask,
    gpu_settings: Settings,
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., WorkerProcess],
) -> None:
    gpu = start_worker(gpu_settings, concurrency=1, queues=[gpu_settings.broker.gpu_queue])
    cpu = start_worker(
        gpu_settings,
        concurrency=1,
        queues=[
            gpu_settings.broker.queue,
            gpu_settings.broker.control_queue_name,
            gpu_settings.broker.stitch_queue_name,
        ],
    )
    client = gpu_app.test_client()
    headers = bearer(mint_key(gpu_app, "alice", "k", admin=False))
    job = submit_book(client, headers, reference_audio, fmt="mp3")  # uploads the voice: a prompt build
    check_output(gpu_app, client, headers, wait_terminal(client, headers, job["id"]))

    on_gpu, on_cpu = tasks_in(gpu, RECEIVED), tasks_in(cpu, RECEIVED)
    engine_tasks = {task_names.RENDER_CHUNKS, task_names.BUILD_VOICE}
    assert set(on_gpu) == engine_tasks, (on_gpu, gpu.log()[-3000:])
    assert engine_tasks.isdisjoint(on_cpu), (on_cpu, cpu.log()[-3000:])
    assert {task_names.START_JOB, task_names.STITCH_JOB} <= set(on_cpu), on_cpu
    # Received is not enough: the work itself was done where it was routed.
    assert tasks_in(gpu, SUCCEEDED)[task_names.RENDER_CHUNKS] >= 1
    assert tasks_in(gpu, SUCCEEDED)[task_names.BUILD_VOICE] >= 1
    assert tasks_in(cpu, SUCCEEDED)[task_names.STITCH_JOB] == 1
    rendered = sum(int(n) for n in re.findall(r"job=\S+: (\d+) chunks rendered", gpu.log()))
    assert rendered == job["progress"]["chunks_total"]
    assert "chunks rendered" not in cpu.log()
    # Only the worker that renders warms the engine up (a CPU worker never loads a model).
    assert "warmed up" in gpu.log()
    assert "warmed up" not in cpu.log()
    assert "no engine warm-up" in cpu.log()


def test_a_worker_can_consume_both_queues(
    gpu_app: Flask,
    gpu_settings: Settings,
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., Any],
) -> None:
    """One machine with a GPU can still run everything: ``--queues tome,gpu,tome.control``."""
    start_worker(gpu_settings, concurrency=2)  # every queue
    client = gpu_app.test_client()
    headers = bearer(mint_key(gpu_app, "alice", "k", admin=False))
    job = submit_book(client, headers, reference_audio, fmt="wav")
    check_output(gpu_app, client, headers, wait_terminal(client, headers, job["id"]))

"""A bare Celery app with one no-op task: the orchestration benchmark's yardstick for a broker round trip.

``celery -A bench.noop_app worker`` runs it. It reads its broker (and result backend: the same Redis) and
its queue from ``TOME_BENCH_NOOP_REDIS`` and ``TOME_BENCH_NOOP_QUEUE``, and uses the JSON serializer, prefetch
multiplier and late acks Tome's own workers use, so that the round trip it measures is the one Tome's
tasks pay before any of Tome's code runs.
"""

from __future__ import annotations

import os

from celery import Celery

NOOP = "bench.noop"

app = Celery("bench-noop")
app.conf.update(
    broker_url=os.environ.get("TOME_BENCH_NOOP_REDIS", "redis://127.0.0.1:6379/0"),
    result_backend=os.environ.get("TOME_BENCH_NOOP_REDIS", "redis://127.0.0.1:6379/0"),
    task_default_queue=os.environ.get("TOME_BENCH_NOOP_QUEUE", "bench-noop"),
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    worker_prefetch_multiplier=1,
    task_acks_late=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name=NOOP)  # type: ignore[untyped-decorator]
def noop() -> None:
    """Nothing: what is timed is the trip through the broker and back."""

"""The one Celery app, built from Settings by a small function (no connection is made here)."""

from __future__ import annotations

from typing import Any

from celery import Celery

from worker.config import Settings
from worker.logs import install_record_factory
from worker.task_names import ENGINE_TASKS, SWEEP

TASK_MODULES = ["worker.tasks"]

# kombu's filesystem transport with atomic publishing and claiming, polled from Celery's event loop (see
# worker.filesystem_broker for the bugs this avoids)
FILESYSTEM_TRANSPORT = "worker.filesystem_broker:Transport"


def task_routes(settings: Settings) -> dict[str, dict[str, str]]:
    """Where tasks go besides the default queue: the engine tasks to ``gpu_queue`` when it is set.
    Everything else (starting a job, stitching and ffmpeg encoding, webhooks, the sweep) is CPU or I/O
    work and stays on ``settings.queue``, so a GPU never waits on it.

    Routes are part of the app's config, so they apply to every ``send_task`` by name, from the API and
    from workers alike. A retried task goes back to the queue it came from (Celery keeps its delivery info).
    """
    if not settings.gpu_queue:
        return {}
    return {name: {"queue": settings.gpu_queue} for name in ENGINE_TASKS}


def engine_queue(settings: Settings) -> str:
    """The queue the engine tasks go to: the workers that consume it are the ones that render."""
    return settings.gpu_queue or settings.queue


def celery_config(settings: Settings) -> dict[str, Any]:
    settings.validate()  # refuses a hard time limit at or above the visibility timeout
    conf: dict[str, Any] = {
        "broker_url": settings.broker_url,
        "broker_connection_retry_on_startup": True,
        "task_default_queue": settings.queue,
        "task_routes": task_routes(settings),
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_ignore_result": True,
        "result_backend": None,
        "worker_prefetch_multiplier": 1,
        "worker_proc_alive_timeout": settings.worker_start_timeout,
        "task_acks_late": True,
        # Requeue a task whose worker process died (Redis puts it back on the queue). On the filesystem
        # broker the message is acked instead and the sweeper re-sends the work from the database after
        # its lease; requeueing there lost nothing either in the chaos battery, and gained nothing.
        "task_reject_on_worker_lost": not settings.broker_url.startswith("filesystem://"),
        "task_soft_time_limit": settings.task_soft_time_limit,
        "task_time_limit": settings.task_time_limit,
        "worker_hijack_root_logger": False,
        # %(job)s is " job=<id>" while a task works on a job (worker.logs), else empty.
        "worker_log_format": "%(asctime)s %(levelname)s %(processName)s %(name)s%(job)s: %(message)s",
        "worker_task_log_format": (
            "%(asctime)s %(levelname)s %(processName)s %(task_name)s[%(task_id)s] %(name)s%(job)s: "
            "%(message)s"
        ),
        "beat_schedule": {
            "tome-sweep": {"task": SWEEP, "schedule": settings.sweep_interval_seconds},
        },
        "beat_schedule_filename": str(settings.layout.beat_schedule),
        "imports": TASK_MODULES,
    }
    transport: dict[str, Any] = {"visibility_timeout": settings.visibility_timeout}
    if settings.broker_url.startswith("filesystem://"):
        folder = settings.broker_folder
        conf["broker_transport"] = FILESYSTEM_TRANSPORT
        transport.update(
            {
                "data_folder_in": str(folder / "queue"),
                "data_folder_out": str(folder / "queue"),
                "control_folder": str(folder / "control"),
                "store_processed": False,
                # The filesystem transport polls its folder; 0.2 s keeps a job's hops snappy at little cost.
                "polling_interval": 0.2,
            }
        )
    conf["broker_transport_options"] = transport
    return conf


def ensure_broker_folders(settings: Settings) -> None:
    if settings.broker_url.startswith("filesystem://"):
        for sub in ("queue", "control"):
            (settings.broker_folder / sub).mkdir(parents=True, exist_ok=True)


def make_celery(settings: Settings) -> Celery:
    install_record_factory()  # the log formats above use %(job)s
    app = Celery("tome")
    app.config_from_object(celery_config(settings))
    return app

"""The one Celery app, built from Settings by a small function (no connection is made here)."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger, before_task_publish

from worker import counters
from worker.config import Settings
from worker.logs import current, install_record_factory, use_json
from worker.task_names import SWEEP, TASKS, QueueKind

TASK_MODULES = ["worker.tasks"]
REQUEST_ID_HEADER = "tome_request_id"

# kombu's filesystem transport with atomic publishing and claiming, polled from Celery's event loop (see
# worker.filesystem_broker for the bugs this avoids)
FILESYSTEM_TRANSPORT = "worker.filesystem_broker:Transport"


# Message priorities, lower first: kombu's Redis transport keeps one list per priority step and pops the
# lowest step first; Tome's filesystem transport (worker.filesystem_broker) names message files by priority.
SPEECH_PRIORITY = 0
WORK_PRIORITY = 5
FRONT_PRIORITY = SPEECH_PRIORITY  # a new owner's first render batch (worker.jobs.scheduler.to_front)
PRIORITY_STEPS = [SPEECH_PRIORITY, WORK_PRIORITY]


def task_routes(settings: Settings) -> dict[str, dict[str, Any]]:
    """Where each task goes, and at which priority, from the task table (:mod:`worker.task_names`).

    Queues: the engine tasks go to ``gpu_queue`` when it is set; the control tasks (plan, preview, start, the
    wake-ups a build sends, the sweep) to ``control_queue``, which a small worker of its own serves, so that
    they never wait behind a render batch; stitches to ``stitch_queue`` (a stitch worker consumes it, no
    render worker does: worker.processes.split_workers), so that a long one never holds the control worker
    or a render process; webhooks and deliveries stay on ``settings.broker.queue``.
    Priority: an owner's only speech in flight is sent at :data:`SPEECH_PRIORITY`, every other task at
    :data:`WORK_PRIORITY`, in the same queues, so the next pool process that frees up takes it first; a
    priority rather than a queue, because a speech task must be taken by whatever worker renders, on both
    brokers. Routes are in the app's config, so they apply to every ``send_task`` by name, from the API and
    workers alike. See docs/how-it-works.md, "Speech, books and control tasks share the workers"."""
    queues = {
        QueueKind.CONTROL: settings.broker.control_queue_name,
        QueueKind.ENGINE: settings.broker.gpu_queue or None,
        QueueKind.STITCH: settings.broker.stitch_queue_name,
        QueueKind.DEFAULT: None,  # the app's task_default_queue
    }
    routes: dict[str, dict[str, Any]] = {}
    for spec in TASKS:
        routes[spec.name] = {"priority": SPEECH_PRIORITY if spec.urgent else WORK_PRIORITY}
        if queues[spec.queue] is not None:
            routes[spec.name]["queue"] = queues[spec.queue]
    return routes


def engine_queue(settings: Settings) -> str:
    """The queue the engine tasks go to: the workers that consume it are the ones that render."""
    return settings.broker.gpu_queue or settings.broker.queue


def celery_config(settings: Settings) -> dict[str, Any]:
    settings.validate()  # refuses a hard time limit at or above the visibility timeout
    conf: dict[str, Any] = {
        "broker_url": settings.broker.url,
        "broker_connection_retry_on_startup": True,
        "task_default_queue": settings.broker.queue,
        "task_routes": task_routes(settings),
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_ignore_result": True,
        "result_backend": None,
        "worker_prefetch_multiplier": 1,
        "worker_proc_alive_timeout": settings.tasks.worker_start_timeout,
        "task_acks_late": True,
        # Requeue a task whose worker process died (Redis puts it back on the queue). On the filesystem
        # broker the message is acked instead and the sweeper re-sends the work from the database after
        # its lease; requeueing there lost nothing either in the chaos battery, and gained nothing.
        "task_reject_on_worker_lost": not settings.broker.url.startswith("filesystem://"),
        "task_soft_time_limit": settings.tasks.task_soft_time_limit,
        "task_time_limit": settings.tasks.task_time_limit,
        "worker_hijack_root_logger": False,
        # %(job)s is " job=<id>" while a task works on a job (worker.logs), else empty.
        "worker_log_format": "%(asctime)s %(levelname)s %(processName)s %(name)s%(job)s: %(message)s",
        "worker_task_log_format": (
            "%(asctime)s %(levelname)s %(processName)s %(task_name)s[%(task_id)s] %(name)s%(job)s: "
            "%(message)s"
        ),
        "beat_schedule": {
            "tome-sweep": {"task": SWEEP, "schedule": settings.tasks.sweep_interval_seconds},
        },
        "beat_schedule_filename": str(settings.layout.beat_schedule),
        "imports": TASK_MODULES,
    }
    transport: dict[str, Any] = {"visibility_timeout": settings.broker.visibility_timeout}
    if settings.broker.url.startswith("filesystem://"):
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
    else:
        transport["priority_steps"] = PRIORITY_STEPS  # Redis: one list per step, the lowest popped first
    conf["broker_transport_options"] = transport
    return conf


def ensure_broker_folders(settings: Settings) -> None:
    if settings.broker.url.startswith("filesystem://"):
        for sub in ("queue", "control"):
            (settings.broker_folder / sub).mkdir(parents=True, exist_ok=True)


def make_celery(settings: Settings) -> Celery:
    install_record_factory()  # the log formats above use %(job)s
    counters.configure(settings.observability.metrics_flush_seconds)
    # The request id of whatever sends a task (an API request, or a task sending its follow-ups) travels
    # in the message's headers, so the work a request started logs under its id (worker.tasks).
    before_task_publish.connect(_carry_request_id, weak=False, dispatch_uid="tome-request-id")
    if settings.observability.log_format == "json":
        # Celery sets up its handlers after this; replace their format when it has (worker and beat).
        after_setup_logger.connect(_json_logs, weak=False, dispatch_uid="tome-json-logs")
        after_setup_task_logger.connect(_json_logs, weak=False, dispatch_uid="tome-json-task-logs")
    app = Celery("tome")
    app.config_from_object(celery_config(settings))
    return app


def _json_logs(logger: Any, **_: Any) -> None:
    use_json([logger])


def _carry_request_id(headers: dict[str, Any] | None = None, **_: Any) -> None:
    request_id = current("request_id")
    if request_id is not None and headers is not None:
        headers[REQUEST_ID_HEADER] = request_id

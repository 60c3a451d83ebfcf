"""Which queue each task goes to: the routing table from celery_config, Celery's own router reading it, and
real messages sent by name through an in-memory broker (as the API and the workers send them)."""

from __future__ import annotations

import pytest
from celery import Celery

from worker import task_names
from worker.celery_app import SPEECH_PRIORITY, WORK_PRIORITY, celery_config, make_celery
from worker.config import ConfigError, Settings, load_settings
from worker.processes import all_queues, control_worker_command
from worker.task_names import ALL_TASKS, ENGINE_TASKS

CONTROL_TASKS = (
    task_names.PLAN_JOB,
    task_names.PREVIEW_SCRIPT,
    task_names.START_JOB,
    task_names.STITCH_JOB,
    task_names.STITCH_CHAPTER,
    "tome.sweep",
)
CPU_TASKS = (
    task_names.DELIVER_WEBHOOK,
    task_names.DELIVER_CHAPTER_WEBHOOK,
    task_names.DELIVER_AUDIOBOOKSHELF,
)
GPU_TASKS = (task_names.RENDER_CHUNKS, task_names.BUILD_VOICE, task_names.SPEAK)


def queue_of(app: Celery, name: str) -> str:
    """The queue a task sent by name goes to: the router's pick, else the default queue (what
    ``send_task`` and ``amqp.send_task_message`` do with a route that names no queue)."""
    queue = app.amqp.router.route({}, name).get("queue") or app.amqp.default_queue
    return str(queue.name)


def test_without_gpu_queue_every_task_but_the_control_ones_goes_to_the_default_queue() -> None:
    settings = load_settings({})
    assert settings.broker.gpu_queue == ""
    routes = celery_config(settings)["task_routes"]
    assert {name for name, route in routes.items() if "queue" in route} == set(CONTROL_TASKS)
    app = make_celery(settings)
    assert {queue_of(app, name) for name in CPU_TASKS + GPU_TASKS} == {"tome"}
    assert {queue_of(app, name) for name in CONTROL_TASKS} == {"tome.control"}


def test_gpu_queue_takes_exactly_the_engine_tasks() -> None:
    settings = load_settings(
        {"TOME_QUEUE": "cpu-work", "TOME_GPU_QUEUE": "gpu", "TOME_CONTROL_QUEUE": "tome.control"}
    )
    routes = celery_config(settings)["task_routes"]
    assert {name for name, route in routes.items() if route.get("queue") == "gpu"} == set(GPU_TASKS)
    assert all(route.get("queue") in (None, "gpu", "tome.control") for route in routes.values())
    app = make_celery(settings)
    assert {name: queue_of(app, name) for name in GPU_TASKS} == dict.fromkeys(GPU_TASKS, "gpu")
    assert {name: queue_of(app, name) for name in CPU_TASKS} == dict.fromkeys(CPU_TASKS, "cpu-work")
    assert {name: queue_of(app, name) for name in CONTROL_TASKS} == dict.fromkeys(
        CONTROL_TASKS, "tome.control"
    )


def test_engine_tasks_are_registered_task_names() -> None:
    """A renamed task would silently fall back to the default queue; the route names must be real."""
    app = make_celery(load_settings({}))
    app.loader.import_default_modules()
    registered = set(app.tasks)
    assert set(ENGINE_TASKS) == set(GPU_TASKS)
    assert set(GPU_TASKS + CPU_TASKS + CONTROL_TASKS) <= registered
    assert set(ALL_TASKS) == set(GPU_TASKS + CPU_TASKS + CONTROL_TASKS)


def test_speech_goes_ahead_of_every_other_task() -> None:
    """Only a speech request has a client waiting for its first bytes; every other task waits behind it."""
    routes = celery_config(load_settings({"TOME_GPU_QUEUE": "gpu"}))["task_routes"]
    assert set(routes) == set(ALL_TASKS)
    assert routes[task_names.SPEAK]["priority"] == SPEECH_PRIORITY < WORK_PRIORITY
    assert {routes[name]["priority"] for name in ALL_TASKS if name != task_names.SPEAK} == {WORK_PRIORITY}


def test_messages_sent_by_name_land_on_their_queue() -> None:
    """send_task by name, as ``Tome.enqueue`` (API) and ``tasks._enqueue`` (workers) call it."""
    settings = load_settings({"TOME_GPU_QUEUE": "gpu"})
    app = make_celery(settings)
    app.conf.broker_url = "memory://"
    app.conf.broker_transport = None  # the embedded default names Tome's filesystem transport
    app.conf.broker_transport_options = {}
    for name in CPU_TASKS + GPU_TASKS + CONTROL_TASKS:
        app.send_task(name, args=["x"])
    received: dict[str, list[str]] = {}
    with app.connection_for_write() as conn:
        for queue in ("tome", "gpu", "tome.control"):
            with conn.SimpleQueue(queue) as simple:
                while True:
                    try:
                        message = simple.get(block=False)
                    except simple.Empty:
                        break
                    received.setdefault(queue, []).append(message.headers["task"])
                    message.ack()
    assert sorted(received["gpu"]) == sorted(GPU_TASKS)
    assert sorted(received["tome"]) == sorted(CPU_TASKS)
    assert sorted(received["tome.control"]) == sorted(CONTROL_TASKS)


def test_gpu_queue_equal_to_the_default_queue_is_refused() -> None:
    with pytest.raises(ConfigError, match="TOME_GPU_QUEUE='tome' is the same queue as TOME_QUEUE"):
        load_settings({"TOME_GPU_QUEUE": "tome"})
    with pytest.raises(ConfigError, match="same queue"):
        load_settings({"TOME_QUEUE": "work", "TOME_GPU_QUEUE": "work"})
    with pytest.raises(ConfigError):
        celery_config(Settings().with_overrides(queue="q", gpu_queue="q"))  # celery_config validates too


@pytest.mark.parametrize("env", [{"TOME_GPU_QUEUE": "gpu,tome"}, {"TOME_GPU_QUEUE": "gpu 1"},
                                 {"TOME_QUEUE": "a,b"}, {"TOME_QUEUE": ""},
                                 {"TOME_CONTROL_QUEUE": "c,d"}, {"TOME_QUEUE": "a b"},
                                 {"TOME_CONTROL_QUEUE": "tome"},
                                 {"TOME_GPU_QUEUE": "gpu", "TOME_CONTROL_QUEUE": "gpu"}])  # fmt: skip
def test_queue_names_that_celery_worker_queues_would_split_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        load_settings(env)


def test_pool_processes_get_the_start_timeout() -> None:
    settings = load_settings({"TOME_WORKER_START_TIMEOUT": "120"})
    assert celery_config(settings)["worker_proc_alive_timeout"] == 120.0
    with pytest.raises(ConfigError, match="TOME_WORKER_START_TIMEOUT"):
        load_settings({"TOME_WORKER_START_TIMEOUT": "0"})


def test_every_worker_command_consumes_the_control_queue_and_the_control_worker_only_that() -> None:
    """``make run``'s render worker takes any task; the control worker beside it only the control ones, so
    that a job's start and stitch never wait behind render batches."""
    settings = load_settings({"TOME_GPU_QUEUE": "gpu"})
    assert all_queues(settings) == ["tome", "gpu", "tome.control"]
    command = control_worker_command(settings)
    assert command[command.index("--queues") + 1] == "tome.control"
    assert (
        load_settings({"TOME_QUEUE": "work"}).broker.control_queue_name == "work.control"
    )  # private with it


def test_speech_per_owner_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="TOME_SPEECH_PER_OWNER"):
        load_settings({"TOME_SPEECH_PER_OWNER": "0"})

"""The task table (worker.task_names) and which queue each task goes to: every entry registered with Celery
under its name, the routing table from celery_config, Celery's own router reading it, and real messages
sent by name through an in-memory broker (as the API and the workers send them)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from worker import dispatch, task_names, tasks
from worker.celery_app import SPEECH_PRIORITY, WORK_PRIORITY, celery_config, make_celery
from worker.config import ConfigError, Settings, load_settings
from worker.processes import (
    all_queues,
    control_worker_command,
    render_queues,
    split_workers,
    stitch_worker_command,
)
from worker.task_names import ALL_TASKS, ENGINE_TASKS, TASKS, QueueKind, TaskSpec

ROOT = Path(__file__).resolve().parents[3]
# The names on the wire: a worker of another version takes the same messages, so none may change.
WIRE_NAMES = {
    "tome.plan_job",
    "tome.preview_script",
    "tome.start_job",
    "tome.render_chunks",
    "tome.stitch_job",
    "tome.stitch_chapter",
    "tome.build_voice",
    "tome.deliver_webhook",
    "tome.deliver_chapter_webhook",
    "tome.deliver_audiobookshelf",
    "tome.sweep",
    "tome.speak",
}

CONTROL_TASKS = (
    task_names.PLAN_JOB,
    task_names.PREVIEW_SCRIPT,
    task_names.START_JOB,
    "tome.sweep",
)
STITCH_TASKS = (task_names.STITCH_JOB, task_names.STITCH_CHAPTER)
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


def test_without_gpu_queue_every_task_but_the_control_and_stitch_ones_goes_to_the_default_queue() -> None:
    settings = load_settings({})
    assert settings.broker.gpu_queue == ""
    routes = celery_config(settings)["task_routes"]
    assert {name for name, route in routes.items() if "queue" in route} == set(CONTROL_TASKS + STITCH_TASKS)
    app = make_celery(settings)
    assert {queue_of(app, name) for name in CPU_TASKS + GPU_TASKS} == {"tome"}
    assert {queue_of(app, name) for name in CONTROL_TASKS} == {"tome.control"}
    assert {queue_of(app, name) for name in STITCH_TASKS} == {"tome.stitch"}


def test_gpu_queue_takes_exactly_the_engine_tasks() -> None:
    settings = load_settings(
        {"TOME_QUEUE": "cpu-work", "TOME_GPU_QUEUE": "gpu", "TOME_CONTROL_QUEUE": "tome.control"}
    )
    routes = celery_config(settings)["task_routes"]
    assert {name for name, route in routes.items() if route.get("queue") == "gpu"} == set(GPU_TASKS)
    assert all(
        route.get("queue") in (None, "gpu", "tome.control", "cpu-work.stitch") for route in routes.values()
    )
    app = make_celery(settings)
    assert {name: queue_of(app, name) for name in GPU_TASKS} == dict.fromkeys(GPU_TASKS, "gpu")
    assert {name: queue_of(app, name) for name in CPU_TASKS} == dict.fromkeys(CPU_TASKS, "cpu-work")
    assert {name: queue_of(app, name) for name in CONTROL_TASKS} == dict.fromkeys(
        CONTROL_TASKS, "tome.control"
    )
    assert {name: queue_of(app, name) for name in STITCH_TASKS} == dict.fromkeys(
        STITCH_TASKS, "cpu-work.stitch"
    )


def test_engine_tasks_are_registered_task_names() -> None:
    """A renamed task would silently fall back to the default queue; the route names must be real."""
    app = make_celery(load_settings({}))
    app.loader.import_default_modules()
    registered = set(app.tasks)
    assert set(ENGINE_TASKS) == set(GPU_TASKS)
    assert set(GPU_TASKS + CPU_TASKS + CONTROL_TASKS + STITCH_TASKS) <= registered
    assert set(ALL_TASKS) == set(GPU_TASKS + CPU_TASKS + CONTROL_TASKS + STITCH_TASKS)


def _queue_of_kind(spec: TaskSpec, env: dict[str, str]) -> str:
    settings = load_settings(env)
    return {
        QueueKind.CONTROL: settings.broker.control_queue_name,
        QueueKind.STITCH: settings.broker.stitch_queue_name,
        QueueKind.ENGINE: settings.broker.gpu_queue or settings.broker.queue,
        QueueKind.DEFAULT: settings.broker.queue,
    }[spec.queue]


@pytest.mark.parametrize("env", [{}, {"TOME_QUEUE": "work", "TOME_GPU_QUEUE": "gpu"}])
def test_every_table_entry_is_a_registered_task_routed_by_its_kind(env: dict[str, str]) -> None:
    app = make_celery(load_settings(env))
    app.loader.import_default_modules()
    assert {spec.name for spec in TASKS} == WIRE_NAMES
    for spec in TASKS:
        task = app.tasks[spec.name]
        assert task.name == tasks.CELERY_TASKS[spec.name].name == spec.name
        assert queue_of(app, spec.name) == _queue_of_kind(spec, env), spec.name
        assert (getattr(task, "autoretry_for", ()) == tasks.TRANSIENT) is spec.retried, spec.name
        assert callable(dispatch.function_of(spec)), spec.name
        assert spec.on_break is None or callable(dispatch.function_of(spec, "on_break"))
    assert set(dispatch.handlers()) == WIRE_NAMES


def test_a_name_that_names_no_handler_is_refused() -> None:
    with pytest.raises(LookupError, match=r"worker\.dispatch has no body function 'handle_nothing'"):
        dispatch.function_of(TaskSpec("tome.nothing", "handle_nothing"))


def task_name_literals(root: Path) -> list[str]:
    """``path:line`` of every string literal that is a task name, in worker/ and webapi/ but the table."""
    found = []
    for path in sorted([*(root / "worker").rglob("*.py"), *(root / "webapi").rglob("*.py")]):
        if path == root / "worker" / "task_names.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in WIRE_NAMES:
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_task_names_are_written_only_in_the_table(tmp_path: Path) -> None:
    assert task_name_literals(ROOT) == []
    (tmp_path / "worker").mkdir()
    (tmp_path / "worker" / "sender.py").write_text('send("tome.start_job", [])\n')
    assert task_name_literals(tmp_path) == ["worker/sender.py:1"]


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
    for name in CPU_TASKS + GPU_TASKS + CONTROL_TASKS + STITCH_TASKS:
        app.send_task(name, args=["x"])
    received: dict[str, list[str]] = {}
    with app.connection_for_write() as conn:
        for queue in ("tome", "gpu", "tome.control", "tome.stitch"):
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
    assert sorted(received["tome.stitch"]) == sorted(STITCH_TASKS)


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
                                 {"TOME_GPU_QUEUE": "gpu", "TOME_CONTROL_QUEUE": "gpu"},
                                 {"TOME_STITCH_QUEUE": "s,t"}, {"TOME_STITCH_QUEUE": "tome"},
                                 {"TOME_STITCH_QUEUE": "tome.control"},
                                 {"TOME_GPU_QUEUE": "gpu", "TOME_STITCH_QUEUE": "gpu"}])  # fmt: skip
def test_queue_names_that_celery_worker_queues_would_split_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        load_settings(env)


def test_pool_processes_get_the_start_timeout() -> None:
    settings = load_settings({"TOME_WORKER_START_TIMEOUT": "120"})
    assert celery_config(settings)["worker_proc_alive_timeout"] == 120.0
    with pytest.raises(ConfigError, match="TOME_WORKER_START_TIMEOUT"):
        load_settings({"TOME_WORKER_START_TIMEOUT": "0"})


def test_make_runs_workers_split_the_queues_and_no_render_process_takes_control_tasks_or_stitches() -> None:
    """``make run``'s render worker takes the engine tasks, webhooks and deliveries; the control worker
    beside it only the control tasks, so that a job's plan and start never wait behind render batches or
    stitches, nor are taken by a process that renders next; the stitch worker only stitches. Every queue
    Tome routes to is consumed by exactly one of the three."""
    for env in ({}, {"TOME_GPU_QUEUE": "gpu"}):
        settings = load_settings(env)
        render, control, stitch = (_queues(command) for command in split_workers(settings))
        assert render == render_queues(settings) == [q for q in ("tome", env.get("TOME_GPU_QUEUE")) if q]
        assert (control, stitch) == (["tome.control"], ["tome.stitch"])
        routed = {route.get("queue", "tome") for route in celery_config(settings)["task_routes"].values()}
        consumed = render + control + stitch
        assert sorted(consumed) == sorted(set(consumed)) == sorted(routed | {"tome"})
        assert sorted(all_queues(settings)) == sorted(consumed)  # a lone worker still takes everything
    command = stitch_worker_command(load_settings({}), "--hostname", "s@%h")
    assert _queues(command) == ["tome.stitch"]
    assert command[-2:] == ["--hostname", "s@%h"]
    command = control_worker_command(load_settings({}))
    assert command[command.index("--concurrency") + 1] == "2"
    work = load_settings({"TOME_QUEUE": "work"})  # private with it
    assert (work.broker.control_queue_name, work.broker.stitch_queue_name) == ("work.control", "work.stitch")
    assert load_settings({"TOME_STITCH_QUEUE": "joins"}).broker.stitch_queue_name == "joins"


def _queues(command: list[str]) -> list[str]:
    return command[command.index("--queues") + 1].split(",")


def test_speech_per_owner_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="TOME_SPEECH_PER_OWNER"):
        load_settings({"TOME_SPEECH_PER_OWNER": "0"})


def _memory_app() -> Celery:
    """The app as a worker builds it, on an in-memory broker."""
    app = make_celery(load_settings({}))
    app.conf.broker_url = "memory://"
    app.conf.broker_transport = None  # the embedded default names Tome's filesystem transport
    app.conf.broker_transport_options = {}
    app.loader.import_default_modules()
    return app


def test_a_task_whose_body_breaks_off_runs_its_on_break_then_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """The preview's body raising (a time limit, a bug) fails the preview, so its client gets an answer."""
    broken: list[list[Any]] = []

    def raises(rt: Any, args: list[Any], enqueue: Any) -> str:
        raise RuntimeError("planning broke")

    monkeypatch.setitem(dispatch.handlers(), task_names.PREVIEW_SCRIPT, raises)
    monkeypatch.setattr(dispatch, "preview_broke_off", lambda rt, args: broken.append(args))
    monkeypatch.setattr(tasks, "runtime", lambda: None)
    result = _memory_app().tasks[task_names.PREVIEW_SCRIPT].apply(args=["p-1"])
    assert isinstance(result.result, RuntimeError)
    assert broken == [["p-1"]]
    monkeypatch.setitem(dispatch.handlers(), task_names.START_JOB, raises)  # no on_break: just raised
    assert isinstance(_memory_app().tasks[task_names.START_JOB].apply(args=["j-1"]).result, RuntimeError)
    assert broken == [["p-1"]]


def test_a_rescheduling_task_is_sent_again_after_the_delay_it_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outcomes = iter([{"retry_in": 30.0}, {"retry_in": None}])
    monkeypatch.setitem(
        dispatch.handlers(), task_names.DELIVER_AUDIOBOOKSHELF, lambda rt, a, e: next(outcomes)
    )
    monkeypatch.setattr(tasks, "runtime", lambda: None)
    app = _memory_app()
    for _ in range(2):
        app.tasks[task_names.DELIVER_AUDIOBOOKSHELF].apply(args=["j-1"])
    with app.connection_for_write() as conn, conn.SimpleQueue("tome") as queue:
        message = queue.get(block=False)
        assert (message.headers["task"], message.headers["argsrepr"]) == (
            task_names.DELIVER_AUDIOBOOKSHELF,
            "['j-1']",
        )
        assert message.headers["eta"] is not None  # sent with its countdown
        message.ack()
        with pytest.raises(queue.Empty):
            queue.get(block=False)  # the second outcome, with no retry due, sent nothing

"""The task table: every Celery task Tome runs is one :func:`_task` line below, and everything else is
derived from it: the Celery tasks (:mod:`worker.tasks`), their routes and priorities
(:func:`worker.celery_app.task_routes`), the handler each name runs (:mod:`worker.dispatch`) and the
names the API and the workers send.

Nothing but strings and flags: the API sends tasks by name without importing Celery, engines, audio or the
pipeline; a handler is named here and looked up only where tasks run (worker.dispatch imports the
pipeline). The names are the wire format: a worker of another version takes the same messages, so a name
never changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any


class QueueKind(Enum):
    """Which queue a task goes to (:func:`worker.celery_app.task_routes` maps a kind to a queue)."""

    CONTROL = "control"  # short tasks that move jobs along: TOME_CONTROL_QUEUE, served by its own worker
    ENGINE = "engine"  # tasks that run the TTS engine: TOME_GPU_QUEUE when set, else the default queue
    STITCH = "stitch"  # stitches, minutes of ffmpeg for a long book: TOME_STITCH_QUEUE
    DEFAULT = "default"  # webhooks and deliveries: TOME_QUEUE


@dataclass(frozen=True)
class TaskSpec:
    """One task: its name, its handler and how it is sent and run.

    ``body`` names its handler in :mod:`worker.dispatch` (a ``Handler``). ``retried``: transient failures
    (database, broker, out of memory) are retried with backoff (``worker.tasks.RETRIES``). ``urgent``: sent
    at the speech priority instead of the work priority. ``job_arg``: the first argument is a job id, which
    the task's log lines carry. ``reschedules``: a result's ``retry_in`` (seconds) sends the task again after
    that delay. ``on_break`` names a function of :mod:`worker.dispatch`, called with the runtime and the
    arguments when the body raises in a Celery worker, before the exception goes on."""

    name: str
    body: str
    queue: QueueKind = QueueKind.DEFAULT
    retried: bool = True
    urgent: bool = False
    job_arg: bool = True
    reschedules: bool = False
    on_break: str | None = None


_TABLE: list[TaskSpec] = []


def _task(name: str, body: str, queue: QueueKind = QueueKind.DEFAULT, **flags: Any) -> str:
    """Add a task to the table; its name comes back for the module's constant."""
    if any(spec.name == name for spec in _TABLE):
        raise ValueError(f"task {name!r} is in the table twice")
    _TABLE.append(TaskSpec(name, body, queue, **flags))
    return name


_CONTROL, _ENGINE, _STITCH = QueueKind.CONTROL, QueueKind.ENGINE, QueueKind.STITCH

# args: [job_id]
PLAN_JOB = _task("tome.plan_job", "handle_plan", _CONTROL)
# args: [preview_id]: POST /v1/scripts/preview planned by a worker; one that breaks off is failed with a 422
# (its client polls for an answer), and is not retried
PREVIEW_SCRIPT = _task(
    "tome.preview_script",
    "handle_preview",
    _CONTROL,
    retried=False,
    job_arg=False,
    on_break="preview_broke_off",
)
START_JOB = _task("tome.start_job", "handle_start", _CONTROL)  # args: [job_id]
RENDER_CHUNKS = _task("tome.render_chunks", "handle_render", _ENGINE)  # args: [job_id, [seq, ...]]
STITCH_JOB = _task("tome.stitch_job", "handle_stitch", _STITCH)  # args: [job_id, stitch_token]
# args: [job_id, chapter index, chapter token]
STITCH_CHAPTER = _task("tome.stitch_chapter", "handle_stitch_chapter", _STITCH)
BUILD_VOICE = _task("tome.build_voice", "handle_build", _ENGINE, job_arg=False)  # args: [voice_id]
# args: [job_id]: one delivery attempt; the sweeper retries failures on the job's backoff schedule
DELIVER_WEBHOOK = _task("tome.deliver_webhook", "handle_deliver")
# args: [job_id, chapter index]: one delivery attempt of a chapter's event, retried by the sweeper
DELIVER_CHAPTER_WEBHOOK = _task("tome.deliver_chapter_webhook", "handle_deliver_chapter")
# args: [job_id]: one attempt at the upload into the owner's Audiobookshelf; a retry is sent again after its
# backoff (the job row holds when it is due, and the sweeper re-sends a due one whose message was lost)
DELIVER_AUDIOBOOKSHELF = _task(
    "tome.deliver_audiobookshelf", "handle_deliver_audiobookshelf", reschedules=True
)
SWEEP = _task("tome.sweep", "handle_sweep", _CONTROL, job_arg=False)  # args: []
# args: [job_id]: a speech job's chunks in order (POST /v1/audio/speech). Not retried: its client waits now,
# and the API gives up after TOME_SPEECH_WAIT_SECONDS (a retry with backoff would come too late).
SPEAK = _task("tome.speak", "handle_speak", _ENGINE, retried=False, urgent=True)

TASKS: tuple[TaskSpec, ...] = tuple(_TABLE)
BY_NAME: dict[str, TaskSpec] = {spec.name: spec for spec in TASKS}

ALL_TASKS = tuple(spec.name for spec in TASKS)
# The tasks that run the TTS engine; with TOME_GPU_QUEUE set they go to that queue.
ENGINE_TASKS = tuple(spec.name for spec in TASKS if spec.queue is QueueKind.ENGINE)
# Short tasks that move jobs along (plan, preview, start, the sweep): on their own queue, served by a
# dedicated consumer, so that they never wait behind render batches or stitches.
CONTROL_TASKS = tuple(spec.name for spec in TASKS if spec.queue is QueueKind.CONTROL)
# Stitches: on a queue of their own, so that a long one never holds the control consumer.
STITCH_TASKS = tuple(spec.name for spec in TASKS if spec.queue is QueueKind.STITCH)

# Sends a follow-up task by name, after the state it depends on is committed.
Enqueue = Callable[[str, list[Any]], None]

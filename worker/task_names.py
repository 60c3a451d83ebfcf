"""The names of Tome's Celery tasks and the shape of the function that sends them.

Nothing but strings: the API sends tasks by name without importing engines, audio or the pipeline.
The table that maps each name to the code it runs is :mod:`worker.dispatch`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PLAN_JOB = "tome.plan_job"  # args: [job_id]
PREVIEW_SCRIPT = "tome.preview_script"  # args: [preview_id]: POST /v1/scripts/preview planned by a worker
START_JOB = "tome.start_job"  # args: [job_id]
RENDER_CHUNKS = "tome.render_chunks"  # args: [job_id, [seq, ...]]
STITCH_JOB = "tome.stitch_job"  # args: [job_id, stitch_token]
STITCH_CHAPTER = "tome.stitch_chapter"  # args: [job_id, chapter index, chapter token]
BUILD_VOICE = "tome.build_voice"  # args: [voice_id]
DELIVER_WEBHOOK = "tome.deliver_webhook"  # args: [job_id]
DELIVER_CHAPTER_WEBHOOK = "tome.deliver_chapter_webhook"  # args: [job_id, chapter index]
DELIVER_AUDIOBOOKSHELF = "tome.deliver_audiobookshelf"  # args: [job_id]: upload into the owner's server
SWEEP = "tome.sweep"  # args: []
SPEAK = "tome.speak"  # args: [job_id]: a speech job's chunks in order (POST /v1/audio/speech)

# The tasks that run the TTS engine; with TOME_GPU_QUEUE set they go to that queue (celery_app).
ENGINE_TASKS = (RENDER_CHUNKS, BUILD_VOICE, SPEAK)
# Short tasks that move jobs along (plan, start, wake-ups, the sweep): on their own queue, served by a
# dedicated consumer, so that they never wait behind render batches or stitches (celery_app.task_routes).
CONTROL_TASKS = (PLAN_JOB, PREVIEW_SCRIPT, START_JOB, SWEEP)
# Stitches, minutes of ffmpeg for a long book: on a queue of their own (celery_app.task_routes).
STITCH_TASKS = (STITCH_JOB, STITCH_CHAPTER)
# Every task; all but SPEAK are sent at the background priority (celery_app.task_routes).
ALL_TASKS = (
    PLAN_JOB,
    PREVIEW_SCRIPT,
    START_JOB,
    RENDER_CHUNKS,
    STITCH_JOB,
    STITCH_CHAPTER,
    BUILD_VOICE,
    DELIVER_WEBHOOK,
    DELIVER_CHAPTER_WEBHOOK,
    DELIVER_AUDIOBOOKSHELF,
    SWEEP,
    SPEAK,
)

# Sends a follow-up task by name, after the state it depends on is committed.
Enqueue = Callable[[str, list[Any]], None]

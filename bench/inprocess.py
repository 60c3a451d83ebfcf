"""Run a job in this process through the real pipeline functions, with a synchronous local queue.

This is the same code the Celery tasks call (``worker.tasks`` is a thin wrapper around ``worker.pipeline``,
``worker.voice_prompts.build_voice`` and ``worker.webhooks.deliver``): every follow-up message a task body
sends goes into a local FIFO, and the loop below delivers them one by one, retrying the two "not yet"
exceptions the way the Celery tasks do. One process, so one prompt LRU.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from worker import pipeline, webhooks
from worker.runtime import Runtime
from worker.voice_prompts import VoiceNotReady, build_voice

MAX_DELIVERIES = 10_000  # a loop that never ends is a bug in the pipeline; fail instead


@dataclass
class Dispatch:
    """What the loop delivered: tasks run per name, seconds spent in each, retries."""

    wall_seconds: float = 0.0
    tasks: Counter[str] = field(default_factory=Counter)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    retries: int = 0


def run_messages(rt: Runtime, messages: Iterable[tuple[str, list[Any]]]) -> Dispatch:
    queue: deque[tuple[str, list[Any]]] = deque(messages)

    def enqueue(name: str, args: list[Any]) -> None:
        queue.append((name, args))

    stats = Dispatch()
    started = time.perf_counter()
    while queue:
        if sum(stats.tasks.values()) >= MAX_DELIVERIES:
            raise RuntimeError(f"more than {MAX_DELIVERIES} messages delivered; the job does not converge")
        name, args = queue.popleft()
        began = time.perf_counter()
        try:
            if name == pipeline.BUILD_VOICE:
                build_voice(rt, uuid.UUID(args[0]), force=bool(args[1]) if len(args) > 1 else False)
            elif name == pipeline.START_JOB:
                pipeline.start_job(rt, uuid.UUID(args[0]), enqueue)
            elif name == pipeline.RENDER_CHUNKS:
                pipeline.render_chunks(rt, uuid.UUID(args[0]), [int(s) for s in args[1]], enqueue)
            elif name == pipeline.STITCH_JOB:
                pipeline.stitch_job(rt, uuid.UUID(args[0]), str(args[1]), enqueue)
            elif name == pipeline.DELIVER_WEBHOOK:
                webhooks.deliver(rt, uuid.UUID(args[0]))  # "not_due": the bench job has no webhook
            else:
                raise RuntimeError(f"unexpected message {name}")
        except (pipeline.WaitForVoice, VoiceNotReady):
            queue.append((name, args))  # Celery retries these after a countdown; here, after the queue
            stats.retries += 1
        stats.tasks[name] += 1
        stats.seconds[name] += time.perf_counter() - began
    stats.wall_seconds = time.perf_counter() - started
    return stats

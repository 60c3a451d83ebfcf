"""Run a job in this process through the real pipeline functions, with a synchronous local queue.

This is the same code the Celery tasks run (``worker.dispatch``): every follow-up message a task body
sends goes into a local FIFO, and the loop below delivers them one by one. One process, so one prompt
LRU.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from worker import dispatch
from worker.runtime import Runtime
from worker.task_names import START_JOB

MAX_DELIVERIES = 10_000  # a loop that never ends is a bug in the pipeline; fail instead


@dataclass
class Dispatch:
    """What the loop delivered: tasks run per name, seconds spent in each, starts that waited."""

    wall_seconds: float = 0.0
    tasks: Counter[str] = field(default_factory=Counter)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    waits: int = 0


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
        outcome = dispatch.run(rt, name, args, enqueue)
        if name == START_JOB and outcome == "waiting":
            stats.waits += 1  # the voice's build sends the start again when it ends
        stats.tasks[name] += 1
        stats.seconds[name] += time.perf_counter() - began
    stats.wall_seconds = time.perf_counter() - started
    return stats

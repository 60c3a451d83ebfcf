"""Run Tome's task bodies synchronously in this process: the same handlers the Celery tasks run
(worker.dispatch), with follow-up messages kept in a local queue and dispatched in order (for tests that
need no worker process)."""

from __future__ import annotations

from collections import deque
from typing import Any

from worker import dispatch
from worker.runtime import Runtime


class Inline:
    def __init__(self, rt: Runtime):
        self.rt = rt
        self.queue: deque[tuple[str, list[Any]]] = deque()
        self.sent: list[tuple[str, list[Any]]] = []

    def enqueue(self, name: str, args: list[Any], priority: int | None = None) -> None:
        """Keep the message; it runs in the order sent (its priority is a broker's matter)."""
        self.queue.append((name, args))
        self.sent.append((name, args))

    def run(self, max_messages: int = 10_000) -> int:
        """Dispatch until the queue is empty; returns how many messages ran."""
        handled = 0
        while self.queue and handled < max_messages:
            name, args = self.queue.popleft()
            handled += 1
            dispatch.run(self.rt, name, args, self.enqueue)
        return handled

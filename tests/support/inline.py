"""Run Tome's task bodies synchronously in this process: the same functions the Celery tasks call, with
follow-up messages kept in a local queue and dispatched in order (for tests that need no worker process)."""

from __future__ import annotations

import uuid
from collections import deque
from typing import Any

from worker import pipeline, webhooks
from worker.runtime import Runtime
from worker.voice_prompts import VoiceNotReady, build_voice


class Inline:
    def __init__(self, rt: Runtime):
        self.rt = rt
        self.queue: deque[tuple[str, list[Any]]] = deque()
        self.sent: list[tuple[str, list[Any]]] = []

    def enqueue(self, name: str, args: list[Any]) -> None:
        self.queue.append((name, args))
        self.sent.append((name, args))

    def run(self, max_messages: int = 10_000) -> int:
        """Dispatch until the queue is empty; returns how many messages ran."""
        handled = 0
        while self.queue and handled < max_messages:
            name, args = self.queue.popleft()
            handled += 1
            try:
                self._dispatch(name, args)
            except (pipeline.WaitForVoice, VoiceNotReady):
                self.queue.append((name, args))  # what Celery's retry would do
        return handled

    def _dispatch(self, name: str, args: list[Any]) -> None:
        rt, job_or_voice = self.rt, uuid.UUID(str(args[0]))
        if name == pipeline.START_JOB:
            pipeline.start_job(rt, job_or_voice, self.enqueue)
        elif name == pipeline.RENDER_CHUNKS:
            pipeline.render_chunks(rt, job_or_voice, [int(s) for s in args[1]], self.enqueue)
        elif name == pipeline.STITCH_JOB:
            pipeline.stitch_job(rt, job_or_voice, str(args[1]), self.enqueue)
        elif name == pipeline.BUILD_VOICE:
            build_voice(rt, job_or_voice)
        elif name == pipeline.DELIVER_WEBHOOK:
            webhooks.deliver(rt, job_or_voice)
        else:
            raise ValueError(f"unknown task {name}")

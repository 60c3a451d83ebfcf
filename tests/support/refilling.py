"""A refilling engine for tests of cross-task batching (worker.jobs.render, ``_Puller``) that need no
torch: the real espeak engine behind worker.engines.base.RefillingEngine, with faults a test arms.

:meth:`RefillingEspeak.synthesize_refilling` asks its caller's ``refill`` for the free slots of a batch of
``slots`` a few times (as the fast runner asks before its frames), then renders the batch and every
refilled request with espeak in one call. Armed, it fails a shared call that holds refilled requests,
leaves the refilled requests out of its result (the caller renders them on its own), or fails a call
of its own (not shared) that renders a chosen text, once: an accelerator loop's failures, on demand.

:func:`start_pull_jobs` sets the scene the pull tests share: three owners' started jobs, and the one
render message the start sent taken off the queue (:class:`PullJobs`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flask import Flask
from sqlalchemy import select

from models import Chunk
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.factories import submit_job, upload_voice
from tests.support.inline import Inline
from webapi.cli import mint_key
from worker.config import Settings
from worker.engines import Engine, SynthesisRequest
from worker.engines.base import Waveform, WordMark, synthesize_timed
from worker.engines.catalog import spec_for
from worker.engines.registry import register
from worker.jobs.start import StartOutcome, start_job
from worker.runtime import Runtime
from worker.task_names import RENDER_CHUNKS
from worker.voices.prompts import build_voice

OWNERS = ("alice", "bob", "carol")


class InjectedFault(RuntimeError):
    """A failure a test armed (not an EngineError: the render task treats it as transient)."""


class RefillingEspeak:
    """The espeak engine whose batches its caller refills while they render; every other attribute is
    espeak's own."""

    STEPS = 3  # times a shared call asks for its free slots

    def __init__(self, inner: Engine, slots: int = 4) -> None:
        self.inner = inner
        self.slots = slots
        self.refills = True
        self.fail_shared = 0  # shared calls still to fail once they hold a refilled request
        self.leave_out = 0  # shared calls still to leave their refilled requests out of their result
        self.fail_texts: set[str] = set()  # texts whose next call of their own (not shared) fails
        self.pulled: list[list[str]] = []  # the refilled texts of each shared call, in order
        self.failed: list[str] = []  # what each fault that fired hit
        self.waiting: list[int | None] = []  # the waiting requests each shared call was told of

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def synthesize_refilling(
        self,
        batch: Sequence[SynthesisRequest],
        refill: Callable[[int], Sequence[SynthesisRequest]],
        waiting: int | None = None,
    ) -> list[Waveform | None]:
        self.waiting.append(waiting)
        requests = list(batch)
        for _ in range(self.STEPS):
            wanted = max(0, self.slots - len(requests))
            given = list(refill(wanted))
            assert len(given) <= wanted, (len(given), wanted)
            requests.extend(given)
        refilled = requests[len(batch) :]
        self.pulled.append([r.text for r in refilled])
        if refilled and self.fail_shared > 0:
            self.fail_shared -= 1
            self.failed.append("shared")
            raise InjectedFault("the shared batch failed")
        waves: list[Waveform | None] = [wave for wave, _ in synthesize_timed(self.inner, requests)]
        if refilled and self.leave_out > 0:
            self.leave_out -= 1
            waves[len(batch) :] = [None] * len(refilled)
        return waves

    def synthesize(self, batch: Sequence[SynthesisRequest]) -> list[Waveform]:
        return [wave for wave, _ in self.synthesize_timed(batch)]

    def synthesize_timed(self, batch: Sequence[SynthesisRequest]) -> list[tuple[Waveform, list[WordMark]]]:
        hit = next((r.text for r in batch if r.text in self.fail_texts), None)
        if hit is not None:
            self.fail_texts.discard(hit)
            self.failed.append(hit)
            raise InjectedFault(f"rendering {hit!r} failed")
        return synthesize_timed(self.inner, batch)


@contextmanager
def refilling_espeak(settings: Settings, slots: int = 4) -> Iterator[RefillingEspeak]:
    """While open, this process's ``espeak`` engine is a :class:`RefillingEspeak` (same name, version and
    speech: prompts, content keys and QA are espeak's); the catalog's engine again after."""
    spec = spec_for("espeak")
    assert spec is not None

    def catalog(s: Settings) -> Engine:
        return spec.create(s.engines.section(spec))

    engine = RefillingEspeak(catalog(settings), slots)
    register("espeak", lambda _s: engine)
    try:
        yield engine
    finally:
        register("espeak", catalog)


@dataclass
class PullJobs:
    """Three owners' started three-chunk jobs (alice's first, then bob's, then carol's), each in a voice of
    its own, built, no text another owner's (no reuse between them); ``task``: the one render message the
    start sent (alice's first chunk), taken off ``inline``'s queue for the test to run."""

    rt: Runtime
    inline: Inline
    jobs: dict[str, uuid.UUID]
    task: tuple[uuid.UUID, list[int]]

    def chunks(self, owners: Iterable[str] = OWNERS) -> list[Chunk]:
        """The owners' chunks as they are now, by id."""
        ids = [self.jobs[o] for o in owners]
        with self.rt.sessions() as session:
            return list(session.scalars(select(Chunk).where(Chunk.job_id.in_(ids)).order_by(Chunk.id)))

    def first_text(self, owner: str) -> str:
        """The text of the owner's first chunk."""
        [text] = [c.text for c in self.chunks([owner]) if c.seq == 0]
        return text


def start_pull_jobs(app: Flask, reference_audio: tuple[bytes, str]) -> PullJobs:
    """The scene of :class:`PullJobs`, on ``app``'s database, with tasks run in this process."""
    client, rt = app.test_client(), tome_of(app).runtime
    inline = Inline(rt)
    jobs: dict[str, uuid.UUID] = {}
    for owner in OWNERS:
        headers = bearer(mint_key(app, owner, "k", admin=False))
        voice = upload_voice(client, headers, reference_audio[0], ref_text=reference_audio[1])
        assert voice.status_code == 202, voice.json
        assert build_voice(rt, uuid.UUID(voice.json["id"])).value == "built"
        job = submit_job(client, headers, "narrator", title=owner, script=_script(owner))
        assert job.status_code == 202, job.json
        jobs[owner] = uuid.UUID(job.json["id"])
        assert start_job(rt, jobs[owner], inline.enqueue) == StartOutcome.STARTED
    [args] = [args for name, args in inline.queue if name == RENDER_CHUNKS]
    inline.queue.clear()
    return PullJobs(rt, inline, jobs, (uuid.UUID(args[0]), list(args[1])))


def _script(owner: str) -> str:
    """Three paragraphs (three chunks), none another owner's."""
    return "\n\n".join(
        f"{owner.title()} walked down to the harbour for the {n} time, and waited there for the boat."
        for n in ("first", "second", "third")
    )

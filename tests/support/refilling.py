"""A refilling engine for tests of cross-task batching (worker.jobs.render, ``_Puller``) that need no
torch: the real espeak engine behind worker.engines.base.RefillingEngine, with faults a test arms.

:meth:`RefillingEspeak.synthesize_refilling` asks its caller's ``refill`` for the free slots of a batch of
``slots`` a few times (as the fast runner asks before its frames), then renders the batch and every
refilled request with espeak in one call. Armed, it fails a shared call that holds refilled requests,
leaves the refilled requests out of its result (the caller renders them on its own), or fails a call
of its own (not shared) that renders a chosen text, once: an accelerator loop's failures, on demand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from worker.config import Settings
from worker.engines import Engine, SynthesisRequest
from worker.engines.base import Waveform, WordMark, synthesize_timed
from worker.engines.catalog import spec_for
from worker.engines.registry import register


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

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def synthesize_refilling(
        self, batch: Sequence[SynthesisRequest], refill: Callable[[int], Sequence[SynthesisRequest]]
    ) -> list[Waveform | None]:
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

"""One fast-runner call whose free slots are refilled by its caller while it runs (pure: torch, numpy).

:meth:`Qwen3Engine.synthesize_refilling` renders a batch through :meth:`TalkerLoop.run_refilling`: before
every frame the caller's ``refill`` (run in the caller's thread: no locks) is asked for up to as many
requests as there are free slots (a render task answers with the fair scheduler's next chunks on this
engine, any job and voice). Once the batch's own rows have ended it is asked for at most
:data:`TAIL_ROUNDS` times the rows it can fill more (bounded: the batch's own waves wait for the call's
end), then for none, and the call ends with the rows it took. In all it takes at most
:data:`PULL_ROUNDS` times its slots, refused requests counted, and none after a refusal (docs/engines.md).

The slots are the engine's limit, or the batch plus the ``waiting`` requests the caller announces,
rounded up to a power of two, when fewer. The buffers are sized before the first row (:class:`FeedLimits`,
docs/engines.md): a refilled request beyond them, or whose parameters the engine refuses, gets None in
the result, and the caller renders it on its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from worker.engines.base import EngineError, SynthesisRequest, Waveform, rate_scale

if TYPE_CHECKING:
    import torch

    from worker.engines.qwen3 import Qwen3Engine
    from worker.engines.qwen3_loop import LoopRow

__all__ = ["PULL_ROUNDS", "TAIL_ROUNDS", "FeedLimits", "Refill", "synthesize_refilling"]

# Asked before every frame with the number of requests the loop takes now; returns at most that many.
Refill = Callable[[int], Sequence[SynthesisRequest]]

MIN_TRAILING = 64  # text positions a refilled row may have at least, whatever the batch's own
TAIL_ROUNDS = 2  # once the batch's own rows end, refill up to this many times the rows it can fill more
PULL_ROUNDS = 4  # a call takes at most this many times its slots from refill, refused requests included


@dataclass(frozen=True)
class FeedLimits:
    """The most a refilled row may bring: prompt plus frame cap, text embeddings, frame cap (the loop's
    buffers are sized before the first row)."""

    length: int
    trailing: int
    cap: int

    def admits(self, row: LoopRow) -> bool:
        return (
            row.prefill.shape[0] + row.max_new_tokens <= self.length
            and row.trailing.shape[0] <= self.trailing
            and row.max_new_tokens <= self.cap
        )


def synthesize_refilling(
    engine: Qwen3Engine, batch: Sequence[SynthesisRequest], refill: Refill, waiting: int | None = None
) -> list[Waveform | None]:
    """The waves of ``batch`` then of every request ``refill`` returned, in the order given; None for a
    refilled request the loop could not take. A request of ``batch`` the engine refuses raises
    :class:`EngineError` before anything is rendered. ``waiting``: how many requests ``refill`` could give
    now (None: unknown; the slots are then the engine's limit)."""
    from worker.engines.qwen3 import change_rate

    requests: list[SynthesisRequest] = list(batch)
    # Validated before anything is rendered (raises for the batch); by request index.
    prepared = {index: _prepared(engine, r) for index, r in enumerate(requests)}
    waves: dict[int, Waveform | None] = {}
    with engine._generate_lock:
        own: list[tuple[Hashable, LoopRow]] = []
        for index, request in enumerate(requests):
            if request.text.strip():
                item, language, kwargs, _rate = prepared[index]
                own.append((index, engine._loop_row(request, item, language, kwargs)))
            else:
                waves[index] = np.zeros(0, dtype=np.float32)
        if not own:
            return [waves[i] for i in range(len(requests))]
        limits = _limits([row for _, row in own])

        slots = _slots(engine.batch_limit(limits.length), len(own), waiting)
        budget = PULL_ROUNDS * slots  # requests refill may still give, refused ones included

        def more(wanted: int) -> list[tuple[Hashable, LoopRow]]:
            nonlocal budget
            wanted = min(wanted, budget)
            given = list(refill(wanted))  # asked even for none: the caller keeps its leases meanwhile
            if len(given) > wanted:
                raise ValueError(f"refill gave {len(given)} requests where {wanted} were asked for")
            budget -= len(given)
            taken: list[tuple[Hashable, LoopRow]] = []
            for request in given:
                index = len(requests)
                requests.append(request)
                row = _admitted(engine, request, limits, prepared, waves, index)
                if row is not None:
                    taken.append((index, row))
                elif waves[index] is None:  # refused: the caller renders it on its own; pull no more
                    budget = 0
            return taken

        filled = slots if waiting is None else min(slots, len(own) + max(0, waiting))
        loop = engine._fast_loop()
        began = time.perf_counter()
        frames = loop.run_refilling(own, slots, limits, more, tail=TAIL_ROUNDS * filled)
        engine.last_generate_s = time.perf_counter() - began
        engine.last_calls = (loop.last_slots,)
        made = sum(int(f.shape[0]) for f in frames.values())
        engine.last_occupancy = made / max(1, loop.last_steps * loop.last_slots)
        rendered = sorted(cast(int, key) for key in frames)
        prefixes = [engine._reference_codes(prepared[i][0]) for i in rendered]
        wholes = [_joined(prefix, frames[i]) for i, prefix in zip(rendered, prefixes, strict=True)]
        for index, samples in zip(rendered, engine._decode_rows(wholes, prefixes), strict=True):
            waves[index] = np.clip(samples, -1.0, 1.0).astype(np.float32)
    out: list[Waveform | None] = []
    for index in range(len(requests)):
        wave = waves.get(index)
        out.append(None if wave is None else change_rate(wave, prepared[index][3]))
    return out


def _admitted(
    engine: Qwen3Engine,
    request: SynthesisRequest,
    limits: FeedLimits,
    prepared: dict[int, tuple[Any, str, dict[str, Any], float]],
    waves: dict[int, Waveform | None],
    index: int,
) -> LoopRow | None:
    """The loop row of refilled ``request`` (at ``index``), or None with its wave set: empty for a blank
    text, None for a request the engine refuses (the caller renders it alone, which names the error) or
    one beyond the buffers' ``limits``."""
    try:
        prepared[index] = _prepared(engine, request)
    except EngineError:
        waves[index] = None
        return None
    if not request.text.strip():
        waves[index] = np.zeros(0, dtype=np.float32)
        return None
    item, language, kwargs, _rate = prepared[index]
    row = engine._loop_row(request, item, language, kwargs)
    if limits.admits(row):
        return row
    waves[index] = None
    return None


def _slots(limit: int, own: int, waiting: int | None) -> int:
    """The loop's slots: the engine's ``limit``, or the ``own`` rows plus the ``waiting`` requests rounded
    up to a power of two (a handful of shapes, each captured once), when that is fewer."""
    if waiting is None:
        return limit
    wanted = max(1, own + max(0, waiting))
    return min(limit, 1 << (wanted - 1).bit_length())


def _limits(rows: Sequence[LoopRow]) -> FeedLimits:
    """The loop's buffers for a batch of ``rows`` and the rows refilled beside them (module docstring)."""
    from worker.engines.qwen3_loop import CACHE_BUCKET, _round_up

    longest = max(r.prefill.shape[0] + r.max_new_tokens for r in rows)
    return FeedLimits(
        length=_round_up(longest, CACHE_BUCKET) + CACHE_BUCKET,
        trailing=max(MIN_TRAILING, 2 * max(r.trailing.shape[0] for r in rows)),
        cap=max(r.max_new_tokens for r in rows),
    )


def _prepared(engine: Qwen3Engine, request: SynthesisRequest) -> tuple[Any, str, dict[str, Any], float]:
    """What the loop and the decode need of a request, validated: prompt item, language, generate keyword
    arguments, rate scale (EngineError when the engine refuses one)."""
    return (
        engine.prompt_item(request.prompt),
        engine.language_name(request.language),
        dict(engine._generate_kwargs(request.params)),
        rate_scale(request.params),
    )


def _joined(prefix: torch.Tensor | None, generated: torch.Tensor) -> torch.Tensor:
    """A row's codes decoded after its reference's (qwen-tts decodes a generate call's rows so)."""
    if prefix is None:
        return generated
    import torch

    return torch.cat([prefix, generated], dim=0)

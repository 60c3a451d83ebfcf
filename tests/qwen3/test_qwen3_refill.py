"""A fast-runner batch refilled by its caller while it runs (as a render task pulls other jobs' chunks
into its free slots), on the tiny checkpoint: a refilled chunk renders exactly as it does alone."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tests.qwen3.fast_rows import GREEDY, TEXTS, loop_row, reference_frames
from worker.config import load_settings
from worker.engines import registry
from worker.engines.base import SpeakerPrompt, SynthesisRequest, refilling_engine
from worker.engines.qwen3 import Qwen3Engine

if TYPE_CHECKING:
    from worker.engines.qwen3_loop import LoopRow

# torch and the loop's modules are imported in the tests that use them, not when the module is collected
# (tests/qwen3/conftest.py).


@pytest.fixture(scope="module")
def engine(tiny_dir: Path) -> Qwen3Engine:
    return Qwen3Engine(tiny_dir, device="cpu", max_batch=2, max_new_tokens=16, pull_chunks=True)


class _Queue:
    """A caller's refill over waiting loop ``rows``: gives them in order, keyed ``other-0``, ``other-1``,
    ...; records how many rows each call asked for and the keys given."""

    def __init__(self, rows: list[LoopRow]) -> None:
        self.rows = rows
        self.asked: list[int] = []
        self.given: list[str] = []

    def __call__(self, wanted: int) -> Sequence[tuple[Hashable, LoopRow]]:
        self.asked.append(wanted)
        out: list[tuple[Hashable, LoopRow]] = []
        while self.rows and len(out) < wanted:
            self.given.append(f"other-{len(self.given)}")
            out.append((self.given[-1], self.rows.pop(0)))
        return out


def test_greedy_frames_of_refilled_rows_equal_each_chunk_alone(
    engine: Qwen3Engine, prompts: list[SpeakerPrompt]
) -> None:
    """A batch of two rows (one voice) in three slots; rows of two other voices arrive from ``refill``
    as slots free (at the start, and where the short row ends), and refill is asked for none once the
    batch's own rows have ended. Every row's greedy frames equal qwen-tts's for that chunk alone."""
    import torch

    from worker.engines.qwen3_loop import TalkerLoop
    from worker.engines.qwen3_refill import FeedLimits

    own_cases = [(TEXTS[0], prompts[0], 14), (TEXTS[1], prompts[0], 3)]
    other_cases = [(TEXTS[2], prompts[1], 6), (TEXTS[3], prompts[2], 9), (TEXTS[4], prompts[1], 4)]
    own = [
        (f"own-{i}", loop_row(engine, t, p, max_new_tokens=c, **GREEDY))
        for i, (t, p, c) in enumerate(own_cases)
    ]
    others = [loop_row(engine, t, p, max_new_tokens=c, **GREEDY) for t, p, c in other_cases]
    limits = FeedLimits(768, 256, 14)
    refill = _Queue(others)
    asked, given = refill.asked, refill.given

    loop = TalkerLoop(engine.model.model)
    frames = loop.run_refilling(own, 3, limits, refill)
    assert loop.last_slots == 3
    assert asked[0] == 1  # the free third slot, at once
    assert given == ["other-0", "other-1", "other-2"]
    assert asked[-1] == 0  # once both own rows ended, no more rows are asked for
    for key, (text, prompt, cap) in [
        *((f"own-{i}", case) for i, case in enumerate(own_cases)),
        *((f"other-{i}", case) for i, case in enumerate(other_cases)),
    ]:
        expected = reference_frames(engine, text, prompt, max_new_tokens=cap, **GREEDY)
        assert torch.equal(frames[key].cpu(), expected), key


def test_the_tail_refills_freed_slots_a_bounded_number_of_times_after_the_own_rows_end(
    engine: Qwen3Engine, prompts: list[SpeakerPrompt]
) -> None:
    """One own row (3 frames) in two slots, four rows waiting with the caller: one fills the free slot at
    once; once the own row has ended, the tail takes two more (``tail=2``) as slots free, then none, and
    the fourth stays with the caller. Every row's greedy frames equal qwen-tts's for that chunk alone."""
    import torch

    from worker.engines.qwen3_loop import TalkerLoop
    from worker.engines.qwen3_refill import FeedLimits

    own_case = (TEXTS[1], prompts[0], 3)
    other_cases = [(TEXTS[2], prompts[1], 8), (TEXTS[3], prompts[2], 5), (TEXTS[4], prompts[1], 4)]
    others = [loop_row(engine, t, p, max_new_tokens=c, **GREEDY) for t, p, c in other_cases]
    others.append(others[-1])  # a fourth, never taken
    refill = _Queue(others)
    asked, given = refill.asked, refill.given

    loop = TalkerLoop(engine.model.model)
    own = [("own", loop_row(engine, own_case[0], own_case[1], max_new_tokens=own_case[2], **GREEDY))]
    frames = loop.run_refilling(own, 2, FeedLimits(768, 256, 8), refill, tail=2)
    assert given == ["other-0", "other-1", "other-2"]
    assert len(others) == 1
    assert asked[-1] == 0  # the tail spent: none asked for while the last rows finish
    assert loop.last_steps >= 8  # the longest row's frames, at least
    for key, (text, prompt, cap) in [("own", own_case), *zip(given, other_cases, strict=True)]:
        expected = reference_frames(engine, text, prompt, max_new_tokens=cap, **GREEDY)
        assert torch.equal(frames[key].cpu(), expected), key


def test_the_slots_follow_the_rows_waiting_and_the_tail_is_bounded_by_them(
    engine: Qwen3Engine, prompts: list[SpeakerPrompt], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine of eight slots runs a call in the fewest slots (a power of two) that hold its own rows
    and those the caller says are waiting; told nothing, in all eight. Once its own rows end, it takes
    TAIL_ROUNDS times its slots more, then stops however many still wait."""
    from worker.engines.qwen3_refill import TAIL_ROUNDS

    monkeypatch.setattr(engine, "max_batch_size", 8)
    own = [_request(prompts[0], TEXTS[1], 1, max_new_tokens=3)]
    for waiting, slots in [(0, 1), (1, 2), (2, 4), (7, 8), (100, 8), (None, 8)]:
        engine.synthesize_refilling(own, lambda _wanted: [], waiting)
        assert engine.last_calls == (slots,), waiting
    queue = [_request(prompts[1], TEXTS[2], 20 + i, max_new_tokens=3) for i in range(12)]
    refill = _Requests(queue)
    given = refill.given

    shared = engine.synthesize_refilling(own, refill, 1)
    assert engine.last_calls == (2,)
    # one beside the own row while it runs, then the tail
    assert len(given) == 1 + TAIL_ROUNDS * 2
    assert len(queue) == 12 - len(given)
    assert all(wave is not None and wave.size for wave in shared)
    assert 0.5 < engine.last_occupancy <= 1.0


def test_refill_rows_beyond_the_limits_or_too_many_are_refused(
    engine: Qwen3Engine, prompts: list[SpeakerPrompt]
) -> None:
    from worker.engines.qwen3_loop import TalkerLoop
    from worker.engines.qwen3_refill import FeedLimits

    row = loop_row(engine, TEXTS[1], prompts[0], max_new_tokens=3, **GREEDY)
    loop = TalkerLoop(engine.model.model)
    with pytest.raises(ValueError, match="limits"):
        loop.run_refilling([("a", row)], 2, FeedLimits(row.prefill.shape[0] + 3, 256, 2), lambda _n: [])
    with pytest.raises(ValueError, match="asked for"):
        loop.run_refilling([("a", row)], 1, FeedLimits(768, 256, 3), lambda _n: [("b", row)])


def _request(prompt: SpeakerPrompt, text: str, seed: int, **params: float) -> SynthesisRequest:
    return SynthesisRequest(text, prompt, "en", params, seed=seed)


class _Requests:
    """A render task's refill over waiting ``requests``: gives them in order; records how many each call
    asked for and what it gave."""

    def __init__(self, requests: list[SynthesisRequest]) -> None:
        self.queue = requests
        self.asked: list[int] = []
        self.given: list[SynthesisRequest] = []

    def __call__(self, wanted: int) -> list[SynthesisRequest]:
        self.asked.append(wanted)
        out = self.queue[:wanted]
        del self.queue[:wanted]
        self.given.extend(out)
        return out


def test_sampled_chunks_refilled_into_a_batch_render_as_alone(
    engine: Qwen3Engine, prompts: list[SpeakerPrompt]
) -> None:
    """Sampling (the engine's defaults): a chunk's audio is its seed's alone, whatever batch it shares.
    Refilled requests of other voices, one with its own rate, one empty, one beyond the loop's frame cap
    (left out: None) and one the engine refuses (None: rendered on its own by the caller)."""
    # The first row runs to the engine's cap (16 frames); the others end early and free their slot.
    own = [_request(prompts[0], TEXTS[0], 11), _request(prompts[1], TEXTS[1], 12, max_new_tokens=2)]
    queue = [
        _request(prompts[2], TEXTS[2], 13, max_new_tokens=3),
        _request(prompts[1], TEXTS[4], 14, rate_scale=1.25, max_new_tokens=3),
        _request(prompts[0], "   ", 15),
        _request(prompts[0], TEXTS[3], 16, top_k=5, max_new_tokens=3),
        _request(prompts[1], TEXTS[3], 17, nonsense=1.0),
    ]
    refill = _Requests(queue)
    given = refill.given

    shared = engine.synthesize_refilling(own, refill)
    assert not queue
    assert len(shared) == len(own) + len(given)
    assert engine.last_calls == (2,)
    assert shared[-1] is None  # refused parameters: the caller renders it on its own
    for request, wave in zip([*own, *given][:-1], shared[:-1], strict=True):
        assert wave is not None
        (alone,) = engine.synthesize([request])
        assert wave.shape == alone.shape, request.text
        np.testing.assert_allclose(wave, alone, atol=1e-5)
    empty = shared[len(own) + 2]
    assert empty is not None
    assert empty.size == 0
    # Another seed is other audio: the test can tell batches apart.
    (other,) = engine.synthesize([_request(prompts[0], TEXTS[0], 99)])
    first = shared[0]
    assert first is not None
    assert other.shape != first.shape or not np.allclose(other, first, atol=1e-3)


def test_a_refilled_request_beyond_the_frame_cap_is_left_out(
    engine: Qwen3Engine, prompts: list[SpeakerPrompt]
) -> None:
    own = [_request(prompts[0], TEXTS[1], 1, max_new_tokens=4)]
    later = [_request(prompts[1], TEXTS[2], 2)]  # the engine's cap of 16 frames: beyond this batch's 4
    shared = engine.synthesize_refilling(own, lambda wanted: [later.pop()] if wanted and later else [])
    assert shared[0] is not None
    assert shared[1] is None


def test_a_refused_request_ends_the_pulls_and_a_call_takes_a_bounded_number(
    engine: Qwen3Engine, prompts: list[SpeakerPrompt]
) -> None:
    """A queue of requests the buffers cannot take (texts far longer than the batch's): the call takes the
    first, refuses it (None: rendered alone by the caller) and asks for none after, instead of claiming
    one a frame. A queue the loop can take is pulled PULL_ROUNDS times the slots at most, however long
    the own row runs."""
    from worker.engines.qwen3_refill import PULL_ROUNDS

    own = [_request(prompts[0], TEXTS[1], 1)]  # the engine's cap, 16 frames: many frames to refill in
    long_text = " ".join([TEXTS[0]] * 12)
    queue = [_request(prompts[1], long_text, 10 + i, max_new_tokens=3) for i in range(40)]
    refill = _Requests(queue)
    asked = refill.asked

    shared = engine.synthesize_refilling(own, refill, 40)
    assert len(shared) == 2
    assert shared[0] is not None
    assert shared[1] is None
    assert len(asked) > 2
    assert set(asked[1:]) == {0}  # still asked each frame (leases), for none
    short = [_request(prompts[1], TEXTS[2], 60 + i, max_new_tokens=1) for i in range(40)]
    queue[:] = short
    asked.clear()
    shared = engine.synthesize_refilling(own, refill, 40)
    (slots,) = engine.last_calls
    assert len(shared) - 1 == PULL_ROUNDS * slots < 40
    assert all(wave is not None for wave in shared)


def test_pulling_chunks_is_a_setting_of_the_fast_runner(tiny_dir: Path) -> None:
    base = {"TOME_QWEN3_MODEL_DIR": str(tiny_dir), "TOME_QWEN3_DEVICE": "cpu"}
    on = registry.get_engine("qwen3-tts", load_settings(base))  # the default
    off = registry.get_engine("qwen3-tts", load_settings({**base, "TOME_QWEN3_PULL_CHUNKS": "0"}))
    reference = registry.get_engine("qwen3-tts", load_settings({**base, "TOME_QWEN3_RUNNER": "reference"}))
    assert refilling_engine(off) is None
    assert refilling_engine(on) is not None
    assert isinstance(on, Qwen3Engine)
    assert on.refills
    assert refilling_engine(reference) is None

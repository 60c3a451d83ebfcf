"""The codec decoder's state after a voice's reference codes, kept across chunks (``PrefixStates``).

A chunk decoded from the kept state must give the audio of a decode that runs over the reference's codes
itself, whether the prefix ends inside the first 300-frame window, exactly at a window boundary or past
it; the second chunk of a voice must not decode the prefix again; two rows from one kept state must not
disturb each other; the table is bounded and keyed by the codes' content.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tests.qwen3.fast_rows import TEXTS
from worker.engines.base import SpeakerPrompt, SynthesisRequest
from worker.engines.qwen3 import Qwen3Engine

if TYPE_CHECKING:
    import torch

# torch is imported in the tests that use it (tests/qwen3/conftest.py).


def _codes(frames: int, seed: int) -> torch.Tensor:
    import torch

    return torch.randint(0, 64, (frames, 4), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(("prefix", "window"), [(40, 0), (300, 300), (340, 300)])
def test_kept_prefix_state_gives_the_same_audio(engine: Qwen3Engine, prefix: int, window: int) -> None:
    """Shorter than a window, ending at a window boundary, longer than one: 330 generated frames after
    it (so the generated frames cross a window start too), decoded whole and pushed one frame at a time."""
    import torch

    from worker.engines.qwen3_stream import PrefixStates, StreamDecoder, decode_whole

    decoder, upsample = engine._decoder()
    codes = _codes(prefix + 330, seed=prefix)
    states = PrefixStates(decoder)
    with torch.inference_mode():
        plain = decode_whole(decoder, upsample, codes, prefix)
        kept = decode_whole(decoder, upsample, codes, prefix, states)
        assert states.decodes == 1
        _state, kept_window, fed = states.after(codes[:prefix])
        assert (kept_window, fed) == (window, prefix)
        stream = StreamDecoder(decoder, upsample, codes[:prefix], states=states)
        pieces = [stream.push(codes[i : i + 1]) for i in range(prefix, codes.shape[0])]
        pieces.append(stream.finish())
    assert states.decodes == 1  # the second and third decodes of this prefix reused the state
    assert plain.shape == kept.shape == (330 * upsample,)
    np.testing.assert_allclose(kept, plain, atol=1e-4)
    np.testing.assert_allclose(np.concatenate(pieces), plain, atol=1e-4)
    assert not np.allclose(plain, decode_whole(decoder, upsample, _codes(prefix + 330, 99), prefix))


def test_rows_from_one_kept_state_are_independent(engine: Qwen3Engine) -> None:
    """Two streams started from one kept state and pushed in turns each give the audio they give alone."""
    import torch

    from worker.engines.qwen3_stream import PrefixStates, StreamDecoder, decode_whole

    decoder, upsample = engine._decoder()
    prefix = _codes(60, seed=1)
    rows = [torch.cat([prefix, _codes(90, seed=seed)]) for seed in (2, 3)]
    states = PrefixStates(decoder)
    with torch.inference_mode():
        alone = [decode_whole(decoder, upsample, row, 60) for row in rows]
        streams = [StreamDecoder(decoder, upsample, prefix, states=states, every=5) for _ in rows]
        pieces: list[list[np.ndarray]] = [[], []]
        for i in range(60, 150, 3):
            for stream, row, out in zip(streams, rows, pieces, strict=True):
                out.append(stream.push(row[i : i + 3]))
        for stream, out in zip(streams, pieces, strict=True):
            out.append(stream.finish())
        again = decode_whole(decoder, upsample, rows[0], 60, states)  # the kept state is untouched
    assert states.decodes == 1
    assert not np.allclose(alone[0], alone[1])
    for out, whole in zip(pieces, alone, strict=True):
        np.testing.assert_allclose(np.concatenate(out), whole, atol=1e-4)
    np.testing.assert_allclose(again, alone[0], atol=1e-4)


def test_the_table_is_bounded_and_keyed_by_content(engine: Qwen3Engine) -> None:
    import torch

    from worker.engines.qwen3_stream import PrefixStates, StreamDecoder

    decoder, _ = engine._decoder()
    states = PrefixStates(decoder, size=2)
    a, b, c = (_codes(20, seed) for seed in (4, 5, 6))
    with torch.inference_mode():
        states.after(a)
        states.after(b)
        states.after(a.clone())  # the same codes in another tensor: kept; ``a`` is now the most recent
        assert states.decodes == 2
        states.after(c)  # drops ``b``, the least recently used
        assert len(states) == 2
        assert states.decodes == 3
        states.after(a)
        assert states.decodes == 3
        states.after(b)
        assert states.decodes == 4
        states.after(a.to(torch.int32))  # same values, another dtype: another key
        assert states.decodes == 5
        assert len(states) == 2
    with pytest.raises(ValueError, match="size"):
        PrefixStates(decoder, size=0)
    with pytest.raises(ValueError, match="another decoder"):
        StreamDecoder(object(), 1920, a, states=states)


def test_a_voices_second_chunk_reuses_the_prefix_state(tiny_dir: Path, prompts: list[SpeakerPrompt]) -> None:
    """Through the engine (the CPU row-by-row decode and the stream): a voice's reference codes are decoded
    once, whatever chunks follow; the voice without reference codes decodes none."""
    engine = Qwen3Engine(tiny_dir, device="cpu")
    # The tiny codec encodes both references alike: the second ICL voice gets codes of its own.
    codes = np.random.default_rng(7).integers(0, 64, size=(30, 4), dtype=np.int64)
    voices = [prompts[0], {**prompts[1], "ref_code": codes}, prompts[2]]

    def request(i: int, seed: int) -> SynthesisRequest:
        return SynthesisRequest(TEXTS[i], voices[i], params={"max_new_tokens": 12}, seed=seed)

    first = engine.synthesize([request(i, 40 + i) for i in range(3)])
    assert engine._prefix_states().decodes == 2  # two ICL voices, one x-vector voice
    second = engine.synthesize([request(i, 50 + i) for i in range(3)] + [request(0, 60)])
    assert engine._prefix_states().decodes == 2
    streamed = np.concatenate(list(engine.synthesize_stream(request(1, 41))))
    assert engine._prefix_states().decodes == 2
    np.testing.assert_allclose(streamed, first[1], atol=1e-4)
    assert all(wave.size for wave in first + second)

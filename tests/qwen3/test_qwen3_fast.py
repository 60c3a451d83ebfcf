"""The fast Qwen3-TTS runner against qwen-tts's own ``generate`` (the oracle), on tiny random checkpoints.

Greedy decoding must give exactly the reference's codec frames, one row at a time and with several rows in
flight (different voices, lengths, rows ending and their slots refilled); sampled rows must not depend on
their batch-mates; streamed audio must equal the whole decode.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tests.qwen3.fast_rows import GREEDY, SR, TEXTS, loop_row, reference_frames, voice_wave
from worker.config import ConfigError, load_settings
from worker.engines import registry
from worker.engines.base import EngineError, SpeakerPrompt, SynthesisRequest
from worker.engines.qwen3 import Qwen3Engine

if TYPE_CHECKING:
    from worker.engines.qwen3_loop import TalkerLoop

# torch and the modules built on it are imported in the tests that use them, not when the module is
# collected (tests/qwen3/conftest.py: every pytest process collects this module, few run it).


def _cases(prompts: Sequence[SpeakerPrompt], caps: Sequence[int]) -> list[tuple[str, SpeakerPrompt, int]]:
    return [(TEXTS[i % len(TEXTS)], prompts[i % len(prompts)], cap) for i, cap in enumerate(caps)]


def _assert_same_frames(
    engine: Qwen3Engine,
    cases: list[tuple[str, SpeakerPrompt, int]],
    slots: int,
    loop: TalkerLoop | None = None,
) -> list[int]:
    import torch

    from worker.engines.qwen3_loop import TalkerLoop

    loop = loop or TalkerLoop(engine.model.model)
    rows = [loop_row(engine, text, prompt, max_new_tokens=cap, **GREEDY) for text, prompt, cap in cases]
    fast = loop.run(rows, slots)
    lengths = []
    for (text, prompt, cap), got in zip(cases, fast, strict=True):
        expected = reference_frames(engine, text, prompt, max_new_tokens=cap, **GREEDY)
        assert got.shape == expected.shape, (text, cap)
        assert torch.equal(got.cpu(), expected), (text, cap)
        lengths.append(int(expected.shape[0]))
    assert loop.last_slots == min(slots, len(cases))
    return lengths


def test_greedy_frames_equal_the_reference_for_one_row(
    engine: Qwen3Engine, prompts: list[SpeakerPrompt]
) -> None:
    for prompt in prompts:
        _assert_same_frames(engine, [(TEXTS[0], prompt, 12)], slots=1)


def test_greedy_frames_equal_the_reference_with_rows_refilled_mid_batch(
    engine: Qwen3Engine, prompts: list[SpeakerPrompt]
) -> None:
    """Five requests of three voices and five caps through two slots: rows end at different frames and
    the next request takes the slot at once."""
    lengths = _assert_same_frames(engine, _cases(prompts, [14, 3, 20, 6, 9]), slots=2)
    assert lengths == [13, 2, 19, 5, 8]  # each row ran to its own cap (random weights rarely end)


def test_the_traced_step_gives_the_reference_frames(
    engine: Qwen3Engine, prompts: list[SpeakerPrompt]
) -> None:
    """The step as ``torch.compile`` traces it (Dynamo's graph, functionalised by AOT autograd), run with
    eager kernels here: inductor's C++ compile of the same graph takes minutes on this machine (the
    benchmark's ``fast-compiled`` runner pays it)."""
    from worker.engines.qwen3_loop import TalkerLoop

    loop = TalkerLoop(engine.model.model, compile_steps=True, compile_backend="aot_eager")
    _assert_same_frames(engine, _cases(prompts, [9, 3, 12]), slots=2, loop=loop)
    assert loop.compiled_step is not None


@pytest.fixture(scope="module")
def ending_dir(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny checkpoint with its end-of-speech row of the codec head a hair above a token greedy
    decoding picks often: rows then end (at end of speech) where they would have picked that token."""
    import torch
    from safetensors.torch import load_file, save_file

    from tests.qwen3.tiny_checkpoint import CODEC_EOS

    engine = Qwen3Engine(tiny_dir, device="cpu")
    voice = engine.encode_speaker(voice_wave(110.0, 1), SR, "Hello there, this is a low voice.")
    picks = torch.cat(
        [reference_frames(engine, text, voice, max_new_tokens=40, **GREEDY)[2:, 0] for text in TEXTS]
    )
    common = int(torch.bincount(picks).argmax())
    dest = tmp_path_factory.mktemp("qwen3-ending") / "tiny-ending"
    shutil.copytree(tiny_dir, dest)
    weights = load_file(str(dest / "model.safetensors"))
    name = "talker.codec_head.weight"
    weights[name][CODEC_EOS] = weights[name][common] * 1.001
    save_file(weights, str(dest / "model.safetensors"))
    return dest


def test_greedy_frames_equal_the_reference_when_rows_end_at_end_of_speech(ending_dir: Path) -> None:
    engine = Qwen3Engine(ending_dir, device="cpu")
    voices = [
        engine.encode_speaker(voice_wave(110.0, 1), SR, "Hello there, this is a low voice."),
        engine.encode_speaker(voice_wave(160.0, 3), SR, ""),
    ]
    lengths = _assert_same_frames(engine, _cases(voices, [40, 40, 40, 40, 40]), slots=3)
    ended = [n for n in lengths if n < 39]
    assert len(ended) >= 3, lengths  # rows ended at end of speech...
    assert len(set(ended)) >= 2, lengths  # ...at different frames


def test_sampled_rows_do_not_depend_on_their_batch_or_the_run(
    engine: Qwen3Engine, prompts: list[SpeakerPrompt], monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = [
        SynthesisRequest(TEXTS[i], prompts[i % 3], params={"max_new_tokens": 20}, seed=100 + i)
        for i in range(5)
    ]
    monkeypatch.setattr(engine, "max_batch_size", 5)
    together = engine.synthesize(requests)
    assert engine.last_calls == (5,)
    again = engine.synthesize(requests)
    alone = [engine.synthesize([r])[0] for r in requests]
    monkeypatch.setattr(engine, "max_batch_size", 2)
    in_pairs = engine.synthesize(list(reversed(requests)))[::-1]
    for a, b, c, d in zip(together, again, alone, in_pairs, strict=True):
        assert a.size > 0
        assert np.array_equal(a, b)
        np.testing.assert_allclose(a, c, atol=1e-5)
        np.testing.assert_allclose(a, d, atol=1e-5)
    reseeded = engine.synthesize(
        [SynthesisRequest(r.text, r.prompt, params=r.params, seed=r.seed + 1) for r in requests]
    )
    assert not all(a.shape == o.shape and np.allclose(a, o) for a, o in zip(together, reseeded, strict=True))


def test_greedy_audio_matches_the_reference_runner(tiny_dir: Path, prompts: list[SpeakerPrompt]) -> None:
    """The whole engine path (prompt, loop, decode after the reference's codes) against qwen-tts's
    generate_voice_clone, through the engine's greedy-free params: equal frames give equal audio."""
    import torch

    from worker.engines.qwen3_stream import decode_whole

    fast = Qwen3Engine(tiny_dir, device="cpu", runner="fast", max_new_tokens=16)
    reference = Qwen3Engine(tiny_dir, device="cpu", runner="reference", max_new_tokens=16)
    loop_rows = [loop_row(fast, TEXTS[i], prompts[i], max_new_tokens=16, **GREEDY) for i in range(3)]
    frames = fast._fast_loop().run(loop_rows, 3)
    decoder, upsample = fast._decoder()
    qm = reference.model
    for i, generated in enumerate(frames):
        item = fast.prompt_item(prompts[i])
        prefix = fast._reference_codes(item)
        whole = generated if prefix is None else torch.cat([prefix, generated])
        with torch.inference_mode():
            ours = decode_whole(decoder, upsample, whole, 0 if prefix is None else prefix.shape[0])
            theirs, _ = qm.generate_voice_clone(
                text=TEXTS[i], language="english", voice_clone_prompt=[item], max_new_tokens=16, **GREEDY
            )
        cut = abs(ours.size - theirs[0].size)
        assert cut <= 1  # qwen-tts cuts the reference's samples with a float ratio: one sample either way
        n = min(ours.size, theirs[0].size)
        np.testing.assert_allclose(ours[-n:], np.asarray(theirs[0])[-n:], atol=1e-5)


def test_rows_decoded_apart_on_the_cpu_equal_the_batched_decode(
    engine: Qwen3Engine, prompts: list[SpeakerPrompt]
) -> None:
    """On a CPU the engine decodes a call's rows one by one; the audio is qwen-tts's batched decode's."""
    import torch

    requests = [
        SynthesisRequest(TEXTS[i], prompts[i], params={"max_new_tokens": 16}, seed=30 + i) for i in range(3)
    ]
    audio = engine.synthesize(requests)
    items = [engine.prompt_item(p) for p in prompts]
    rows = [
        engine._loop_row(r, item, engine.language_name(r.language), engine._generate_kwargs(r.params))
        for r, item in zip(requests, items, strict=True)
    ]
    frames = engine._fast_loop().run(rows, 3)
    prefixes = [engine._reference_codes(item) for item in items]
    wholes = [f if p is None else torch.cat([p, f]) for p, f in zip(prefixes, frames, strict=True)]
    with torch.inference_mode():
        wavs, _ = engine.model.model.speech_tokenizer.decode([{"audio_codes": w} for w in wholes])
    _, upsample = engine._decoder()
    for ours, wav, prefix in zip(audio, wavs, prefixes, strict=True):
        theirs = np.asarray(wav, dtype=np.float32).reshape(-1)[
            (0 if prefix is None else prefix.shape[0]) * upsample :
        ]
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, np.clip(theirs, -1.0, 1.0), atol=1e-5)


def test_streamed_audio_equals_the_whole_decode(engine: Qwen3Engine, prompts: list[SpeakerPrompt]) -> None:
    for prompt in prompts:
        request = SynthesisRequest(TEXTS[2], prompt, params={"max_new_tokens": 24}, seed=7)
        pieces = list(engine.synthesize_stream(request))
        assert len(pieces) >= 3  # 4 frames, then doubling: audio comes out while the row generates
        assert pieces[0].size == 4 * 1920
        whole = engine.synthesize([request])[0]
        joined = np.concatenate(pieces)
        assert joined.shape == whole.shape
        np.testing.assert_allclose(joined, whole, atol=1e-4)


def test_stream_decoder_across_the_codec_windows(engine: Qwen3Engine) -> None:
    """Past 300 frames qwen-tts decodes in windows with 25 frames of context: the stream follows them, and
    the whole decode equals qwen-tts's own speech tokenizer's."""
    import torch

    from worker.engines.qwen3_stream import StreamDecoder, decode_whole

    decoder, upsample = engine._decoder()
    generator = torch.Generator().manual_seed(5)
    codes = torch.randint(0, 64, (650, 4), generator=generator)
    prefix = 40
    with torch.inference_mode():
        whole = decode_whole(decoder, upsample, codes, prefix)
        stream = StreamDecoder(decoder, upsample, codes[:prefix])
        pieces = [stream.push(codes[i : i + 7]) for i in range(prefix, codes.shape[0], 7)]
        pieces.append(stream.finish())
        theirs, _ = engine.model.model.speech_tokenizer.decode([{"audio_codes": codes}])
    joined = np.concatenate(pieces)
    assert joined.shape == whole.shape == ((650 - prefix) * upsample,)
    np.testing.assert_allclose(joined, whole, atol=1e-4)
    np.testing.assert_allclose(whole, np.asarray(theirs[0])[prefix * upsample :], atol=1e-5)


def test_stream_decoder_one_frame_at_a_time(engine: Qwen3Engine) -> None:
    """Frames pushed one by one (as the loop's sink does), across two window starts: the decoder state
    carried between pushes gives the whole decode's audio; audio comes out after 4 frames, then as the
    frames double, then every 32."""
    import torch

    from worker.engines.qwen3_stream import StreamDecoder, decode_whole

    decoder, upsample = engine._decoder()
    generator = torch.Generator().manual_seed(11)
    codes = torch.randint(0, 64, (640, 4), generator=generator)
    prefix = 30
    with torch.inference_mode():
        whole = decode_whole(decoder, upsample, codes, prefix)
        stream = StreamDecoder(decoder, upsample, codes[:prefix])
        pieces = [stream.push(codes[i : i + 1]) for i in range(prefix, codes.shape[0])]
        pieces.append(stream.finish())
    sizes = [p.size // upsample for p in pieces if p.size]
    assert sizes[:6] == [4, 4, 8, 16, 32, 32]
    assert max(sizes) == 32
    joined = np.concatenate(pieces)
    assert joined.shape == whole.shape == ((640 - prefix) * upsample,)
    np.testing.assert_allclose(joined, whole, atol=1e-4)


def test_codec_state_equals_the_whole_forward(engine: Qwen3Engine) -> None:
    """The decoder run piece by piece with its state kept (conv tails, transposed-conv overlap, the
    transformer's sliding-window cache) equals one forward over all the frames."""
    import torch

    from worker.engines.qwen3_codec import CodecState

    decoder, _ = engine._decoder()
    generator = torch.Generator().manual_seed(3)
    codes = torch.randint(0, 64, (1, 4, 150), generator=generator)
    with torch.inference_mode():
        whole = decoder(codes).reshape(-1)
        state = CodecState(decoder)
        cuts = [0, 1, 2, 5, 40, 41, 113, 150]  # pieces of 1 to 72 frames, past the 72-frame window
        parts = [state.decode(codes[..., a:b]).reshape(-1) for a, b in itertools.pairwise(cuts)]
    joined = torch.cat(parts)
    assert joined.shape == whole.shape
    torch.testing.assert_close(joined, whole, atol=1e-5, rtol=0)


def test_the_runner_is_a_setting(tiny_dir: Path) -> None:
    settings = load_settings({"TOME_QWEN3_MODEL_DIR": str(tiny_dir), "TOME_QWEN3_DEVICE": "cpu"})
    built = registry.create_engine("qwen3-tts", settings)
    assert isinstance(built, Qwen3Engine)
    assert built.runner == "fast"
    settings = load_settings({"TOME_QWEN3_MODEL_DIR": str(tiny_dir), "TOME_QWEN3_RUNNER": "reference"})
    built = registry.create_engine("qwen3-tts", settings)
    assert isinstance(built, Qwen3Engine)
    assert built.runner == "reference"
    with pytest.raises(ConfigError, match="TOME_QWEN3_RUNNER"):
        load_settings({"TOME_QWEN3_RUNNER": "turbo"})
    with pytest.raises(EngineError, match="TOME_QWEN3_RUNNER"):
        Qwen3Engine(tiny_dir, runner="turbo")


def test_a_stream_cannot_change_its_rate(engine: Qwen3Engine, prompts: list[SpeakerPrompt]) -> None:
    request = SynthesisRequest(TEXTS[0], prompts[0], params={"rate_scale": 1.2})
    with pytest.raises(EngineError, match="rate"):
        list(engine.synthesize_stream(request))

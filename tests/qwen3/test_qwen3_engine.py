"""The ``qwen3-tts`` engine on a tiny, randomly initialised checkpoint built on disk by the tests.

Needs the optional ``qwen3`` extra (torch, transformers, qwen-tts), which ``make test`` installs. Where
``qwen_tts`` does not import, the module is skipped with the reason, except under CI (``CI`` or
``TOME_TEST_REQUIRE_SERVICES=1`` set, as ``.ci/run`` does), where that is a failure.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tests.qwen3.tiny_checkpoint import HIDDEN, NUM_QUANTIZERS, build_tiny_checkpoint
from worker.config import ConfigError, load_settings
from worker.engines import registry
from worker.engines.base import Engine, EngineError, SynthesisRequest
from worker.engines.qwen3 import (
    DEVICE_SETTING,
    MAX_BATCH,
    CheckpointLayout,
    Qwen3Engine,
    batch_size_for,
    check_device,
    free_gpu_bytes,
    identity_cached,
    import_qwen_tts,
    load_model,
    model_identity,
    prompt_from_arrays,
    read_layout,
)

SR = 24000


def _voice(f0: float, seconds: float = 2.0, seed: int = 0) -> np.ndarray:
    t = np.arange(int(SR * seconds), dtype=np.float64) / SR
    rng = np.random.default_rng(seed)
    wav = (
        0.3 * np.sin(2 * np.pi * f0 * t)
        + 0.1 * np.sin(2 * np.pi * 2 * f0 * t)
        + 0.01 * rng.standard_normal(t.size)
    )
    return wav.astype(np.float32)


@pytest.fixture(scope="module")
def engine(tiny_dir: Path) -> Qwen3Engine:
    # Built by the registry from settings, as in a worker; qwen-tts's own generate (the reference runner),
    # whose batching these tests describe (the fast runner has tests/qwen3/test_qwen3_fast.py).
    settings = load_settings(
        {"TOME_QWEN3_MODEL_DIR": str(tiny_dir), "TOME_QWEN3_DEVICE": "cpu", "TOME_QWEN3_RUNNER": "reference"}
    )
    engine = registry.create_engine("qwen3-tts", settings)
    assert isinstance(engine, Qwen3Engine)
    return engine


@pytest.fixture(scope="module")
def prompts(engine: Qwen3Engine) -> dict[str, dict[str, np.ndarray]]:
    return {
        "low": engine.encode_speaker(_voice(110.0, seed=1), SR, "Hello there, this is a low voice."),
        "high": engine.encode_speaker(_voice(220.0, seed=2), SR, "And this one is higher."),
        "xvec": engine.encode_speaker(_voice(160.0, seed=3), SR, ""),
    }


def test_tiny_checkpoint_is_deterministic(tiny_dir: Path, tmp_path: Path) -> None:
    again = build_tiny_checkpoint(tmp_path / "again")
    assert model_identity(again) == model_identity(tiny_dir)
    assert sum(p.stat().st_size for p in tiny_dir.rglob("*") if p.is_file()) < 4_000_000


def test_loads_through_the_real_path(engine: Qwen3Engine, tiny_dir: Path) -> None:
    qwen_tts = import_qwen_tts()
    model = load_model(tiny_dir, "cpu")
    assert isinstance(model, qwen_tts.Qwen3TTSModel)
    assert model.model.tts_model_type == "base"
    assert load_model(tiny_dir, "cpu") is model  # once per process
    assert isinstance(engine, Engine)
    assert engine.sample_rate == SR == model.model.speech_tokenizer.get_output_sample_rate()
    assert engine.version == f"qwen3-tts/prompt-v1/{model_identity(tiny_dir)}"
    ids = model.processor(text="<|im_start|>assistant\n", return_tensors="pt")["input_ids"]
    assert ids.shape[-1] == 3


def test_version_follows_the_weights(tiny_dir: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(tiny_dir, tmp_path / "copy"))
    assert model_identity(copy) == model_identity(tiny_dir)
    weights = copy / "speech_tokenizer" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    assert model_identity(copy) != model_identity(tiny_dir)


def test_construction_does_not_hash_the_checkpoint(tiny_dir: Path, tmp_path: Path) -> None:
    """The API builds the engine to size chunks: that must not read the weights (gigabytes for real)."""
    copy = Path(shutil.copytree(tiny_dir, tmp_path / "fresh"))
    hashed = identity_cached.cache_info().misses
    engine = Qwen3Engine(copy, device="cpu")
    assert engine.max_chunk_chars > 0
    assert identity_cached.cache_info().misses == hashed
    assert engine.version == f"qwen3-tts/prompt-v1/{model_identity(tiny_dir)}"
    assert identity_cached.cache_info().misses == hashed + 1


def test_missing_model_dir_is_an_engine_error(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="TOME_QWEN3_MODEL_DIR"):
        registry.create_engine("qwen3-tts", load_settings({}))
    with pytest.raises(EngineError):
        Qwen3Engine(tmp_path)  # exists, but holds no checkpoint


def test_encode_speaker_shapes_and_dtypes(
    engine: Qwen3Engine, prompts: dict[str, dict[str, np.ndarray]]
) -> None:
    icl = prompts["low"]
    assert set(icl) == set(engine.prompt_shapes)
    assert icl["ref_code"].dtype == np.int64
    assert icl["ref_code"].ndim == 2
    assert icl["ref_code"].shape[1] == NUM_QUANTIZERS
    assert icl["ref_code"].shape[0] == 25  # 2 s at 12.5 Hz
    assert icl["ref_spk_embedding"].dtype == np.float32
    assert icl["ref_spk_embedding"].shape == (HIDDEN,)
    assert icl["x_vector_only"].dtype == np.uint8
    assert icl["x_vector_only"].tolist() == [0]
    assert icl["ref_text_utf8"].tobytes().decode() == "Hello there, this is a low voice."
    xvec = prompts["xvec"]
    assert xvec["x_vector_only"].tolist() == [1]
    assert xvec["ref_code"].shape == (0, NUM_QUANTIZERS)
    for prompt in prompts.values():
        for name, shape in engine.prompt_shapes.items():
            assert len(prompt[name].shape) == len(shape)
            assert all(want in (-1, got) for want, got in zip(shape, prompt[name].shape, strict=True))


def test_prompt_from_arrays_checks_shapes_and_dtypes(prompts: dict[str, dict[str, np.ndarray]]) -> None:
    import torch

    good = prompts["low"]
    item = prompt_from_arrays(good, num_quantizers=NUM_QUANTIZERS, embedding_dim=HIDDEN)
    assert item.icl_mode
    assert not item.x_vector_only_mode
    assert item.ref_code.dtype == torch.int64
    bad_cases = [
        {**good, "ref_code": good["ref_code"].astype(np.int32)},
        {**good, "ref_code": good["ref_code"][:, :2]},
        {**good, "ref_spk_embedding": good["ref_spk_embedding"].astype(np.float64)},
        {**good, "ref_spk_embedding": good["ref_spk_embedding"][:-1]},
        {**good, "x_vector_only": np.asarray([2], dtype=np.uint8)},
        {**good, "ref_text_utf8": np.zeros(0, dtype=np.uint8)},  # ICL without a transcript
        {k: v for k, v in good.items() if k != "ref_code"},
    ]
    for bad in bad_cases:
        with pytest.raises(EngineError):
            prompt_from_arrays(bad, num_quantizers=NUM_QUANTIZERS, embedding_dim=HIDDEN)


def test_safetensors_round_trip_gives_identical_audio(
    engine: Qwen3Engine, prompts: dict[str, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    path = tmp_path / "voice.safetensors"
    save_file(prompts["low"], str(path))
    loaded = load_file(str(path))
    for name in prompts["low"]:
        assert loaded[name].dtype == prompts["low"][name].dtype
        assert np.array_equal(loaded[name], prompts["low"][name])
    direct = engine.synthesize([SynthesisRequest("A short sentence.", prompts["low"], seed=7)])
    cached = engine.synthesize([SynthesisRequest("A short sentence.", loaded, seed=7)])
    assert np.array_equal(direct[0], cached[0])


def test_two_voice_batch(engine: Qwen3Engine, prompts: dict[str, dict[str, np.ndarray]]) -> None:
    batch = [
        SynthesisRequest("The first chunk, low voice.", prompts["low"], seed=1),
        SynthesisRequest("The second chunk, high voice.", prompts["high"], seed=2),
        SynthesisRequest("A third, no transcript.", prompts["xvec"], language="de", seed=3),
        SynthesisRequest("   ", prompts["low"], seed=4),
    ]
    out = engine.synthesize(batch)
    assert len(out) == 4
    for wav in out[:3]:
        assert wav.dtype == np.float32
        assert wav.ndim == 1
        assert wav.size > 0
        assert np.isfinite(wav).all()
        assert np.abs(wav).max() <= 1.0
    assert out[3].size == 0


def test_rate_scale_changes_the_length_not_the_words(
    engine: Qwen3Engine, prompts: dict[str, dict[str, np.ndarray]]
) -> None:
    """Qwen3-TTS has no rate control: the job's speed is a pitch-keeping time stretch of its output."""
    text = "A sentence long enough to be stretched and squeezed."
    [normal, fast, slow] = engine.synthesize(
        [
            SynthesisRequest(text, prompts["low"], seed=5),
            SynthesisRequest(text, prompts["low"], params={"rate_scale": 1.5}, seed=5),
            SynthesisRequest(text, prompts["low"], params={"rate_scale": 0.75}, seed=5),
        ]
    )
    assert normal.size > 4096
    assert fast.size == pytest.approx(normal.size / 1.5, rel=0.02)
    assert slow.size == pytest.approx(normal.size / 0.75, rel=0.02)
    assert np.isfinite(fast).all()
    assert np.abs(fast).max() <= 1.0


def test_determinism_under_fixed_seeds(
    engine: Qwen3Engine, prompts: dict[str, dict[str, np.ndarray]]
) -> None:
    batch = [
        SynthesisRequest("Reproducible rendering.", prompts["low"], seed=11),
        SynthesisRequest("Another voice.", prompts["high"], seed=12),
    ]
    first = engine.synthesize(batch)
    second = engine.synthesize(batch)
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    reseeded = engine.synthesize([SynthesisRequest(r.text, r.prompt, seed=r.seed + 100) for r in batch])
    assert not all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(first, reseeded, strict=True))


def test_a_chunk_renders_the_same_alone_and_in_any_batch(
    engine: Qwen3Engine, prompts: dict[str, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per-chunk seeds: a retry of one chunk, or a batch halved after out-of-memory, reproduces it."""
    requests = [
        SynthesisRequest(f"Chunk number {i} of the chapter, voice {i % 3}.", prompts[name], seed=100 + i)
        for i, name in enumerate(["low", "high", "xvec", "low", "high"])
    ]
    monkeypatch.setattr(engine, "max_batch_size", 5)
    together = engine.synthesize(requests)
    assert list(engine.last_calls) == [5]
    alone = [engine.synthesize([r])[0] for r in requests]
    monkeypatch.setattr(engine, "max_batch_size", 2)
    in_pairs = engine.synthesize(list(reversed(requests)))[::-1]
    assert list(engine.last_calls) == [2, 2, 1]
    for a, b, c in zip(together, alone, in_pairs, strict=True):
        assert a.size > 0
        assert a.shape == b.shape == c.shape
        np.testing.assert_allclose(a, b, atol=1e-5)
        np.testing.assert_allclose(a, c, atol=1e-5)
    # Different seeds do give different renderings (the seeds are really used).
    other = engine.synthesize([SynthesisRequest(r.text, r.prompt, seed=r.seed + 1) for r in requests])
    assert not all(a.shape == o.shape and np.allclose(a, o) for a, o in zip(together, other, strict=True))


def test_batches_are_planned_longest_first_within_the_limit(
    engine: Qwen3Engine, prompts: dict[str, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = ["Short.", "A much longer chunk of text than the others here.", "Medium length text.", "Hi."]
    requests = [SynthesisRequest(t, prompts["high"]) for t in texts]
    items = [engine.prompt_item(r.prompt) for r in requests]
    monkeypatch.setattr(engine, "max_batch_size", 2)
    assert engine.plan_batches(requests, items, [0, 1, 2, 3], {}) == [[1, 2], [0, 3]]
    monkeypatch.setattr(engine, "max_batch_size", None)
    # On the CPU, without a configured size, the CPU default applies.
    assert engine.plan_batches(requests, items, [0, 1, 2, 3], {}) == [[1, 2, 0, 3]]


def test_batch_size_follows_free_memory() -> None:
    gib = 1 << 30
    assert batch_size_for(free_bytes=10 * gib, row_bytes=gib) == 7  # 70 % of free memory
    assert batch_size_for(free_bytes=gib, row_bytes=10 * gib) == 1  # never below one row
    assert batch_size_for(free_bytes=1000 * gib, row_bytes=gib) == MAX_BATCH
    assert batch_size_for(free_bytes=10 * gib, row_bytes=gib, cap=4) == 4


def test_free_memory_counts_what_torch_holds_cached() -> None:
    """After a large batch, torch keeps its blocks cached: the driver reports them taken, yet the next
    batch can use them. (No GPU here: a stand-in for torch.cuda's three counters.)"""
    gib = 1 << 30
    cuda = SimpleNamespace(
        mem_get_info=lambda device: (2 * gib, 24 * gib),
        memory_reserved=lambda device: 10 * gib,
        memory_allocated=lambda device: 3 * gib,
    )
    assert free_gpu_bytes(SimpleNamespace(cuda=cuda), "cuda:1") == 9 * gib


def test_device_setting_is_checked(tiny_dir: Path) -> None:
    for good in ("cpu", "cuda", "cuda:1"):
        assert check_device(good) == good
    for bad in ("auto", "gpu", "cuda:", "cuda:x", ""):
        with pytest.raises(EngineError, match=DEVICE_SETTING):
            check_device(bad)
    with pytest.raises(EngineError, match=DEVICE_SETTING):
        Qwen3Engine(tiny_dir, device="auto")
    settings = load_settings({"TOME_QWEN3_MODEL_DIR": str(tiny_dir), "TOME_QWEN3_DEVICE": "gpu0"})
    with pytest.raises(EngineError, match="gpu0"):
        registry.create_engine("qwen3-tts", settings)


def test_real_checkpoint_layout_sizes_a_frame(tiny_dir: Path) -> None:
    """A talker shaped like Qwen3-0.6B (28 layers, hidden 1024, 8 kv heads x 128) in bf16: 2 x (2 x 28 x
    1024 + 29 x 1024) x 2 bytes = 348,160 bytes a frame, so a 30 s chunk (about 400 frames with its
    prompt) needs about 139 MB: 2 GiB free take 10 rows, 24 GiB the cap."""
    layout = CheckpointLayout(num_quantizers=16, embedding_dim=1024, sample_rate=24000, layers=28,
                              hidden=1024, kv_width=8 * 128)  # fmt: skip
    per_frame = layout.bytes_per_frame(2)
    assert per_frame == 348_160
    assert batch_size_for(24 << 30, per_frame * 400) == MAX_BATCH
    assert batch_size_for(2 << 30, per_frame * 400) == 10
    tiny = read_layout(tiny_dir)
    assert tiny.layers == 1
    assert tiny.hidden == HIDDEN


def test_engine_settings_are_checked(tiny_dir: Path) -> None:
    env = {"TOME_QWEN3_MODEL_DIR": str(tiny_dir), "TOME_QWEN3_DEVICE": "cpu", "TOME_QWEN3_MAX_BATCH": "4"}
    engine = registry.create_engine("qwen3-tts", load_settings(env))
    assert isinstance(engine, Qwen3Engine)
    assert engine.max_batch_size == 4
    for bad in ("-2", "many"):
        with pytest.raises(ConfigError, match="TOME_QWEN3_MAX_BATCH"):
            load_settings({**env, "TOME_QWEN3_MAX_BATCH": bad})
    with pytest.raises(EngineError, match="max_batch"):
        Qwen3Engine(tiny_dir, device="cpu", max_batch=0)


def test_bad_requests_fail_before_rendering(
    engine: Qwen3Engine, prompts: dict[str, dict[str, np.ndarray]]
) -> None:
    with pytest.raises(EngineError):
        engine.synthesize([SynthesisRequest("x", prompts["low"], language="xx")])
    with pytest.raises(EngineError):
        engine.synthesize([SynthesisRequest("x", prompts["low"], params={"speed": 1.2})])
    with pytest.raises(EngineError):
        engine.synthesize([SynthesisRequest("x", prompts["low"], params={"rate_scale": 9.0})])
    with pytest.raises(EngineError):
        engine.encode_speaker(np.zeros(100, dtype=np.float32), SR, "too short")


_FIRST_REQUEST_AFTER_WARM_UP = """
import sys
import numpy as np
from worker.engines.qwen3 import Qwen3Engine
engine = Qwen3Engine(sys.argv[1], device="cpu")
engine.warm_up()
before = set(sys.modules)
rate = 16000
t = np.arange(2 * rate, dtype=np.float32) / rate
engine.encode_speaker((0.3 * np.sin(2 * np.pi * 180.0 * t)).astype(np.float32), rate, "Hello there.")
print("LOADED:", " ".join(sorted(set(sys.modules) - before)))
"""


def test_warm_up_takes_the_path_of_a_first_reference_not_at_24_khz(tiny_dir: Path) -> None:
    # In a fresh interpreter: what a first 16 kHz prompt build still loads after warm_up() (librosa's
    # resampling and the numba machinery it compiles with, about 20 s with the real model) is what the
    # warm-up missed. Nothing may be left.
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _FIRST_REQUEST_AFTER_WARM_UP, str(tiny_dir)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [loaded] = [line for line in done.stdout.splitlines() if line.startswith("LOADED:")]
    assert loaded.split()[1:] == [], "loaded by the first 16 kHz build after the warm-up"

"""The ``fish-speech`` engine on a tiny, randomly initialised checkpoint built on disk by the tests.

Needs the optional ``fish`` extra (torch, fish-speech and the codec packages), which ``make test`` installs.
Where ``fish_speech`` does not import, the module is skipped with the reason, except under CI (``CI`` or
``TOME_TEST_REQUIRE_SERVICES=1`` set, as ``.ci/run`` does), where that is a failure.
"""

from __future__ import annotations

import json
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tests.fish.tiny_checkpoint import CODEBOOK_SIZE, NUM_CODEBOOKS, build_tiny_checkpoint
from worker.config import ConfigError, load_settings
from worker.engines import registry
from worker.engines.base import Engine, EngineError, SynthesisRequest
from worker.engines.fish import (
    SAMPLE_RATE,
    FishEngine,
    check_prompt,
    identity_cached,
    import_fish_speech,
    load_models,
    model_identity,
    package_version,
)
from worker.voices.store import load_prompt, save_prompt

SR = 24000  # references arrive at any rate; the engine resamples to the codec's 44.1 kHz
MAX_NEW = 12  # random weights never say "end": cap the frames of every render
FRAME = 2048  # output samples per codec frame (hop 512 x 4)


def _voice(f0: float, seconds: float = 1.5, seed: int = 0) -> np.ndarray:
    t = np.arange(int(SR * seconds), dtype=np.float64) / SR
    rng = np.random.default_rng(seed)
    wav = 0.3 * np.sin(2 * np.pi * f0 * t) + 0.01 * rng.standard_normal(t.size)
    return wav.astype(np.float32)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_checkpoint(tmp_path_factory.mktemp("fish") / "tiny-s1")


@pytest.fixture(scope="module")
def engine(tiny_dir: Path) -> FishEngine:
    # Built by the registry from settings, as in a worker.
    settings = load_settings(
        {
            "TOME_FISH_MODEL_DIR": str(tiny_dir),
            "TOME_FISH_DEVICE": "cpu",
            "TOME_FISH_MAX_NEW_TOKENS": str(MAX_NEW),
        }
    )
    engine = registry.create_engine("fish-speech", settings)
    assert isinstance(engine, FishEngine)
    return engine


@pytest.fixture(scope="module")
def prompt(engine: FishEngine) -> dict[str, np.ndarray]:
    return engine.encode_speaker(_voice(120.0, seed=1), SR, "Hello there, this is a low voice.")


def test_tiny_checkpoint_has_the_published_layout_and_is_small(tiny_dir: Path, tmp_path: Path) -> None:
    names = {p.name for p in tiny_dir.iterdir()}
    assert {"config.json", "model.pth", "tokenizer.tiktoken", "special_tokens.json", "codec.pth"} <= names
    assert json.loads((tiny_dir / "config.json").read_text())["model_type"] == "dual_ar"
    assert sum(p.stat().st_size for p in tiny_dir.iterdir()) < 8_000_000
    again = build_tiny_checkpoint(tmp_path / "again")
    assert model_identity(again) == model_identity(tiny_dir)  # seeded: the same bytes


def test_loads_strictly_through_the_package_classes(engine: FishEngine, tiny_dir: Path) -> None:
    fish = import_fish_speech()
    models = load_models(tiny_dir, "cpu")
    assert isinstance(models.llama, fish.DualARTransformer)
    assert isinstance(models.codec, fish.DAC)
    assert isinstance(models.vq, fish.VQManager)
    assert load_models(tiny_dir, "cpu") is models  # once per process
    assert isinstance(engine, Engine)
    assert engine.sample_rate == SAMPLE_RATE == models.codec.sample_rate
    assert engine.version == f"fish-speech/prompt-v1/{package_version()}/{model_identity(tiny_dir)}"
    assert package_version() == "0.1.0"


def test_a_checkpoint_with_a_missing_or_extra_weight_is_refused(tiny_dir: Path, tmp_path: Path) -> None:
    """strict=True: a key the config does not have (or lacks) is an error, not a warning in a log."""
    import torch

    copy = Path(shutil.copytree(tiny_dir, tmp_path / "extra"))
    state = torch.load(copy / "codec.pth", weights_only=True)
    state["surprise.weight"] = torch.zeros(1)
    torch.save(state, copy / "codec.pth")
    with pytest.raises(EngineError, match=r"codec\.pth does not match"):
        load_models(copy, "cpu")
    weights = torch.load(copy / "model.pth", weights_only=True)
    weights.pop(next(iter(weights)))
    torch.save(weights, copy / "model.pth")
    with pytest.raises(EngineError, match=r"model\.pth does not match"):
        load_models(copy, "cpu")


def test_weights_are_never_unpickled(tiny_dir: Path, tmp_path: Path) -> None:
    import torch

    copy = Path(shutil.copytree(tiny_dir, tmp_path / "pickled"))
    torch.save({"weights": Fraction(1, 3)}, copy / "model.pth")  # any object outside tensors: refused
    with pytest.raises(EngineError, match=r"cannot read model\.pth"):
        load_models(copy, "cpu")


def test_version_follows_the_checkpoint_and_construction_does_not_hash(
    tiny_dir: Path, tmp_path: Path
) -> None:
    copy = Path(shutil.copytree(tiny_dir, tmp_path / "copy"))
    hashed = identity_cached.cache_info().misses
    fresh = FishEngine(copy, device="cpu")
    assert fresh.max_chunk_chars > 0
    assert identity_cached.cache_info().misses == hashed  # the API builds engines to size chunks
    assert model_identity(copy) == model_identity(tiny_dir)
    data = bytearray((copy / "codec.pth").read_bytes())
    data[-1] ^= 0x01
    (copy / "codec.pth").write_bytes(bytes(data))
    assert model_identity(copy) != model_identity(tiny_dir)


def test_missing_files_and_bad_settings_are_engine_errors(tiny_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="TOME_FISH_MODEL_DIR"):
        FishEngine(None)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer.tiktoken").write_text("")
    with pytest.raises(EngineError, match=r"lacks model\.pth, codec\.pth"):
        FishEngine(tmp_path)
    with pytest.raises(EngineError, match=r"TOME_FISH_DEVICE='gpu0': use cpu, cuda or cuda:N"):
        FishEngine(tiny_dir, device="gpu0")
    with pytest.raises(ConfigError, match="TOME_FISH_MAX_NEW_TOKENS"):
        load_settings({"TOME_FISH_MAX_NEW_TOKENS": "-1"})
    with pytest.raises(EngineError, match="TOME_FISH_MODEL_DIR"):
        registry.create_engine("fish-speech", load_settings({}))


def test_prompt_is_the_reference_codes_and_transcript(
    engine: FishEngine, prompt: dict[str, np.ndarray]
) -> None:
    codes = prompt["codes"]
    assert codes.dtype == np.int64
    assert codes.shape[0] == NUM_CODEBOOKS
    # 1.5 s at 44.1 kHz in frames of 2048 samples (rounded up).
    assert codes.shape[1] == -(-int(1.5 * SAMPLE_RATE) // FRAME)
    assert codes.min() >= 0
    assert codes.max() < CODEBOOK_SIZE
    assert prompt["ref_text_utf8"].tobytes().decode() == "Hello there, this is a low voice."
    # The codec is deterministic: the same reference encodes to the same codes.
    again = engine.encode_speaker(_voice(120.0, seed=1), SR, "Hello there, this is a low voice.")
    np.testing.assert_array_equal(again["codes"], codes)
    with pytest.raises(EngineError, match="ref_text is empty"):
        engine.encode_speaker(_voice(120.0), SR, "  ")
    with pytest.raises(EngineError, match="shorter than"):
        engine.encode_speaker(_voice(120.0, seconds=0.1), SR, "Hi.")


def test_prompt_round_trips_through_the_cache_file(
    engine: FishEngine, prompt: dict[str, np.ndarray], tmp_path: Path
) -> None:
    path = tmp_path / "prompt.safetensors"
    save_prompt(path, prompt, {"cache_key": "k"})
    loaded = load_prompt(path, engine.prompt_shapes)
    assert set(loaded) == set(prompt)
    for name, array in prompt.items():
        assert loaded[name].dtype == array.dtype
        np.testing.assert_array_equal(loaded[name], array)
    request = SynthesisRequest(text="The ferry left at dawn.", prompt=prompt, seed=5)
    [before] = engine.synthesize([request])
    [after] = engine.synthesize([SynthesisRequest(text=request.text, prompt=loaded, seed=5)])
    np.testing.assert_array_equal(before, after)


def test_prompt_arrays_are_checked(prompt: dict[str, np.ndarray], tmp_path: Path) -> None:
    check_prompt(prompt, NUM_CODEBOOKS, CODEBOOK_SIZE)
    bad = [
        ({"codes": prompt["codes"]}, "lacks"),
        ({**prompt, "codes": prompt["codes"].astype(np.int32)}, "int64"),
        ({**prompt, "codes": prompt["codes"][:2]}, "int64"),
        ({**prompt, "codes": prompt["codes"][:, :0]}, "T>0"),
        ({**prompt, "codes": prompt["codes"] + CODEBOOK_SIZE}, r"lie in \[0, 64\)"),
        ({**prompt, "ref_text_utf8": np.frombuffer(b"\xff\xfe", dtype=np.uint8)}, "UTF-8"),
        ({**prompt, "ref_text_utf8": np.zeros(0, dtype=np.uint8)}, "transcript"),
    ]
    for arrays, message in bad:
        with pytest.raises(EngineError, match=message):
            check_prompt(arrays, NUM_CODEBOOKS, CODEBOOK_SIZE)
    # A prompt file of another layout is refused when read, before the engine sees it.
    path = tmp_path / "other.safetensors"
    save_file({"codes": np.zeros((2, 5), np.int64), "ref_text_utf8": np.zeros(3, np.uint8)}, str(path))
    from worker.voices.store import PromptFileError

    with pytest.raises(PromptFileError, match="expected"):
        load_prompt(path, {"codes": (NUM_CODEBOOKS, -1), "ref_text_utf8": (-1,)})
    assert load_file(str(path))["codes"].shape == (2, 5)


def test_renders_44k_audio_deterministically_per_seed(
    engine: FishEngine, prompt: dict[str, np.ndarray]
) -> None:
    text = "By noon the wind had turned, and the gulls went quiet."
    first, again, other = engine.synthesize(
        [
            SynthesisRequest(text=text, prompt=prompt, seed=11),
            SynthesisRequest(text=text, prompt=prompt, seed=11),
            SynthesisRequest(text=text, prompt=prompt, seed=12),
        ]
    )
    assert first.dtype == np.float32
    assert first.size > 0
    assert first.size % FRAME == 0
    assert first.size <= MAX_NEW * FRAME
    assert np.abs(first).max() <= 1.0
    np.testing.assert_array_equal(first, again)
    assert first.shape != other.shape or not np.array_equal(first, other)
    # A row renders the same alone as after other rows (each under its own seed).
    [alone] = engine.synthesize([SynthesisRequest(text=text, prompt=prompt, seed=11)])
    np.testing.assert_array_equal(alone, first)


def test_empty_text_bad_params_and_long_prompts(engine: FishEngine, prompt: dict[str, np.ndarray]) -> None:
    [silent] = engine.synthesize([SynthesisRequest(text="  ", prompt=prompt)])
    assert silent.size == 0
    bad_params: list[tuple[dict[str, float], str]] = [
        ({"temperature": 2.5}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"pitch": 1.0}, "unsupported"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"rate_scale": 9.0}, "rate_scale"),
    ]
    for params, message in bad_params:
        with pytest.raises(EngineError, match=message):
            engine.synthesize([SynthesisRequest(text="Hi.", prompt=prompt, params=params)])
    # generate_long refuses prompts past max_seq_len - 2048 tokens: a clear engine error.
    with pytest.raises(EngineError, match="too long"):
        engine.synthesize([SynthesisRequest(text="word " * 200, prompt=prompt)])

"""The engine registry (worker.engines.registry)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pytest

from worker.config import Settings, load_settings
from worker.engines import Engine, SynthesisRequest, available_engines, get_engine, registry
from worker.engines.base import Waveform


class FakeEngine:
    name = "fake"
    version = "1"
    sample_rate = 16000
    max_chunk_chars = 100
    prompt_shapes: Mapping[str, tuple[int, ...]] = {"n": (1,)}

    def encode_speaker(
        self, audio: Waveform, sample_rate: int, ref_text: str
    ) -> dict[str, npt.NDArray[np.generic]]:
        return {"n": np.array([audio.size], dtype=np.float32)}

    def synthesize(self, batch: Sequence[SynthesisRequest]) -> list[Waveform]:
        return [np.zeros(len(r.text), dtype=np.float32) for r in batch]


@pytest.fixture
def clean_registry() -> Iterator[None]:
    factories = dict(registry._factories)
    instances = dict(registry._instances)
    yield
    registry._factories.clear()
    registry._factories.update(factories)
    registry._instances.clear()
    registry._instances.update(instances)


def test_espeak_is_available() -> None:
    assert "espeak" in available_engines()
    assert available_engines() == sorted(available_engines())


def test_get_engine_returns_one_cached_instance() -> None:
    engine = get_engine("espeak")
    assert isinstance(engine, Engine)
    assert engine.name == "espeak"
    assert get_engine("espeak") is engine


def test_unknown_engine_raises_key_error_naming_the_choices() -> None:
    with pytest.raises(KeyError, match=r"unknown TTS engine 'nope'.*espeak"):
        get_engine("nope")


@pytest.mark.usefixtures("clean_registry")
def test_register_custom_factory() -> None:
    calls: list[int] = []

    def factory(settings: Settings) -> Engine:
        calls.append(1)
        return FakeEngine()

    registry.register("fake", factory)
    assert "fake" in available_engines()
    engine = get_engine("fake")
    assert get_engine("fake") is engine
    assert len(calls) == 1
    assert engine.synthesize([SynthesisRequest("abc", {})])[0].size == 3
    # Re-registering drops the cached instance.
    registry.register("fake", factory)
    assert get_engine("fake") is not engine
    assert len(calls) == 2


@pytest.mark.usefixtures("clean_registry")
def test_instances_are_recreated_in_another_process(monkeypatch: pytest.MonkeyPatch) -> None:
    registry.register("fake", lambda settings: FakeEngine())
    engine = get_engine("fake")
    # As seen from a forked child: the cache was filled by another pid.
    monkeypatch.setattr(registry, "_instances_pid", -1)
    assert get_engine("fake") is not engine


def test_register_rejects_empty_names() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        registry.register(" ", lambda settings: FakeEngine())


@pytest.mark.usefixtures("clean_registry")
def test_factories_get_their_settings_from_the_caller() -> None:
    """Engines read no environment: the registry hands each factory the settings it was asked with."""
    seen: list[Settings] = []

    def factory(settings: Settings) -> Engine:
        seen.append(settings)
        return FakeEngine()

    registry.register("fake", factory)
    settings = load_settings({"TOME_PACED_SECONDS_PER_CHUNK": "0.5"})
    get_engine("fake", settings)
    assert seen == [settings]


def test_the_paced_engine_takes_its_pace_from_the_settings() -> None:
    from bench.engines.paced import PacedEspeakEngine

    settings = load_settings({"TOME_PACED_SECONDS_PER_CHUNK": "0.5", "TOME_PACED_WARM_UP_SECONDS": "2"})
    engine = registry.create_engine("espeak-paced", settings)
    assert isinstance(engine, PacedEspeakEngine)
    assert (engine.seconds_per_chunk, engine.warm_up_seconds) == (0.5, 2.0)

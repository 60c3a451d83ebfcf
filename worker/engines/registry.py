"""Engine registry: one engine instance per process per name, created on first use (pure module).

Factories are registered by name and take the settings (each picks its own fields, so that the engine
classes take plain arguments and read no environment). :func:`get_engine` builds the engine the first
time a process asks for it and caches it. A forked child (Celery prefork) inherits the parent's cache,
so the cache remembers the pid that filled it and is discarded when :func:`os.getpid` differs. Importing
this module loads no engine and no native library: each built-in engine is registered as a factory that
imports its module when called.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from worker.config import Settings
from worker.engines.base import Engine

__all__ = ["EngineFactory", "available_engines", "get_engine", "register"]

EngineFactory = Callable[[Settings], Engine]

_factories: dict[str, EngineFactory] = {}
_instances: dict[str, Engine] = {}
_instances_pid = os.getpid()
_lock = threading.RLock()


def _reset_lock_in_child() -> None:
    global _lock  # noqa: PLW0603
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_reset_lock_in_child)


def register(name: str, factory: EngineFactory) -> None:
    """Register (or replace) the factory of engine ``name``; a cached instance of that name is dropped."""
    if not name or not name.strip():
        raise ValueError("engine name must be a non-empty string")
    with _lock:
        _factories[name] = factory
        _instances.pop(name, None)


def available_engines() -> list[str]:
    """Names of the registered engines, sorted."""
    with _lock:
        return sorted(_factories)


def get_engine(name: str, settings: Settings | None = None) -> Engine:
    """The engine registered as ``name``: one instance per process, created on first use from
    ``settings`` (default: the defaults).

    Raises KeyError for an unknown name.
    """
    global _instances_pid  # noqa: PLW0603
    with _lock:
        pid = os.getpid()
        if pid != _instances_pid:
            _instances.clear()
            _instances_pid = pid
        engine = _instances.get(name)
        if engine is not None:
            return engine
        factory = _factories.get(name)
        if factory is None:
            known = ", ".join(sorted(_factories)) or "none"
            raise KeyError(f"unknown TTS engine {name!r} (available: {known})")
        engine = factory(settings or Settings())
        _instances[name] = engine
        return engine


def _espeak_factory(settings: Settings) -> Engine:
    from worker.engines.espeak import EspeakEngine

    return EspeakEngine()


register("espeak", _espeak_factory)


def _paced_factory(settings: Settings) -> Engine:
    from worker.engines.paced import PacedEspeakEngine

    return PacedEspeakEngine(
        settings.paced_seconds_per_chunk,
        settings.paced_warm_up_seconds,
        settings.paced_max_reference_seconds,
        settings.paced_seconds_per_build,
    )


register("espeak-paced", _paced_factory)


def _constant_factory(settings: Settings) -> Engine:
    from worker.engines.constant import ConstantEngine

    return ConstantEngine()


register("constant", _constant_factory)


def _qwen3_factory(settings: Settings) -> Engine:
    from worker.engines.qwen3 import Qwen3Engine

    return Qwen3Engine(
        settings.qwen3_model_dir or None,
        device=settings.qwen3_device or None,
        max_batch=settings.qwen3_max_batch or None,
        max_new_tokens=settings.qwen3_max_new_tokens or None,
        runner=settings.qwen3_runner,
    )


register("qwen3-tts", _qwen3_factory)


def _fish_factory(settings: Settings) -> Engine:
    from worker.engines.fish import FishEngine

    return FishEngine(
        settings.fish_model_dir or None,
        device=settings.fish_device or None,
        max_new_tokens=settings.fish_max_new_tokens or None,
    )


register("fish-speech", _fish_factory)

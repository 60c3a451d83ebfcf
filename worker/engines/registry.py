"""Engine registry: one engine instance per process per name, created on first use (pure module).

Factories are registered by name and take the settings; an engine of the catalog
(:func:`worker.engines.catalog.engines`, the loaded modules' included) that no factory replaces is built
from its own section of ``settings.engines`` (so that the engine classes take plain arguments and read no
environment). :func:`get_engine` builds the engine the first time a
process asks for it and caches it. A forked child (Celery prefork) inherits the parent's cache, so the
cache remembers the pid that filled it and is discarded when :func:`os.getpid` differs. No model and no
native library is loaded before a factory runs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from worker.engines.base import Engine
from worker.engines.catalog import engines, spec_for
from worker.engines.spec import EngineSpec

if TYPE_CHECKING:
    from worker.config import Settings  # the settings import this package's catalog

__all__ = ["EngineFactory", "available_engines", "create_engine", "get_engine", "register"]

EngineFactory = Callable[["Settings"], Engine]

_factories: dict[str, EngineFactory] = {}
_instances: dict[tuple[str, object], Engine] = {}  # by name and the settings section it was built from
_instances_pid = os.getpid()
_lock = threading.RLock()


def _reset_lock_in_child() -> None:
    global _lock  # noqa: PLW0603
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_reset_lock_in_child)


def register(name: str, factory: EngineFactory) -> None:
    """Register (or replace) the factory of engine ``name`` (over the catalog's, if it has one); a cached
    instance of that name is dropped."""
    if not name or not name.strip():
        raise ValueError("engine name must be a non-empty string")
    with _lock:
        _factories[name] = factory
        for key in [key for key in _instances if key[0] == name]:
            del _instances[key]


def available_engines() -> list[str]:
    """Names of the engines this process can build (the catalog's and those registered), sorted."""
    with _lock:
        return sorted(set(_factories) | {spec.name for spec in engines()})


def get_engine(name: str, settings: Settings | None = None) -> Engine:
    """The engine registered as ``name``: one instance per process and engine settings section, made on
    first use from ``settings`` (default: the defaults).

    Raises KeyError for an unknown name.
    """
    global _instances_pid  # noqa: PLW0603
    with _lock:
        pid = os.getpid()
        if pid != _instances_pid:
            _instances.clear()
            _instances_pid = pid
        settings = settings or _default_settings()
        spec = spec_for(name)
        key = (name, settings.engines.section(spec) if spec is not None else None)
        engine = _instances.get(key)
        if engine is not None:
            return engine
        engine = _factory(name)(settings)
        _instances[key] = engine
        return engine


def create_engine(name: str, settings: Settings | None = None) -> Engine:
    """A new engine registered as ``name``, built from ``settings`` and not cached (tests, benchmarks).

    Raises KeyError for an unknown name.
    """
    with _lock:
        factory = _factory(name)
    return factory(settings or _default_settings())


def _factory(name: str) -> EngineFactory:
    """The factory registered as ``name``, else the catalog's; KeyError naming the choices."""
    factory = _factories.get(name)
    if factory is not None:
        return factory
    spec = spec_for(name)
    if spec is None:
        known = ", ".join(available_engines()) or "none"
        raise KeyError(
            f"unknown TTS engine {name!r} (available: {known}; an engine of another module is loaded "
            "with TOME_ENGINE_MODULES)"
        )
    return _catalog_factory(spec)


def _default_settings() -> Settings:
    from worker.config import Settings  # worker.config imports this package's catalog

    return Settings()


def _catalog_factory(spec: EngineSpec[Any]) -> EngineFactory:
    def factory(settings: Settings) -> Engine:
        return spec.create(settings.engines.section(spec))

    return factory

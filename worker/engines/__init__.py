"""TTS engines: the protocol (:mod:`.base`) and the per-process registry (:mod:`.registry`).

The names below load on first use (PEP 562), so that importing a light module of this package (an
engine's declaration, the catalog the settings read) does not load numpy and the engines.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker.engines.base import Engine, EngineError, SynthesisRequest, release_memory, warm_up
    from worker.engines.registry import available_engines, get_engine

__all__ = [
    "Engine",
    "EngineError",
    "SynthesisRequest",
    "available_engines",
    "get_engine",
    "release_memory",
    "warm_up",
]

_HOMES = {
    "Engine": "base",
    "EngineError": "base",
    "SynthesisRequest": "base",
    "release_memory": "base",
    "warm_up": "base",
    "available_engines": "registry",
    "get_engine": "registry",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)

"""TTS engines: the protocol (:mod:`.base`) and the per-process registry (:mod:`.registry`)."""

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

"""The constant engine as Tome offers it: its QA profile and factory (it has no settings).

Pure and light (no numpy): the engine itself, :mod:`worker.engines.constant`, is imported when the factory
first runs, so reading settings (the API, the key command) never loads an engine's dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worker.engines.spec import EngineSpec, NoSettings

if TYPE_CHECKING:
    from worker.engines.base import Engine

__all__ = ["SPEC"]


def _create(settings: NoSettings) -> Engine:
    from worker.engines.constant import create  # numpy: only when the engine is built

    return create(settings)


# Its tone is no speech at all; the neural profile is the lenient one.
SPEC = EngineSpec("constant", NoSettings, _create, qa_profile="neural")

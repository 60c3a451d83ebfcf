"""The espeak-paced engine as Tome offers it: its settings section, QA profile and factory.

Pure and light (no numpy): the engine itself, :mod:`worker.engines.paced`, is imported when the factory
first runs, so reading settings (the API, the key command) never loads an engine's dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from worker.engines.spec import EngineSpec, require_not_negative

if TYPE_CHECKING:
    from worker.engines.base import Engine

__all__ = ["SPEC", "PacedSettings"]


@dataclass(frozen=True)
class PacedSettings:
    """``settings.engines.paced``: the ``TOME_PACED_*`` variables (docs/operations.md)."""

    seconds_per_chunk: float = 0.25
    warm_up_seconds: float = 0.0
    max_reference_seconds: float = 0.0  # 0: any length; else a longer reference fails its build
    seconds_per_build: float = 0.0  # each prompt build takes at least this long (a slow encoder)

    def validate(self) -> None:
        require_not_negative(
            self,
            "paced_",
            ("seconds_per_chunk", "warm_up_seconds", "max_reference_seconds", "seconds_per_build"),
        )


def _create(settings: PacedSettings) -> Engine:
    from worker.engines.paced import create  # numpy and espeak: only when the engine is built

    return create(settings)


SPEC = EngineSpec("espeak-paced", PacedSettings, _create, qa_profile="rule-based", key="paced")

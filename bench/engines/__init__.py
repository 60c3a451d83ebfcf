"""The benchmarks' and tests' own engines, declared for ``TOME_ENGINE_MODULES=bench.engines``.

Neither ships with Tome (the image holds no bench/): a process offers them only when this module is named
in ``TOME_ENGINE_MODULES``, which the processes it starts inherit through the settings.

- ``espeak-paced`` (:mod:`bench.engines.paced`): espeak's audio at a GPU engine's pace, the chaos
  battery's and the timing tests' engine; its section is ``TOME_PACED_*`` (docs/operations.md).
- ``constant`` (:mod:`bench.engines.constant`): one short tone for every chunk at no cost, the
  orchestration benchmark's engine; no settings.

Light, like every engine declaration (no numpy): each engine module is imported when its factory first
runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from worker.engines.spec import EngineSpec, NoSettings, require_not_negative

if TYPE_CHECKING:
    from worker.engines.base import Engine

__all__ = ["CONSTANT", "MODULE", "PACED", "SPECS", "PacedSettings"]

MODULE = __name__  # what TOME_ENGINE_MODULES names to load these engines


@dataclass(frozen=True)
class PacedSettings:
    """``espeak-paced``'s section: the ``TOME_PACED_*`` variables (docs/operations.md)."""

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


def _paced(settings: PacedSettings) -> Engine:
    from bench.engines.paced import create  # numpy and espeak: only when the engine is built

    return create(settings)


def _constant(settings: NoSettings) -> Engine:
    from bench.engines.constant import create  # numpy: only when the engine is built

    return create(settings)


PACED = EngineSpec("espeak-paced", PacedSettings, _paced, qa_profile="rule-based", key="paced")
# Its tone is no speech at all; the neural profile is the lenient one.
CONSTANT = EngineSpec("constant", NoSettings, _constant, qa_profile="neural")
SPECS: tuple[EngineSpec[Any], ...] = (PACED, CONSTANT)

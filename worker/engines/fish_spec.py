"""The Fish Speech engine as Tome offers it: its settings section, QA profile and factory.

Pure and light (no numpy): the engine itself, :mod:`worker.engines.fish`, is imported when the factory
first runs, so reading settings (the API, the key command) never loads an engine's dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from worker.engines.spec import EngineSpec, require_not_negative

if TYPE_CHECKING:
    from worker.engines.base import Engine

__all__ = ["SPEC", "FishSettings"]


@dataclass(frozen=True)
class FishSettings:
    """``settings.engines.fish``: the ``TOME_FISH_*`` variables (docs/operations.md)."""

    model_dir: str = ""  # the OpenAudio S1 checkpoint directory; required by this engine
    device: str = ""  # cpu, cuda or cuda:N; empty: cuda:0 when CUDA is available, else cpu
    max_new_tokens: int = 0  # cap on codec frames per chunk (about 21.5 a second); 0: the model's own

    def validate(self) -> None:
        require_not_negative(self, "fish_", ("max_new_tokens",))


def _create(settings: FishSettings) -> Engine:
    from worker.engines.fish import create  # numpy, and torch once a model loads: only when one is built

    return create(settings)


# A neural voice cloner too; no weights here to calibrate a profile of its own.
SPEC = EngineSpec("fish-speech", FishSettings, _create, qa_profile="neural", key="fish")

"""The Qwen3-TTS engine as Tome offers it: its settings section, QA profile and factory.

Pure and light (no numpy): the engine itself, :mod:`worker.engines.qwen3`, is imported when the factory
first runs, so reading settings (the API, the key command) never loads an engine's dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from worker.engines.spec import EngineSpec, require_not_negative

if TYPE_CHECKING:
    from worker.engines.base import Engine

__all__ = ["DEVICE_SETTING", "RUNNERS", "RUNNER_SETTING", "SPEC", "Qwen3Settings"]

DEVICE_SETTING = "TOME_QWEN3_DEVICE"  # named in errors about the device
RUNNER_SETTING = "TOME_QWEN3_RUNNER"
# How frames are generated: "fast", Tome's loop (worker.engines.qwen3_loop: static caches, one step per
# frame, CUDA graphs on a GPU, rows refilled as they end), or "reference", qwen-tts's own generate (the
# oracle the fast loop is tested against).
RUNNERS = ("fast", "reference")


@dataclass(frozen=True)
class Qwen3Settings:
    """``settings.engines.qwen3``: the ``TOME_QWEN3_*`` variables (docs/operations.md)."""

    model_dir: str = ""  # the checkpoint directory; required by this engine
    device: str = ""  # cpu, cuda or cuda:N; empty: cuda:0 when CUDA is available, else cpu
    max_batch: int = 0  # rows in flight (fast runner) or per generate call; 0: from free GPU memory
    max_new_tokens: int = 0  # cap on codec frames per chunk (12.5 a second); 0: the model's own
    runner: str = "fast"  # one of RUNNERS
    # A render task on the fast runner refills the loop's free slots with the next waiting chunks (any job
    # and voice on this engine, as the fair scheduler picks them) while its own batch renders, and for a
    # bounded tail after (worker.engines.qwen3_refill). 0 turns it off: each task renders its own chunks.
    pull_chunks: bool = True

    def validate(self) -> None:
        if self.runner not in RUNNERS:
            raise ValueError(f"{RUNNER_SETTING}={self.runner!r}: use {' or '.join(RUNNERS)}")
        require_not_negative(self, "qwen3_", ("max_batch", "max_new_tokens"))


def _create(settings: Qwen3Settings) -> Engine:
    from worker.engines.qwen3 import create  # numpy, and torch once a model loads: only when one is built

    return create(settings)


SPEC = EngineSpec("qwen3-tts", Qwen3Settings, _create, qa_profile="neural", key="qwen3")

"""Speaker-prompt files: safetensors only, written atomically, shape-checked when read (pure module).

Where a prompt file lives is :meth:`worker.storage.layout.Layout.prompt`."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt
from safetensors.numpy import load_file, save_file

from worker.storage.atomic import atomic_file

Prompt = dict[str, npt.NDArray[np.generic]]


class PromptFileError(RuntimeError):
    """A prompt file is missing, unreadable or not what was expected."""


def cache_key(engine_name: str, engine_version: str, audio_sha256: str, ref_text: str) -> str:
    """Everything a prompt depends on; a change of any part makes an older prompt stale."""
    text_hash = hashlib.sha256(ref_text.encode("utf-8")).hexdigest()[:16]
    return f"{engine_name}/{engine_version}/{audio_sha256[:16]}/{text_hash}"


def save_prompt(path: Path, tensors: Mapping[str, npt.NDArray[np.generic]], metadata: dict[str, str]) -> None:
    """Write the prompt atomically (worker.storage.atomic): readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as tmp:
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, tmp, metadata=metadata)


def load_prompt(path: Path, expected: Mapping[str, tuple[int, ...]] | None = None) -> Prompt:
    """Read a prompt file; with ``expected``, check each tensor's shape (-1 matches any size)."""
    try:
        tensors: Prompt = load_file(path)
    except (OSError, ValueError, Exception) as exc:  # safetensors raises its own SafetensorError
        raise PromptFileError(f"cannot read prompt file {path.name}: {exc}") from exc
    for name, shape in (expected or {}).items():
        if name not in tensors:
            raise PromptFileError(f"prompt file {path.name} has no tensor {name!r}")
        actual = tensors[name].shape
        if len(actual) != len(shape) or any(e not in (-1, a) for e, a in zip(shape, actual, strict=True)):
            raise PromptFileError(f"prompt tensor {name!r} has shape {actual}, expected {shape}")
    return tensors

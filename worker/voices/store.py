"""Speaker-prompt files: safetensors only, written atomically, confined under the data root (pure module)."""

from __future__ import annotations

import hashlib
import os
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt
from safetensors.numpy import load_file, save_file

Prompt = dict[str, npt.NDArray[np.generic]]


class PromptFileError(RuntimeError):
    """A prompt file is missing, unreadable, outside the data root or not what was expected."""


def cache_key(engine_name: str, engine_version: str, audio_sha256: str, ref_text: str) -> str:
    """Everything a prompt depends on; a change of any part makes an older prompt stale."""
    text_hash = hashlib.sha256(ref_text.encode("utf-8")).hexdigest()[:16]
    return f"{engine_name}/{engine_version}/{audio_sha256[:16]}/{text_hash}"


def prompt_path(root: Path, voice_id: uuid.UUID, key: str, build: str = "") -> Path:
    """Server-generated path of a voice's prompt: ``<root>/voices/<uuid>/prompt-<sha of key>[-<build>]``.

    ``build`` (the build's token) gives every build its own file, so a build that is thrown away can
    delete its file without touching the file of another build of the same key.
    """
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]
    suffix = f"-{build[:16]}" if build else ""
    if suffix and not suffix[1:].isalnum():
        raise PromptFileError("a build token is letters and digits only")
    name = f"prompt-{digest}{suffix}.safetensors"
    return confine(root, root / "voices" / str(uuid.UUID(str(voice_id))) / name)


def confine(root: Path, path: Path) -> Path:
    """``path`` resolved, refusing anything that escapes ``root``."""
    resolved_root = root.resolve()
    resolved = path.resolve()
    if not resolved.is_relative_to(resolved_root):
        raise PromptFileError(f"path {path} is outside the data root")
    return resolved


def save_prompt(path: Path, tensors: Mapping[str, npt.NDArray[np.generic]], metadata: dict[str, str]) -> None:
    """Write to a temp file in the same folder, fsync, then rename: readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".prompt-", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, tmp, metadata=metadata)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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

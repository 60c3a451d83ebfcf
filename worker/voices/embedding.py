"""Speaker-embedding voices: a safetensors file holding one speaker embedding, instead of a recording (pure).

Which engines have embeddings, and of what shape: :class:`worker.engines.base.EmbeddingEngine`.

Files are read by :func:`parse_embedding` without pickle and without trusting the file: the size is
capped, the safetensors header is parsed and checked here (exactly one tensor of the expected name,
dtype and shape, its bytes exactly the rest of the file) before any array is made, and every value must
be finite. What is stored is :func:`embedding_bytes` of the parsed array (a canonical file, so that its
sha256 names the embedding, not how a client happened to write it).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from safetensors.numpy import save

from worker.engines.base import EmbeddingSpec

__all__ = [
    "EMBEDDING_SUFFIX",
    "MAX_EMBEDDING_BYTES",
    "EmbeddingError",
    "embedding_bytes",
    "is_embedding_reference",
    "parse_embedding",
]

EMBEDDING_SUFFIX = ".safetensors"  # a voice whose reference file ends so was made from an embedding
MAX_EMBEDDING_BYTES = 256 * 1024  # a 2048-wide float32 embedding is 8 KiB plus a header of ~100 bytes
_MAX_HEADER_BYTES = 4096
_DTYPES = {"float32": ("F32", 4)}


class EmbeddingError(ValueError):
    """The file is not one acceptable speaker embedding; the message says what is wrong."""


def parse_embedding(data: bytes, spec: EmbeddingSpec) -> npt.NDArray[np.float32]:
    """The embedding in ``data`` (the bytes of a safetensors file), checked against ``spec``."""
    if len(data) > MAX_EMBEDDING_BYTES:
        raise EmbeddingError(f"the embedding file is larger than {MAX_EMBEDDING_BYTES} bytes")
    if len(data) < 8:
        raise EmbeddingError("not a safetensors file (it is shorter than its 8-byte header length)")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > min(_MAX_HEADER_BYTES, len(data) - 8):
        raise EmbeddingError("not a safetensors file (its header length does not fit the file)")
    try:
        header: Any = json.loads(data[8 : 8 + header_len].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise EmbeddingError("not a safetensors file (its header is not JSON)") from exc
    if not isinstance(header, dict):
        raise EmbeddingError("not a safetensors file (its header is not a JSON object)")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    if list(tensors) != [spec.name]:
        raise EmbeddingError(
            f"the file must hold exactly one tensor named {spec.name!r}, not {sorted(tensors)}"
        )
    entry = tensors[spec.name]
    code, width = _DTYPES[spec.dtype]
    if not isinstance(entry, Mapping) or entry.get("dtype") != code:
        got = entry.get("dtype") if isinstance(entry, Mapping) else None
        raise EmbeddingError(f"{spec.name} must be {spec.dtype} ({code}), not {got!r}")
    if entry.get("shape") != list(spec.shape):
        raise EmbeddingError(
            f"{spec.name} must have shape {list(spec.shape)} for this engine's checkpoint, "
            f"not {entry.get('shape')!r}"
        )
    size = width * int(np.prod(spec.shape))
    body = data[8 + header_len :]
    if entry.get("data_offsets") != [0, size] or len(body) != size:
        raise EmbeddingError(f"{spec.name}'s data does not match its header (expected {size} bytes)")
    array = np.frombuffer(body, dtype=np.dtype(spec.dtype).newbyteorder("<")).astype(spec.dtype)
    array = array.reshape(spec.shape)
    if not np.isfinite(array).all():
        raise EmbeddingError(f"{spec.name} holds NaN or infinite values")
    return array


def embedding_bytes(array: npt.NDArray[np.float32], spec: EmbeddingSpec) -> bytes:
    """The canonical safetensors file of one embedding."""
    return save({spec.name: np.ascontiguousarray(array, dtype=spec.dtype)})


def is_embedding_reference(path: str | Path) -> bool:
    """Whether a voice's reference file is a speaker embedding (Layout.new_embedding), not a recording."""
    return Path(path).suffix == EMBEDDING_SUFFIX

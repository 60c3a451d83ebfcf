"""Speaker-embedding files (worker.voices.embedding): parsed strictly, never unpickled."""

from __future__ import annotations

import json
import pickle
import struct

import numpy as np
import pytest
from safetensors.numpy import save

from worker.engines.base import EmbeddingSpec
from worker.voices.embedding import (
    MAX_EMBEDDING_BYTES,
    EmbeddingError,
    embedding_bytes,
    is_embedding_reference,
    parse_embedding,
)

SPEC = EmbeddingSpec("ref_spk_embedding", "float32", (32,))


def _vector(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(32).astype(np.float32)


def test_a_valid_file_parses_to_the_same_values_and_back() -> None:
    vector = _vector()
    data = save({"ref_spk_embedding": vector}, metadata={"source": "elsewhere"})
    parsed = parse_embedding(data, SPEC)
    assert parsed.dtype == np.float32
    np.testing.assert_array_equal(parsed, vector)
    canonical = embedding_bytes(parsed, SPEC)
    np.testing.assert_array_equal(parse_embedding(canonical, SPEC), vector)
    assert embedding_bytes(parse_embedding(canonical, SPEC), SPEC) == canonical  # canonical: stable bytes


def _header_file(header: object, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (pickle.dumps({"ref_spk_embedding": [0.0] * 32}), "not a safetensors file"),
        (b"", "not a safetensors file"),
        (b"\x00" * 7, "shorter than"),
        (struct.pack("<Q", 2**40) + b"{}", "header length"),
        (struct.pack("<Q", 3) + b"abc", "not JSON"),
        (_header_file([1, 2], b""), "not a JSON object"),
        (save({"ref_spk_embedding": np.zeros(32, np.float64)}), "must be float32"),
        (save({"ref_spk_embedding": np.zeros(32, np.float16)}), "must be float32"),
        (save({"ref_spk_embedding": np.zeros(33, np.float32)}), "must have shape"),
        (save({"ref_spk_embedding": np.zeros((1, 32), np.float32)}), "must have shape"),
        (save({"xvector": np.zeros(32, np.float32)}), "exactly one tensor named"),
        (
            save({"ref_spk_embedding": np.zeros(32, np.float32), "extra": np.zeros(1, np.float32)}),
            "exactly one tensor",
        ),
        (save({"ref_spk_embedding": np.full(32, np.nan, np.float32)}), "NaN or infinite"),
        (save({"ref_spk_embedding": np.full(32, np.inf, np.float32)}), "NaN or infinite"),
        (
            _header_file(
                {"ref_spk_embedding": {"dtype": "F32", "shape": [32], "data_offsets": [0, 128]}}, b"x"
            ),
            "does not match its header",
        ),
        (
            _header_file(
                {"ref_spk_embedding": {"dtype": "F32", "shape": [32], "data_offsets": [0, 128]}}, b"\0" * 200
            ),
            "does not match its header",
        ),
        (b"\0" * (MAX_EMBEDDING_BYTES + 1), "larger than"),
    ],
)
def test_anything_else_is_refused_with_the_reason(data: bytes, message: str) -> None:
    with pytest.raises(EmbeddingError, match=message):
        parse_embedding(data, SPEC)


def test_embedding_references_are_told_apart_from_recordings() -> None:
    assert is_embedding_reference("var/voices/x/embedding-0123456789ab.safetensors")
    assert not is_embedding_reference("var/voices/x/reference-0123456789ab.wav")

"""Voices from a speaker embedding (Qwen3-TTS x-vector-only mode), on the tiny Qwen3 checkpoint.

``POST /v1/voices`` with a safetensors ``embedding`` instead of ``audio``: validated against the running
engine's checkpoint, stored as the voice's prompt at once (no build), usable by the engine, and exported
again by ``GET /v1/voices/{id}/embedding`` (as is the embedding of a voice built from a recording).
"""

from __future__ import annotations

import io
import pickle
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient
from safetensors.numpy import load, save

from tests.api.helpers import upload_voice
from tests.conftest import bearer
from tests.qwen3.tiny_checkpoint import HIDDEN
from tests.support.apps import app_on, tome_of
from webapi.cli import mint_key
from worker import counters
from worker.config import load_settings
from worker.engines.base import SynthesisRequest
from worker.voices.embedding import MAX_EMBEDDING_BYTES
from worker.voices.prompts import build_voice, load_voice_prompt
from worker.voices.state import BuildOutcome

NAME = "ref_spk_embedding"


@pytest.fixture
def app(tiny_dir: Path, tmp_path: Path) -> Iterator[Flask]:
    env = {
        "TOME_QWEN3_MODEL_DIR": str(tiny_dir),
        "TOME_QWEN3_DEVICE": "cpu",
        "TOME_QWEN3_MAX_NEW_TOKENS": "8",
    }
    with app_on(load_settings(env, data_dir=tmp_path / "var", engine="qwen3-tts")) as app:
        yield app


def _vector(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(HIDDEN).astype(np.float32)


def _post(client: FlaskClient, user: dict[str, str], data: bytes, name: str = "xvec", **fields: str) -> Any:
    form = {"name": name, **fields, "embedding": (io.BytesIO(data), "voice.safetensors")}
    return client.post("/v1/voices", data=form, headers=user, content_type="multipart/form-data")


def test_an_embedding_voice_is_ready_at_once_renders_and_exports_the_same_embedding(
    app: Flask, client: FlaskClient, user: dict[str, str]
) -> None:
    vector = _vector(1)
    response = _post(client, user, save({NAME: vector}, metadata={"from": "another deployment"}))
    assert response.status_code == 202, response.json
    voice = response.json
    assert voice["cache_status"] == "ready"  # no build: the embedding is the prompt
    assert voice["cache_engine"].startswith("qwen3-tts qwen3-tts/prompt-v1/")
    assert voice["ref_text"] == ""
    assert voice["audio_duration"] == 0.0
    assert client.get(f"/v1/voices/{voice['id']}", headers=user).json["cache_status"] == "ready"

    rt = tome_of(app).runtime
    assert counters.read_all(tome_of(app).sessions()).get((counters.BUILDS, "qwen3-tts"), 0) == 0
    prompt, _language = load_voice_prompt(rt, uuid.UUID(voice["id"]))
    np.testing.assert_array_equal(prompt[NAME], vector)
    assert prompt["x_vector_only"].tolist() == [1]
    assert prompt["ref_code"].shape == (0, 4)
    [wave] = rt.engine().synthesize([SynthesisRequest(text="Hello there.", prompt=prompt, seed=3)])
    assert wave.size > 0

    exported = client.get(f"/v1/voices/{voice['id']}/embedding", headers=user)
    assert exported.status_code == 200
    assert exported.mimetype == "application/octet-stream"
    assert "attachment" in exported.headers["Content-Disposition"]
    np.testing.assert_array_equal(load(exported.data)[NAME], vector)
    # Exported once, enrolled again (as on another deployment of the same checkpoint): the same voice.
    again = _post(client, user, exported.data, name="moved")
    assert again.status_code == 202
    assert again.json["audio_sha256"] == voice["audio_sha256"]

    # A forced rebuild re-reads the embedding (nothing to encode) and keeps the voice ready.
    assert build_voice(rt, uuid.UUID(voice["id"]), force=True) == BuildOutcome.BUILT
    assert client.get(f"/v1/voices/{voice['id']}", headers=user).json["cache_status"] == "ready"


def test_a_recorded_voice_exports_its_embedding_once_built(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    audio, text = reference_audio
    voice = upload_voice(client, user, audio, name="recorded", ref_text=text)
    assert voice.status_code == 202
    url = f"/v1/voices/{voice.json['id']}/embedding"
    pending = client.get(url, headers=user)
    assert pending.status_code == 409
    assert "not built yet" in pending.json["error"]["message"]
    rt = tome_of(app).runtime
    assert build_voice(rt, uuid.UUID(voice.json["id"])) == BuildOutcome.BUILT
    exported = client.get(url, headers=user)
    assert exported.status_code == 200
    prompt, _ = load_voice_prompt(rt, uuid.UUID(voice.json["id"]))
    np.testing.assert_array_equal(load(exported.data)[NAME], prompt[NAME])
    mallory = bearer(mint_key(app, owner="mallory", name="m", admin=False))
    assert client.get(url, headers=mallory).status_code == 404


def _torch_file() -> bytes:
    """A torch.save file; made when its case runs (torch is not imported when the module is collected)."""
    import torch

    buffer = io.BytesIO()
    torch.save({NAME: torch.zeros(HIDDEN)}, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("label", "data", "status", "message"),
    [
        ("a pickle", pickle.dumps({NAME: [0.0] * HIDDEN}), 422, "not a safetensors file"),
        ("a torch.save file (zip + pickle)", _torch_file, 422, "not a safetensors file"),
        ("float64", save({NAME: np.zeros(HIDDEN, np.float64)}), 422, "must be float32"),
        ("another checkpoint's width", save({NAME: np.zeros(2048, np.float32)}), 422, "must have shape"),
        ("another tensor name", save({"xvector": np.zeros(HIDDEN, np.float32)}), 422, "exactly one tensor"),
        ("NaN", save({NAME: np.full(HIDDEN, np.nan, np.float32)}), 422, "NaN or infinite"),
        ("infinity", save({NAME: np.full(HIDDEN, -np.inf, np.float32)}), 422, "NaN or infinite"),
        ("an empty file", b"", 422, "not a safetensors file"),
        ("a huge file", b"\0" * (MAX_EMBEDDING_BYTES + 1), 413, "larger than"),
    ],
)
def test_hostile_embedding_files_are_refused_and_nothing_is_kept(
    app: Flask,
    client: FlaskClient,
    user: dict[str, str],
    label: str,
    data: bytes | Callable[[], bytes],
    status: int,
    message: str,
) -> None:
    response = _post(client, user, data() if callable(data) else data)
    assert response.status_code == status, (label, response.json)
    assert response.json["error"]["field"] == "embedding", label
    assert message in response.json["error"]["message"], (label, response.json)
    assert client.get("/v1/voices", headers=user).json["voices"] == []
    voices = tome_of(app).settings.storage.data_dir / "voices"
    assert not voices.exists() or not any(voices.rglob("*.safetensors")), label


def test_an_embedding_needs_no_transcript_but_a_valid_name(client: FlaskClient, user: dict[str, str]) -> None:
    data = save({NAME: _vector()})
    bad = _post(client, user, data, name="../etc")
    assert bad.status_code == 422
    assert bad.json["error"]["field"] == "name"
    with_text = _post(client, user, data, name="with-text", ref_text="Any words.")
    assert with_text.status_code == 202
    assert with_text.json["ref_text"] == "Any words."

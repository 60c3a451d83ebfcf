"""Speaker-embedding voices with an engine that has no embeddings (espeak, the default): a clear 422.

The accepting side (Qwen3-TTS x-vector-only mode) is tested in tests/qwen3/test_embedding_voices.py."""

from __future__ import annotations

import io

import numpy as np
from flask import Flask
from flask.testing import FlaskClient
from safetensors.numpy import save

from tests.api.helpers import upload_voice
from tests.conftest import bearer
from webapi.cli import mint_key


def _embedding_form(name: str = "xvec") -> dict[str, object]:
    data = save({"ref_spk_embedding": np.zeros(32, np.float32)})
    return {"name": name, "embedding": (io.BytesIO(data), "voice.safetensors")}


def test_an_engine_without_embeddings_refuses_an_embedding_upload(
    client: FlaskClient, user: dict[str, str]
) -> None:
    response = client.post(
        "/v1/voices", data=_embedding_form(), headers=user, content_type="multipart/form-data"
    )
    assert response.status_code == 422, response.json
    assert response.json["error"]["code"] == "embedding_unsupported"
    assert response.json["error"]["field"] == "embedding"
    assert "espeak" in response.json["error"]["message"]
    assert client.get("/v1/voices", headers=user).json["voices"] == []


def test_audio_and_embedding_together_are_refused(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    form = {**_embedding_form(), "ref_text": "hello", "audio": (io.BytesIO(reference_audio[0]), "r.wav")}
    response = client.post("/v1/voices", data=form, headers=user, content_type="multipart/form-data")
    assert response.status_code == 422
    assert "not both" in response.json["error"]["message"]


def test_export_is_a_422_for_such_an_engine_and_a_404_for_another_owner(
    app: Flask, client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    voice = upload_voice(client, user, reference_audio[0], ref_text=reference_audio[1])
    assert voice.status_code == 202
    url = f"/v1/voices/{voice.json['id']}/embedding"
    response = client.get(url, headers=user)
    assert response.status_code == 422
    assert response.json["error"]["code"] == "embedding_unsupported"
    mallory = bearer(mint_key(app, owner="mallory", name="m", admin=False))
    assert client.get(url, headers=mallory).status_code == 404
    assert client.get("/v1/voices/not-a-uuid/embedding", headers=user).status_code == 404
    assert client.get(url).status_code == 401

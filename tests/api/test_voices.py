from __future__ import annotations

import io
import wave
from collections.abc import Callable

import numpy as np
from flask import Flask
from flask.testing import FlaskClient

from tests.api.helpers import upload_voice
from tests.conftest import bearer
from webapi.cli import mint_key
from worker.config import Settings


def test_upload_voice_returns_pending_voice_and_stores_reference(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str], settings: Settings
) -> None:
    audio, text = reference_audio
    response = upload_voice(client, user, audio, name="Grace", ref_text=text)
    assert response.status_code == 202, response.json
    voice = response.json
    assert voice["name"] == "Grace"
    assert voice["cache_status"] == "pending"
    assert voice["audio_duration"] > 1.0
    stored = list((settings.storage.data_dir / "voices" / voice["id"]).glob("*.wav"))
    assert len(stored) == 1
    assert client.get(f"/v1/voices/{voice['id']}", headers=user).json["id"] == voice["id"]
    assert [v["id"] for v in client.get("/v1/voices", headers=user).json["voices"]] == [voice["id"]]


def test_duplicate_name_is_409_and_delete_frees_it(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str], settings: Settings
) -> None:
    audio, _ = reference_audio
    first = upload_voice(client, user, audio).json
    again = upload_voice(client, user, audio)
    assert again.status_code == 409
    assert again.json["error"]["field"] == "name"
    assert client.delete(f"/v1/voices/{first['id']}", headers=user).status_code == 204
    assert not (settings.storage.data_dir / "voices" / first["id"]).exists()
    assert client.get(f"/v1/voices/{first['id']}", headers=user).status_code == 404
    assert upload_voice(client, user, audio).status_code == 202


def _wav_bytes(samples: np.ndarray, rate: int = 16000, channels: int = 1) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((samples * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def test_bad_audio_is_rejected_with_a_named_problem_and_nothing_stored(
    client: FlaskClient, user: dict[str, str], settings: Settings
) -> None:
    rng = np.random.default_rng(1)
    cases = {
        "empty file": b"",
        "not audio": rng.bytes(5000),
        "silence": _wav_bytes(np.zeros(32000)),
        "too short": _wav_bytes(0.3 * np.sin(np.arange(4000) / 10.0)),
    }
    for label, payload in cases.items():
        response = upload_voice(client, user, payload, name=f"v{len(payload)}")
        assert 400 <= response.status_code < 500, label
        assert response.json["error"]["field"] == "audio", label
        assert response.json["error"]["code"].startswith("audio_"), (label, response.json)
    assert not (settings.storage.data_dir / "voices").exists() or not list(
        (settings.storage.data_dir / "voices").iterdir()
    )
    assert list((settings.storage.data_dir / "uploads").glob("*")) == []


def test_oversized_upload_is_413(make_app: Callable[..., Flask]) -> None:
    small = make_app(max_upload_bytes=10_000)
    headers = bearer(mint_key(small, "carol", "k", admin=False))
    response = upload_voice(small.test_client(), headers, b"\0" * 20_000)
    assert response.status_code == 413
    assert response.json["error"]["code"] == "too_large"


def test_invalid_fields_name_the_field(
    client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    audio, _ = reference_audio
    for fields, field in [
        ({"name": "../../etc/passwd"}, "name"),
        ({"name": ""}, "name"),
        ({"ref_text": ""}, "ref_text"),
        ({"language": "english!"}, "language"),
    ]:
        body = {"name": "ok", "ref_text": "words", **fields}
        response = upload_voice(client, user, audio, **body)
        assert response.status_code == 422, (fields, response.json)
        assert response.json["error"]["field"] == field
    no_file = client.post(
        "/v1/voices", data={"name": "x", "ref_text": "y"}, headers=user, content_type="multipart/form-data"
    )
    assert no_file.status_code == 422
    assert no_file.json["error"]["field"] == "audio"
    as_json = client.post("/v1/voices", json={"name": "x"}, headers=user)
    assert as_json.status_code == 415

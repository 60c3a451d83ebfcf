"""Small helpers the API tests share."""

from __future__ import annotations

import io
from typing import Any

from flask.testing import FlaskClient


def upload_voice(
    client: FlaskClient,
    headers: dict[str, str],
    audio: bytes,
    name: str = "narrator",
    ref_text: str = "hello there",
    **fields: str,
) -> Any:
    data: dict[str, Any] = {"name": name, "ref_text": ref_text, **fields}
    data["audio"] = (io.BytesIO(audio), "reference.wav")
    return client.post("/v1/voices", data=data, headers=headers, content_type="multipart/form-data")


def submit_job(client: FlaskClient, headers: dict[str, str], voice: str, **body: Any) -> Any:
    payload = {"title": "Test", "script": "Hello world. This is a test.", "voice": voice}
    payload.update(body)
    return client.post("/v1/jobs", json=payload, headers=headers)

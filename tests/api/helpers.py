"""Small helpers the API tests share."""

from __future__ import annotations

import io
import uuid
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from models import Chunk
from tests.support.apps import tome_of


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


def chunk_voice_ids(app: Flask, job_id: str) -> list[str]:
    """The voice id of each chunk of a job, in chunk order, straight from the database."""
    sessions = tome_of(app).sessions
    rows = sessions.scalars(
        select(Chunk.voice_id).where(Chunk.job_id == uuid.UUID(job_id)).order_by(Chunk.seq)
    ).all()
    return [str(voice_id) for voice_id in rows]

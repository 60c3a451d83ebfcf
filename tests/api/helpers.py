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
from worker.jobs.preview import preview_script


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


def preview_of(app: Flask, response: Any) -> Any:
    """The answer a preview request ends with: ``response`` itself when answered inline, else (202) the
    preview planned here by the worker's own task body, as GET /v1/previews/{id} serves it."""
    if response.status_code != 202:
        return response
    preview_script(tome_of(app).runtime, uuid.UUID(response.json["preview"]))
    headers = {"Authorization": response.request.headers["Authorization"]}
    return app.test_client().get(response.headers["Location"], headers=headers)

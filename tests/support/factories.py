"""The builders tests share: voices uploaded and jobs submitted through the API, a job's chunks read back
from the database, a recording's median pitch. A helper that two test modules need lives here, not in
either of them (tests/test_helpers_unique.py checks that no helper is defined in two test modules)."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from models import Chunk
from tests.support.apps import tome_of
from tests.support.audio import REFERENCE_TEXT, TRANSCRIPT, pitched_reference
from tests.support.inline import Inline
from worker.audio import read_wav
from worker.engines.pitch import f0_statistics, track_pitch
from worker.jobs.preview import preview_script
from worker.task_names import BUILD_VOICE, START_JOB


def upload_voice(
    client: FlaskClient,
    headers: dict[str, str],
    audio: bytes,
    name: str = "narrator",
    ref_text: str = REFERENCE_TEXT,
    **fields: str,
) -> Any:
    """``POST /v1/voices`` (multipart) with ``audio`` as the reference; the response, whatever it is. The
    default ``ref_text`` is what the shared reference recording (``reference_audio``) says."""
    data: dict[str, Any] = {"name": name, "ref_text": ref_text, **fields}
    data["audio"] = (io.BytesIO(audio), "reference.wav")
    return client.post("/v1/voices", data=data, headers=headers, content_type="multipart/form-data")


def add_voice(client: FlaskClient, headers: dict[str, str], audio: tuple[bytes, str], name: str) -> str:
    """Upload ``audio`` (recording, transcript) as voice ``name``; its id (the upload must be accepted)."""
    response = upload_voice(client, headers, audio[0], name=name, ref_text=audio[1])
    assert response.status_code == 202, response.json
    voice_id: str = response.json["id"]
    return voice_id


def add_pitched_voices(
    client: FlaskClient, headers: dict[str, str], folder: Path, pitches: Mapping[str, float]
) -> dict[str, str]:
    """One voice per name, its reference spoken at the given median pitch (Hz, 170 words a minute):
    distinct speakers for tests that check each line is read in its voice. Name -> voice id."""
    return {
        name: add_voice(
            client, headers, (pitched_reference(folder, f0, 170.0).read_bytes(), TRANSCRIPT), name
        )
        for name, f0 in pitches.items()
    }


def submit_job(client: FlaskClient, headers: dict[str, str], voice: str, **body: Any) -> Any:
    """``POST /v1/jobs`` with a short default script, ``body`` overriding any field; the response."""
    payload = {"title": "Test", "script": "Hello world. This is a test.", "voice": voice}
    payload.update(body)
    return client.post("/v1/jobs", json=payload, headers=headers)


def post_script_file(
    client: FlaskClient, headers: dict[str, str], path: str, job: dict[str, Any], data: bytes, filename: str
) -> Any:
    """POST ``job`` (the JSON fields) with ``data`` as its script file named ``filename``, as
    multipart/form-data (``/v1/jobs`` or ``/v1/scripts/preview``); the response."""
    form = {"job": json.dumps(job), "script": (io.BytesIO(data), filename)}
    return client.post(path, data=form, headers=headers, content_type="multipart/form-data")


def job_chunks(app: Flask, job_id: str) -> list[Chunk]:
    """A job's chunk rows in order, through the app's session registry (rows it holds already come back
    as they are held: call ``sessions.remove()`` first to read what another process wrote since)."""
    query = select(Chunk).where(Chunk.job_id == uuid.UUID(job_id)).order_by(Chunk.seq)
    return list(tome_of(app).sessions.scalars(query))


def chunk_voice_ids(app: Flask, job_id: str) -> list[str]:
    """The voice id of each chunk of a job, in chunk order, straight from the database."""
    sessions = tome_of(app).sessions
    rows = sessions.scalars(
        select(Chunk.voice_id).where(Chunk.job_id == uuid.UUID(job_id)).order_by(Chunk.seq)
    ).all()
    return [str(voice_id) for voice_id in rows]


def median_f0(path: str | Path) -> float:
    """The median pitch (Hz) of the voiced speech in a WAV file (there must be some)."""
    stats = f0_statistics(track_pitch(*read_wav(path)))
    assert stats is not None, f"no voiced speech in {path}"
    return float(stats[0])


def table_cells(line: str) -> list[str]:
    """The cells of one row of a Markdown table (``| a | b |``), stripped."""
    assert line.startswith("| "), line
    assert line.endswith(" |"), line
    return [cell.strip() for cell in line[1:-1].split("|")]


def preview_of(app: Flask, response: Any) -> Any:
    """The answer a preview request ends with: ``response`` itself when answered inline, else (202) the
    preview planned here by the worker's own task body, as GET /v1/previews/{id} serves it."""
    if response.status_code != 202:
        return response
    preview_script(tome_of(app).runtime, uuid.UUID(response.json["preview"]))
    headers = {"Authorization": response.request.headers["Authorization"]}
    return app.test_client().get(response.headers["Location"], headers=headers)


def builds_sent(inline: Inline) -> list[str]:
    """The voice ids of the prompt builds the app sent to ``inline``, in order."""
    return [str(args[0]) for name, args in inline.sent if name == BUILD_VOICE]


def render_inline(
    app: Flask, client: FlaskClient, headers: dict[str, str], job_id: str, voice_id: str | None = None
) -> dict[str, Any]:
    """Render a submitted job in this process (its voice's prompt built first when ``voice_id`` is given)
    and return it as ``GET /v1/jobs/{id}`` shows it, which must say it succeeded."""
    inline = Inline(tome_of(app).runtime)
    if voice_id is not None:
        inline.enqueue(BUILD_VOICE, [voice_id])
    inline.enqueue(START_JOB, [job_id])
    inline.run()
    done: dict[str, Any] = dict(client.get(f"/v1/jobs/{job_id}", headers=headers).json or {})
    assert done["status"] == "succeeded", done
    return done
